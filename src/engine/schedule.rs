//! The scheduler of one model's runs: every generation waits here, and one
//! task per engine picks what runs next — one job (`batch` = 1), or a group
//! that shares a batched run (`batch.rs`).
//!
//! * **Locality.** Of the waiting jobs, one whose state is warm (today: it
//!   extends the conversation in the KV cache, `Engine::is_warm`) goes
//!   before older ones, because its prefill is mostly done. Fairness bounds
//!   it: a job passed over `max_passed_over` times goes first, whatever is
//!   warm (0: strict arrival order). So no job waits behind more than
//!   `max_passed_over` others that arrived after it. With `batch` > 1 a
//!   run with one job that continues no slot clears them all, so warm jobs
//!   go first only when a whole run of them waits, and then together;
//!   otherwise arrival order, which keeps groups of conversations that take
//!   turns at the slots together (`batch_files.rs`).
//! * **Gathering** (`batch` > 1). A batched run cannot take a job once it
//!   started, so after a run ends the scheduler waits for the clients of
//!   that run to send again (closed loop) before starting the next one with
//!   empty slots: they then share runs instead of splitting into groups
//!   that never merge, and keep their slots' conversations (a filler in a
//!   slot costs it its conversation). It waits as long as these clients
//!   take to come back (`returns.rs`: measured from each returning
//!   conversation, at least `gather`, at most `gather_ceiling`). It waits for as many as it
//!   expects — those waiting plus the last run's jobs, at most a full batch
//!   — so a lone client (expected alone) never waits, and nothing waits
//!   after an idle spell (no run within `gather`). A waiting job that
//!   arrived after a reply of the last run ended may be that client come
//!   back, so it is counted once, not as a newcomer too ([`came_back`]).

use super::batch::BatchRun;
use super::batch::{BatchJob, Slot};
use super::job::CacheHints;
use super::outcome::EndReason;
use super::plan::RunPlan;
use super::queue::{Permit, Place, Queue, Turn};
use super::returns::Returns;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How the scheduler picks (the composition root fills it in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleSettings {
    /// Sequences per run (`n_batch`).
    pub batch: u8,
    /// How long a batch waits at least after a run for more jobs (`batch` > 1).
    pub gather: Duration,
    /// The longest it waits when the clients' measured return time asks for more.
    pub gather_ceiling: Duration,
    /// How often a waiting job may be passed over for a warm one.
    pub max_passed_over: u32,
    /// Whether the load probes for short batches (`short_batch.rs`).
    pub probe_short: bool,
}

/// What a job is given when its turn comes.
pub(super) enum Assigned {
    /// A run of its own: the turn, held until its run has returned.
    Alone(Turn),
    /// A slot of a batched run (the scheduler holds that run's turn).
    Batched(Box<Slot>),
}

/// A job waiting for its turn.
pub(super) struct Waiting {
    /// What it runs (its ids are also what the warm test compares).
    pub job: BatchJob,
    /// Times a younger job went first.
    passed: u32,
    /// When it reached the scheduler.
    arrived: Instant,
    pub reply: oneshot::Sender<Result<Assigned, EndReason>>,
}

/// The engine's side of the scheduler: where jobs are handed in.
pub(super) struct Scheduler {
    settings: ScheduleSettings,
    jobs: UnboundedSender<Waiting>,
    /// Taken by the first job, which starts the task (the engine is built
    /// outside any async runtime).
    task: Mutex<Option<UnboundedReceiver<Waiting>>>,
}

impl Scheduler {
    pub fn new(settings: ScheduleSettings) -> Self {
        let (jobs, rx) = mpsc::unbounded_channel();
        Scheduler {
            settings: ScheduleSettings { batch: settings.batch.max(1), ..settings },
            jobs,
            task: Mutex::new(Some(rx)),
        }
    }

    pub fn size(&self) -> usize {
        usize::from(self.settings.batch)
    }
}

/// What the scheduler task asks of the engine it picks runs for
/// (`batch_runs.rs` implements it): its queue, whether a job is warm in the
/// conversation cache, and a batched run started and ended.
pub(super) trait Runs: Send + Sync + 'static {
    fn queue(&self) -> &Queue;
    fn is_warm(&self, ids: Option<&[i32]>, lora: Option<&str>) -> bool;
    /// Starts one batched run for `group`: each job's slot, in the group's
    /// order, and the run to be ended with [`Runs::end_batch`].
    fn start_batch(
        &self,
        permit: Permit,
        group: Vec<BatchJob>,
        size: usize,
    ) -> impl Future<Output = Result<(Vec<Slot>, BatchRun), EndReason>> + Send;
    /// Waits until the batched run returned; which slots were left, and when.
    fn end_batch(&self, run: BatchRun) -> impl Future<Output = Vec<(usize, Instant)>> + Send;
    /// The clients of these slots left them at these times (after their run).
    fn slots_left(&self, left: &[(usize, Instant)]);
}

