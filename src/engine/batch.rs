//! Batched decoding (`batch` = N > 1): queued jobs that can share a run go
//! to the NPU together, one slot each, and every slot streams to its own
//! generation.
//!
//! One scheduler task owns the waiting jobs. It takes the queue's turn, then
//! gathers, in arrival order, up to N jobs with the same sampling values and
//! LoRA adapter as the oldest one (the runtime takes sampling, the adapter,
//! `max_new_tokens` and `keep_history` per run) and starts one batched run: prompt input, no
//! history kept, the group's largest token limit (each generation ends its
//! own reply at its own limit). It never waits for a batch to fill: a lone job
//! starts at once. Slots without a job get a one-token filler input, because
//! the runtime reads exactly N inputs (`rkllm-sys/src/batch.rs`). A job that
//! arrives while a batch runs waits for the next run: a run cannot take a
//! slot mid-way.
//!
//! A slot is left by its generation (client gone, stop sequence, limit,
//! time-out): its tokens are dropped from then on, and the run is aborted
//! only once every slot has been left — `rkllm_abort` ends the whole run.

use super::outcome::EndReason;
use super::plan::RunPlan;
use super::queue::{Permit, Place};
use super::Engine;
use rkllm_sys::{BatchInput, BatchRequest, Event, RunControl, RunInput};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

/// The text of a slot no job fills: one token, so it adds next to nothing to
/// the prefill (its reply is decoded by the runtime and never read).
const FILLER: &str = " ";

/// Aborting "my run": the run itself, or, in a batch, this slot only.
#[derive(Clone)]
pub(super) struct SlotControl {
    run: RunControl,
    /// `Some` for a batch slot: how many slots are still wanted.
    batch: Option<Arc<AtomicUsize>>,
    left: Arc<AtomicBool>,
}

impl SlotControl {
    pub fn single(run: RunControl) -> Self {
        SlotControl { run, batch: None, left: Arc::default() }
    }

    pub fn is_batched(&self) -> bool {
        self.batch.is_some()
    }

    /// Ends this job's part of the run: a single run is aborted; a batch
    /// slot is left, and the batch aborted when no slot is wanted any more.
    pub fn abort(&self) {
        match &self.batch {
            None => self.run.abort(),
            Some(wanted) => {
                if !self.left.swap(true, Ordering::SeqCst) && wanted.fetch_sub(1, Ordering::SeqCst) == 1 {
                    self.run.abort();
                }
            }
        }
    }
}

/// A slot of a started batch, handed to its generation.
pub(super) struct Slot {
    pub control: SlotControl,
    pub events: UnboundedReceiver<Event>,
    /// Jobs in the batch (fillers not counted).
    pub jobs: u32,
}

/// A job waiting for a batch.
struct Waiting {
    plan: Arc<RunPlan>,
    place: Place,
    slot: oneshot::Sender<Result<Slot, EndReason>>,
}

/// The engine's side of the scheduler: where jobs are handed in.
pub(super) struct Scheduler {
    size: usize,
    jobs: UnboundedSender<Waiting>,
    /// Taken by the first job, which starts the task (the engine is built
    /// outside any async runtime).
    task: Mutex<Option<UnboundedReceiver<Waiting>>>,
}

impl Scheduler {
    pub fn new(size: u8) -> Self {
        let (jobs, rx) = mpsc::unbounded_channel();
        Scheduler { size: usize::from(size), jobs, task: Mutex::new(Some(rx)) }
    }

    pub fn size(&self) -> usize {
        self.size
    }
}

impl Engine {
    /// Waits for a slot in a batched run (holding `place` meanwhile).
    pub(super) async fn batch_slot(
        self: &Arc<Self>,
        scheduler: &Scheduler,
        place: Place,
        plan: Arc<RunPlan>,
    ) -> Result<Slot, EndReason> {
        let pending = scheduler.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(jobs) = pending {
            tokio::spawn(schedule(Arc::downgrade(self), jobs));
        }
        let (slot, assigned) = oneshot::channel();
        let gone = || EndReason::RuntimeError("the batch scheduler stopped".into());
        scheduler.jobs.send(Waiting { plan, place, slot }).map_err(|_| gone())?;
        assigned.await.map_err(|_| gone())?
    }

    /// Starts one batched run for `group` and waits until `rkllm_run` returned.
    async fn run_batch(&self, permit: Permit, group: Vec<Waiting>, size: usize) {
        if self.is_closing() {
            for job in group {
                let _ = job.slot.send(Err(EndReason::ShuttingDown));
            }
            return;
        }
        // The group shares sampling and adapter (`take_group`); the run goes
        // on to the longest limit, each slot ending its reply at its own.
        let first = group[0].plan.clone();
        let max_new_tokens = group.iter().filter_map(|j| j.plan.max_new_tokens).max();
        let jobs = group.len();
        let mut inputs = Vec::with_capacity(size);
        let mut channels = Vec::with_capacity(size);
        let mut receivers = Vec::with_capacity(jobs);
        let mut places = Vec::with_capacity(jobs);
        let mut replies = Vec::with_capacity(jobs);
        for job in group {
            let (tx, rx) = mpsc::unbounded_channel();
            inputs.push(job.plan.batch_input());
            channels.push(Some(tx));
            receivers.push(rx);
            places.push(job.place);
            replies.push(job.slot);
        }
        let filler = BatchInput { input: RunInput::Prompt(FILLER.into()), enable_thinking: false };
        inputs.resize(size, filler);
        channels.resize(size, None);
        let turn = self.queue.start(permit, places);
        let request =
            BatchRequest { slots: inputs, max_new_tokens, sampling: first.sampling, lora: first.lora.clone() };
        let (control, done) = match self.model.submit_batch(request, channels) {
            Ok(submitted) => submitted,
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(EndReason::RuntimeError(e.to_string())));
                }
                return;
            }
        };
        let wanted = Arc::new(AtomicUsize::new(jobs));
        for (reply, events) in replies.into_iter().zip(receivers) {
            let control = SlotControl { run: control.clone(), batch: Some(wanted.clone()), left: Arc::default() };
            if let Err(Ok(slot)) = reply.send(Ok(Slot { control, events, jobs: jobs as u32 })) {
                // Its client left while the batch was being put together.
                slot.control.abort();
            }
        }
        if let Ok(finish) = done.await {
            for surprise in &finish.surprises {
                tracing::error!(
                    surprise,
                    "the runtime's batched run contradicts rkllmd's reading of the manual (rkllm-sys/src/batch.rs)"
                );
            }
            tracing::debug!(jobs, size, code = finish.code, perf = ?finish.perf, "batched run ended");
        }
        self.sample_kv_cache();
        drop(turn);
    }
}