impl Scheduler {
    /// Waits until the scheduler gives the job its turn (holding `place`
    /// meanwhile); dropping the future leaves the queue. The first job
    /// starts the task, which holds `runs` weakly.
    pub async fn wait_assigned<R: Runs>(
        &self,
        runs: &Arc<R>,
        place: Place,
        job: (String, Arc<RunPlan>),
        hints: CacheHints,
    ) -> Result<Assigned, EndReason> {
        let (id, plan) = job;
        let scheduler = self;
        let pending = scheduler.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(jobs) = pending {
            tokio::spawn(schedule(Arc::downgrade(runs), jobs, scheduler.settings));
        }
        let (reply, assigned) = oneshot::channel();
        let gone = || EndReason::RuntimeError("the scheduler stopped".into());
        let job = BatchJob { id, plan, hints, place };
        scheduler.jobs.send(Waiting { job, passed: 0, arrived: Instant::now(), reply }).map_err(|_| gone())?;
        assigned.await.map_err(|_| gone())?
    }
}

/// The scheduler task: one run at a time, for as long as the engine lives.
async fn schedule<R: Runs>(engine: Weak<R>, mut jobs: UnboundedReceiver<Waiting>, settings: ScheduleSettings) {
    let size = usize::from(settings.batch);
    let mut waiting = VecDeque::new();
    // Until when, and for how many jobs, the next batch gathers.
    let mut gathering: Option<(Instant, usize)> = None;
    // How soon the clients of past runs came back.
    let mut returns = Returns::default();
    loop {
        if waiting.is_empty() {
            match jobs.recv().await {
                Some(job) => join(&mut waiting, job),
                None => return,
            }
        }
        if size > 1 {
            // A window already over (the clients came later, or not at all)
            // takes what is there and counts as run out too.
            if let Some((until, expected)) = gathering.take() {
                if !gather(&mut jobs, &mut waiting, expected, until).await {
                    returns.ran_out();
                    crate::metrics::observer().metrics.batch_gather_expired();
                }
            }
        }
        let Some(engine) = engine.upgrade() else { return };
        let permit = engine.queue().wait_permit();
        tokio::pin!(permit);
        // Until the turn comes, newcomers join and jobs whose clients left
        // free their places at once (the queue's `waiting` count drops).
        let permit = loop {
            let arrived = tokio::select! {
                permit = &mut permit => break permit,
                job = jobs.recv() => job,
                () = any_left(&mut waiting) => None,
            };
            if let Some(job) = arrived {
                join(&mut waiting, job);
            }
            waiting.retain(|job| !job.reply.is_closed());
        };
        while let Ok(job) = jobs.try_recv() {
            join(&mut waiting, job);
        }
        waiting.retain(|job| !job.reply.is_closed());
        let warm = |w: &Waiting| engine.is_warm(w.job.plan.prompt.ids(), w.job.plan.lora.as_deref());
        // A batched run with a job that continues no slot clears every slot,
        // the warm jobs' too: they go first only as a whole run of them, else
        // in arrival order, which keeps the groups that take turns at the
        // slots together (their files restore them, `batch_files.rs`).
        let whole = size == 1 || waiting.iter().filter(|w| warm(w)).count() >= size;
        let warm = |w: &Waiting| whole && warm(w);
        let Some(first) = pick(&mut waiting, settings.max_passed_over, warm) else { continue };
        if size == 1 {
            let turn = engine.queue().start(permit, vec![first.job.place]);
            // A client gone since: its turn is dropped with the error, and the loop picks again.
            let _ = first.reply.send(Ok(Assigned::Alone(turn)));
        } else {
            let group = take_group(first, &mut waiting, size, settings.max_passed_over, warm);
            let ran = group.len();
            let arrivals: Vec<Instant> = group.iter().map(|w| w.arrived).collect();
            let (replies, members): (Vec<_>, Vec<_>) = group.into_iter().map(|w| (w.reply, w.job)).unzip();
            let left = match engine.start_batch(permit, members, size).await {
                Ok((slots, run)) => {
                    for (arrived, end) in arrivals.into_iter().zip(&run.homes) {
                        if let Some(end) = end {
                            returns.record(arrived.saturating_duration_since(*end), settings.gather_ceiling);
                        }
                    }
                    for (reply, slot) in replies.into_iter().zip(slots) {
                        if let Err(Ok(Assigned::Batched(slot))) = reply.send(Ok(Assigned::Batched(Box::new(slot)))) {
                            // Its client left while the batch was being put together.
                            slot.control.abort();
                        }
                    }
                    engine.end_batch(run).await
                }
                Err(reason) => {
                    for reply in replies {
                        let _ = reply.send(Err(reason.clone()));
                    }
                    Vec::new()
                }
            };
            engine.slots_left(&left);
            let mut left_at: Vec<Instant> = left.into_iter().map(|(_, at)| at).collect();
            while let Ok(job) = jobs.try_recv() {
                join(&mut waiting, job);
            }
            // Every job of the run may come back, and those waiting are here,
            // some of them perhaps clients of the run already back.
            let back = came_back(&mut left_at, waiting.iter().map(|w| w.arrived));
            let expected = (waiting.len() - back + ran).min(size);
            let window = returns.window(settings.gather, settings.gather_ceiling);
            crate::metrics::observer().metrics.batch_gather(window);
            gathering = Some((Instant::now() + window, expected));
        }
    }
}

/// A job joins the line at its queue place, not at its arrival here: a
/// request whose preparation (rendering, tokenizing) took longer than a later
/// one's keeps its place.
fn join(waiting: &mut VecDeque<Waiting>, job: Waiting) {
    let at = waiting.partition_point(|w| w.job.place.order < job.job.place.order);
    waiting.insert(at, job);
}

/// Resolves when the client of some waiting job has gone.
async fn any_left(waiting: &mut VecDeque<Waiting>) {
    if waiting.is_empty() {
        return std::future::pending().await;
    }
    futures_util::future::select_all(waiting.iter_mut().map(|job| Box::pin(job.reply.closed()))).await;
}

/// Waits until `waiting` has `expected` jobs (true) or `until` passes.
async fn gather(
    jobs: &mut UnboundedReceiver<Waiting>,
    waiting: &mut VecDeque<Waiting>,
    expected: usize,
    until: Instant,
) -> bool {
    while waiting.len() < expected {
        match tokio::time::timeout_at(until, jobs.recv()).await {
            Ok(Some(job)) => join(waiting, job),
            Ok(None) | Err(_) => return false,
        }
    }
    true
}

/// How many of the jobs that arrived at `arrivals` may be clients of the
/// last run come back: each needs a slot of that run left before it
/// arrived, and one slot counts for one job. An upper bound — a newcomer
/// after a slot's end is taken for its client, and the batch then gathers
/// one job fewer than it might — so that a client back early is never
/// expected twice (a lone client would wait the whole `gather` for itself).
fn came_back(left_at: &mut [Instant], arrivals: impl Iterator<Item = Instant>) -> usize {
    left_at.sort_unstable();
    let mut arrivals: Vec<Instant> = arrivals.collect();
    arrivals.sort_unstable();
    let mut ends = left_at.iter().peekable();
    let (mut unclaimed, mut back) = (0, 0);
    for arrived in arrivals {
        while ends.next_if(|end| **end <= arrived).is_some() {
            unclaimed += 1;
        }
        if unclaimed > 0 {
            unclaimed -= 1;
            back += 1;
        }
    }
    back
}

/// Takes the job that runs next: the oldest, unless a younger one is warm
/// and the oldest has been passed over fewer than `max_passed_over` times.
/// Every job older than the one taken counts one more pass.
fn pick(waiting: &mut VecDeque<Waiting>, max_passed_over: u32, warm: impl Fn(&Waiting) -> bool) -> Option<Waiting> {
    let oldest = waiting.front()?;
    let index =
        if oldest.passed >= max_passed_over || warm(oldest) { 0 } else { waiting.iter().position(&warm).unwrap_or(0) };
    for passed in waiting.iter_mut().take(index) {
        passed.passed += 1;
    }
    if index > 0 {
        tracing::debug!(passed = index, "a warm job goes before older ones");
    }
    waiting.remove(index)
}