/// The scheduler task: one batched run at a time, for as long as the engine lives.
async fn schedule(engine: Weak<Engine>, mut jobs: UnboundedReceiver<Waiting>) {
    let mut waiting = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match jobs.recv().await {
                Some(job) => waiting.push_back(job),
                None => return,
            }
        }
        let Some(engine) = engine.upgrade() else { return };
        let Some(scheduler) = engine.scheduler.as_ref() else { return };
        let size = scheduler.size();
        let permit = engine.queue.wait_permit().await;
        while let Ok(job) = jobs.try_recv() {
            waiting.push_back(job);
        }
        // Jobs whose clients left while waiting free their places here.
        waiting.retain(|job| !job.slot.is_closed());
        let group = take_group(&mut waiting, size);
        if !group.is_empty() {
            engine.run_batch(permit, group, size).await;
        }
    }
}

/// The oldest job and, in arrival order, up to `size − 1` more that can share
/// its run (the same sampling values and adapter).
fn take_group(waiting: &mut VecDeque<Waiting>, size: usize) -> Vec<Waiting> {
    let Some(first) = waiting.pop_front() else { return Vec::new() };
    let mut group = vec![first];
    let mut rest = VecDeque::with_capacity(waiting.len());
    while let Some(job) = waiting.pop_front() {
        if group.len() < size && job.plan.shares_run_with(&group[0].plan) {
            group.push(job);
        } else {
            rest.push_back(job);
        }
    }
    *waiting = rest;
    group
}

#[cfg(test)]
mod tests {
    use super::super::queue::Queue;
    use super::*;

    fn job(queue: &Queue, top_k: i32) -> (Waiting, oneshot::Receiver<Result<Slot, EndReason>>) {
        lora_job(queue, top_k, None)
    }

    fn lora_job(
        queue: &Queue,
        top_k: i32,
        lora: Option<&str>,
    ) -> (Waiting, oneshot::Receiver<Result<Slot, EndReason>>) {
        let (slot, rx) = oneshot::channel();
        let job = crate::engine::Job {
            id: "j".into(),
            prompt: format!("k{top_k}"),
            max_new_tokens: Some(8),
            sampling: crate::sampling::SamplingOverrides { top_k: Some(top_k), ..Default::default() },
            enable_thinking: false,
            tokens: None,
            lora: lora.map(str::to_owned),
            cache: Default::default(),
        };
        let plan = RunPlan::new(rkllm_sys::Abi::V1_3, rkllm_sys::SamplingParams::RKLLM_DEFAULTS, 64, job);
        (Waiting { plan: Arc::new(plan), place: queue.try_enter().expect("room"), slot }, rx)
    }

    #[test]
    fn jobs_with_different_adapters_do_not_share_a_run() {
        let queue = Queue::new(16, crate::engine::Npu::default());
        let mut receivers = Vec::new();
        let mut waiting: VecDeque<_> = [None, Some("a"), None, Some("a"), Some("b")]
            .into_iter()
            .map(|lora| {
                let (w, rx) = lora_job(&queue, 1, lora);
                receivers.push(rx);
                w
            })
            .collect();
        let adapters = |g: &[Waiting]| g.iter().map(|j| j.plan.lora.clone()).collect::<Vec<_>>();
        assert_eq!(adapters(&take_group(&mut waiting, 4)), vec![None, None]);
        assert_eq!(adapters(&take_group(&mut waiting, 4)), vec![Some("a".to_owned()); 2]);
        assert_eq!(adapters(&take_group(&mut waiting, 4)), vec![Some("b".to_owned())]);
    }

    #[test]
    fn groups_share_sampling_keep_arrival_order_and_size() {
        let queue = Queue::new(16, crate::engine::Npu::default());
        let mut receivers = Vec::new();
        let mut waiting: VecDeque<_> = [3, 2, 3, 3, 2, 3, 3]
            .into_iter()
            .map(|k| {
                let (w, rx) = job(&queue, k);
                receivers.push(rx);
                w
            })
            .collect();
        let top_k = |g: &[Waiting]| g.iter().map(|j| j.plan.sampling.map(|s| s.top_k)).collect::<Vec<_>>();
        let first = take_group(&mut waiting, 4);
        assert_eq!(top_k(&first), vec![Some(3); 4], "the oldest job's sampling, up to the batch size");
        let prompts: Vec<_> = first.iter().map(|j| j.plan.prompt.clone()).collect();
        assert_eq!(prompts[3], "k3");
        assert_eq!(top_k(&take_group(&mut waiting, 4)), vec![Some(2); 2], "then the next oldest");
        assert_eq!(top_k(&take_group(&mut waiting, 4)), vec![Some(3)], "a lone job is not held back");
        assert!(take_group(&mut waiting, 4).is_empty());
    }
}