/// `first` and, in arrival order, up to `size − 1` more that can share its
/// run (the same sampling values and adapter): the `preferred` ones first,
/// unless that would pass over a job `max_passed_over` times (0: strict
/// arrival order). A job that could have shared the run and was left for a
/// preferred one counts as passed over, as in [`pick`].
fn take_group(
    first: Waiting,
    waiting: &mut VecDeque<Waiting>,
    size: usize,
    max_passed_over: u32,
    preferred: impl Fn(&Waiting) -> bool,
) -> Vec<Waiting> {
    let mut group = vec![first];
    let shares = |job: &Waiting, group: &[Waiting]| job.job.plan.shares_run_with(&group[0].job.plan);
    let fair = waiting.iter().all(|w| w.passed < max_passed_over || !shares(w, &group));
    let passes: &[bool] = if fair { &[true, false] } else { &[false] };
    for &only_preferred in passes {
        let mut rest = VecDeque::with_capacity(waiting.len());
        let mut left = Vec::new();
        while let Some(job) = waiting.pop_front() {
            let fits = group.len() < size && shares(&job, &group);
            if fits && (!only_preferred || preferred(&job)) {
                group.push(job);
            } else {
                if fits {
                    left.push(rest.len());
                }
                rest.push_back(job);
            }
        }
        if only_preferred && group.len() > 1 {
            for i in left {
                rest[i].passed += 1;
            }
        }
        *waiting = rest;
    }
    group
}

#[cfg(test)]
mod tests {
    use super::super::queue::Queue;
    use super::*;

    fn job(queue: &Queue, top_k: i32, lora: Option<&str>) -> (Waiting, oneshot::Receiver<Result<Assigned, EndReason>>) {
        let (reply, rx) = oneshot::channel();
        let job = super::super::job::Job {
            max_new_tokens: Some(8),
            sampling: crate::sampling::SamplingOverrides { top_k: Some(top_k), ..Default::default() },
            lora: lora.map(str::to_owned),
            ..super::super::job::Job::new("j", format!("k{top_k}"))
        };
        let plan = RunPlan::new(rkllm_sys::Abi::V1_3, rkllm_sys::SamplingParams::RKLLM_DEFAULTS, 64, job);
        let place = queue.try_enter().expect("room");
        let job = BatchJob { id: "j".into(), plan: Arc::new(plan), hints: CacheHints::default(), place };
        let waiting = Waiting { job, passed: 0, arrived: Instant::now(), reply };
        (waiting, rx)
    }

    fn queue_of(
        jobs: impl IntoIterator<Item = (i32, Option<&'static str>)>,
    ) -> (VecDeque<Waiting>, Vec<oneshot::Receiver<Result<Assigned, EndReason>>>) {
        let queue = Queue::new(16, super::super::npu::Npu::default());
        jobs.into_iter().map(|(k, lora)| job(&queue, k, lora)).unzip()
    }

    fn group(waiting: &mut VecDeque<Waiting>, size: usize) -> Vec<Waiting> {
        match pick(waiting, 0, |_| false) {
            Some(first) => take_group(first, waiting, size, 0, |_| false),
            None => Vec::new(),
        }
    }

    #[test]
    fn jobs_with_different_adapters_do_not_share_a_run() {
        let (mut waiting, _rx) = queue_of([(1, None), (1, Some("a")), (1, None), (1, Some("a")), (1, Some("b"))]);
        let adapters = |g: &[Waiting]| g.iter().map(|w| w.job.plan.lora.clone()).collect::<Vec<_>>();
        assert_eq!(adapters(&group(&mut waiting, 4)), vec![None, None]);
        assert_eq!(adapters(&group(&mut waiting, 4)), vec![Some("a".to_owned()); 2]);
        assert_eq!(adapters(&group(&mut waiting, 4)), vec![Some("b".to_owned())]);
    }

    #[test]
    fn groups_share_sampling_keep_arrival_order_and_size() {
        let (mut waiting, _rx) = queue_of([3, 2, 3, 3, 2, 3, 3].map(|k| (k, None)));
        let top_k = |g: &[Waiting]| g.iter().map(|w| w.job.plan.sampling.map(|s| s.top_k)).collect::<Vec<_>>();
        let first = group(&mut waiting, 4);
        assert_eq!(top_k(&first), vec![Some(3); 4], "the oldest job's sampling, up to the batch size");
        assert_eq!(first[3].job.plan.prompt.text(), "k3");
        assert_eq!(top_k(&group(&mut waiting, 4)), vec![Some(2); 2], "then the next oldest");
        assert_eq!(top_k(&group(&mut waiting, 4)), vec![Some(3)], "a lone job is not held back");
        assert!(group(&mut waiting, 4).is_empty());
    }

    #[test]
    fn a_job_counts_as_come_back_only_after_a_slot_of_the_run_was_left() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // Slots left at 10 and 30 ms; jobs arrived before the first end (one
        // waiting since before the run), between the ends, and after both.
        assert_eq!(came_back(&mut [at(30), at(10)], [at(0), at(5)].into_iter()), 0);
        assert_eq!(came_back(&mut [at(30), at(10)], [at(5), at(20)].into_iter()), 1);
        assert_eq!(came_back(&mut [at(30), at(10)], [at(20), at(25)].into_iter()), 1, "one slot, one client");
        assert_eq!(came_back(&mut [at(30), at(10)], [at(40), at(20), at(50)].into_iter()), 2);
        assert_eq!(came_back(&mut [], [at(40)].into_iter()), 0);
    }

    #[test]
    fn a_group_takes_warm_jobs_first_only_while_that_passes_no_job_over_its_limit() {
        // Five jobs of one sampling wait; k5 and k6 are warm; a run takes 3.
        let prompts = |g: &[Waiting]| g.iter().map(|w| w.job.plan.prompt.text().to_owned()).collect::<Vec<_>>();
        let warm = |w: &Waiting| matches!(w.job.plan.prompt.text(), "k5" | "k6");
        let taken = |max_passed_over: u32| {
            let (mut waiting, rx) = queue_of([2, 2, 2, 2, 2].map(|k| (k, None)));
            for (w, name) in waiting.iter_mut().zip(["k2", "k3", "k4", "k5", "k6"]) {
                Arc::get_mut(&mut w.job.plan).unwrap().prompt = super::super::prompt::Prompt::new(name);
            }
            let first = waiting.pop_front().unwrap();
            let group = take_group(first, &mut waiting, 3, max_passed_over, warm);
            (prompts(&group), waiting.iter().map(|w| w.passed).collect::<Vec<_>>(), rx)
        };
        let (group, passed, _rx) = taken(2);
        assert_eq!(group, ["k2", "k5", "k6"], "the warm ones join the oldest");
        assert_eq!(passed, [1, 1], "k3 and k4, left for them, were passed over");
        let (group, passed, _rx) = taken(0);
        assert_eq!(group, ["k2", "k3", "k4"], "max_passed_over 0: arrival order");
        assert_eq!(passed, [0, 0]);
    }

    #[test]
    fn a_warm_job_goes_first_until_the_oldest_was_passed_over_enough() {
        // Jobs k2..k6 wait; the warm ones are k4 and k6 (say, follow-ups).
        let (mut waiting, _rx) = queue_of([2, 3, 4, 5, 6].map(|k| (k, None)));
        let warm = |w: &Waiting| matches!(w.job.plan.prompt.text(), "k4" | "k6");
        let mut order = Vec::new();
        while let Some(job) = pick(&mut waiting, 2, warm) {
            order.push(job.job.plan.prompt.text().to_owned());
        }
        // k4 passes k2, k3 (1 pass each); k6 passes them again (2 each, and k5
        // once): the bound is reached, so arrival order from then on.
        assert_eq!(order, ["k4", "k6", "k2", "k3", "k5"]);

        let (mut waiting, _rx) = queue_of([2, 3, 4].map(|k| (k, None)));
        let first = pick(&mut waiting, 0, |w| w.job.plan.prompt.text() == "k4").unwrap();
        assert_eq!(first.job.plan.prompt.text(), "k2", "0: strict arrival order");
    }
}
