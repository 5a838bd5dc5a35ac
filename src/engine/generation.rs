//! One admitted job as a stream of events, from its turn in the queue to the
//! runtime's return.
//!
//! Dropping a [`Generation`] (a client went away) leaves the queue if it was
//! still waiting, or aborts the run (`guards.rs`).

use super::batch::SlotControl;
use super::guards::{RunGuard, WaitGuard};
use super::halt::ABORT_GRACE;
use super::job::{CacheHints, Job};
use super::kv::Plan;
use super::kv_images;
use super::outcome::{CacheUse, Deadline, EndReason, GenEvent, Outcome};
use super::plan::RunPlan;
use super::prompt_cache::Expect as PromptCacheExpect;
use super::queue::{Place, Turn};
use super::schedule::Assigned;
use super::Engine;
use crate::metrics::{ImageTimings, RuntimePerf, Timeline};
use futures_util::Stream;
use rkllm_sys::{Event, Finish, RunInput, RunRequest};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

/// What the consumer tells a running generation: end early (a stop
/// sequence matched). Set before the run starts, it aborts it at once.
#[derive(Default)]
struct StopState {
    requested: bool,
    control: Option<SlotControl>,
}

type StopHandle = Arc<Mutex<StopState>>;

fn stop_requested(stop: &StopHandle) -> bool {
    stop.lock().map(|s| s.requested).unwrap_or(true)
}

pub struct Generation {
    /// Sampling fields the request set that this runtime cannot apply per run.
    pub ignored_params: Vec<&'static str>,
    stop: StopHandle,
    events: Pin<Box<dyn Stream<Item = GenEvent> + Send>>,
    abandoned: Option<oneshot::Receiver<Outcome>>,
    engine: Arc<Engine>,
    job: String,
}

impl Generation {
    /// Aborts the run; the stream still ends with `Done` (reason `Stopped`).
    pub fn stop(&self) {
        let mut state = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        state.requested = true;
        if let Some(control) = &state.control {
            control.abort();
        }
    }

    /// The job's outcome in case this generation is dropped before its
    /// `Done` (the client went away): sent once the job left the queue or
    /// its aborted run returned. Never sent when `Done` was delivered.
    pub fn take_abandoned(&mut self) -> Option<oneshot::Receiver<Outcome>> {
        self.abandoned.take()
    }

    /// How the client was shown the finished reply (the api's view of it;
    /// `reasoned`: the reply held reasoning the view leaves out; `shown`: its
    /// tokens the client got), so that a follow-up resending it can reuse
    /// the cached reply.
    pub fn seen_as(&self, view: String, reasoned: bool, shown: u32) {
        self.engine.reply_seen(&self.job, view, reasoned, shown);
    }
}

impl Stream for Generation {
    type Item = GenEvent;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<GenEvent>> {
        self.events.as_mut().poll_next(cx)
    }
}

impl Engine {
    /// Queues a job in the place [`Engine::reserve`] gave; the returned
    /// stream waits for its turn when first polled. The job is read and
    /// validated now: this is its `received` instant (timings.md), so the
    /// preparation before it is not counted as queueing.
    pub fn submit(self: &Arc<Self>, place: Place, job: Job) -> Generation {
        let received = Instant::now();
        let (tokens, hints, with_images) = self.cache_ids(&job);
        let tokens: Option<Arc<[i32]>> = tokens.map(Arc::from);
        let job_id = job.id.clone();
        let prompt_cache = self.prompt_cache_expect(&job.prompt);
        let plan = Arc::new(RunPlan::new(self.info.abi, self.defaults, self.limits.max_new_tokens, job));
        let ignored_params = plan.ignored.clone();
        let stop = StopHandle::default();
        let (abandoned_tx, abandoned) = oneshot::channel();
        // usage.prompt_tokens: the text's tokens and the images', unless the
        // run's own prefill count (`timings.prompt_n`) is the exact size.
        let images = if with_images { 0 } else { plan.image_timings.tokens };
        let prompt_tokens = tokens
            .as_ref()
            .filter(|_| !self.runtime_counts_prompt)
            .and_then(|t| u32::try_from(t.len()).ok())
            .map(|n| n + images);
        let waiting = WaitGuard { received, prompt_tokens, abandoned: Some(abandoned_tx) };
        let start = Start {
            engine: self.clone(),
            plan,
            tokens,
            hints,
            job: job_id.clone(),
            received,
            prompt_tokens,
            place,
            stop: stop.clone(),
            waiting,
            prompt_cache,
        };
        let events = Box::pin(async_stream::stream! {
            let mut run = match start.run().await {
                Ok(run) => run,
                Err(outcome) => {
                    yield GenEvent::Done(Box::new(outcome));
                    return;
                }
            };
            loop {
                let event = match run.next_event().await {
                    Next::Event(event) => event,
                    Next::LeftBatch => {
                        yield GenEvent::Done(Box::new(run.leave_batch()));
                        return;
                    }
                    Next::Gone => break,
                    Next::Unanswered => {
                        yield GenEvent::Done(Box::new(run.unanswered()));
                        return;
                    }
                };
                match run.step(event) {
                    Step::Started => yield GenEvent::Started,
                    Step::Token(text) => yield GenEvent::Token { text },
                    Step::Skip => {}
                    Step::Finished(finish) => {
                        yield GenEvent::Done(Box::new(run.finish(*finish).await));
                        return;
                    }
                }
            }
            yield GenEvent::Done(Box::new(run.thread_gone()));
        });
        Generation { ignored_params, stop, events, abandoned: Some(abandoned), engine: self.clone(), job: job_id }
    }

    /// A job's ids as the conversation cache keys them, and its hints: with
    /// images, each image's positions are among the ids where its marker
    /// was, and a resent reply's place moves past them (`kv_images.rs`);
    /// `true` then.
    fn cache_ids(&self, job: &Job) -> (Option<Vec<i32>>, CacheHints, bool) {
        match (&job.tokens, self.vision().map(|v| v.tokens_per_image())) {
            (Some(tokens), Some(per_image)) if !job.images.is_empty() => {
                let ids = kv_images::with_images(tokens, &job.images, per_image);
                let resent = job.cache.resent.as_ref().map(|r| kv_images::shift_resent(r, &job.images, per_image));
                (Some(ids), CacheHints { resent, ..job.cache.clone() }, true)
            }
            _ => (job.tokens.clone(), job.cache.clone(), false),
        }
    }
}

/// A queued job, before its turn.
struct Start {
    engine: Arc<Engine>,
    plan: Arc<RunPlan>,
    /// The prompt's ids (the conversation cache may send them instead of the text).
    tokens: Option<Arc<[i32]>>,
    /// What the conversation cache matches besides the ids.
    hints: CacheHints,
    /// The job's id.
    job: String,
    received: Instant,
    prompt_tokens: Option<u32>,
    place: Place,
    stop: StopHandle,
    waiting: WaitGuard,
    prompt_cache: Option<PromptCacheExpect>,
}

impl Start {
    /// Waits for the turn and submits the run; `Err` is the outcome of a job
    /// that could not run.
    async fn run(mut self) -> Result<Run, Outcome> {
        let first_token_timeout = self.engine.limits.first_token_timeout(self.plan.prompt.len());
        let engine = self.engine.clone();
        // A queued job stops waiting at the shutdown's abort, or when the
        // runtime is stuck in an aborted run (`halt.rs`).
        let assigned = tokio::select! {
            assigned = engine.wait_assigned(
                self.place,
                (self.job.clone(), self.plan.clone()),
                self.tokens.clone(),
                self.hints.clone(),
            ) => assigned,
            reason = engine.halt.halted() => {
                self.waiting.start();
                return Err(Outcome::without_run(reason, Timeline::new(self.received), self.prompt_tokens));
            }
        };
        let mut image_figures = None;
        let (submitted, turn) = match assigned {
            Ok(Assigned::Batched(slot)) => (Ok((slot.control, slot.events, slot.plan, slot.jobs)), None),
            Ok(Assigned::Alone(turn)) => {
                let mut turn = Some(turn);
                let submitted = submit(&engine, self.tokens.as_deref(), &self.hints, &self.plan, &mut turn).await;
                let submitted = submitted.map(|((control, events, plan), figures)| {
                    image_figures = figures;
                    (control, events, plan, 1)
                });
                (submitted, turn)
            }
            Err(reason) => (Err(reason), None),
        };
        let mut timeline = Timeline::new(self.received);
        timeline.images = image_figures.or((!self.plan.images.is_empty()).then_some(self.plan.image_timings));
        let abandoned = self.waiting.start();
        let (control, events, plan, prefill_stall) = match submitted {
            Ok((control, events, plan, batch_n)) => {
                timeline.batch_n = batch_n;
                let ids = self.prompt_tokens.map(|n| n as usize).or(self.tokens.as_ref().map(|t| t.len()));
                let sent = plan.as_ref().map(|p| p.input.len());
                let prefill_stall = engine.prefill_stall(sent, (ids, self.plan.prompt.len()), batch_n);
                if let Some(plan) = &plan {
                    // The prompt the model reads: the cache and what was sent
                    // after it (a cached reply may stand for the resent one).
                    self.prompt_tokens = u32::try_from(plan.cached + plan.input.len()).ok();
                }
                (control, events, plan, prefill_stall)
            }
            Err(reason) => return Err(Outcome::without_run(reason, timeline, self.prompt_tokens)),
        };
        let mut reason = None;
        let mut aborted_at = None;
        {
            let mut s = self.stop.lock().unwrap_or_else(|e| e.into_inner());
            if s.requested {
                control.abort();
                aborted_at = Some(Instant::now());
                reason = Some(EndReason::Stopped);
            }
            s.control = Some(control.clone());
        }
        let guard = RunGuard {
            engine: engine.clone(),
            control,
            events,
            turn,
            timeline,
            prompt_tokens: self.prompt_tokens,
            dropped: 0,
            finished: false,
            abandoned,
            aborted_at,
        };
        // Until `Started` the runtime thread is about to start (the turn is
        // held): the first-token allowance covers that moment too.
        let deadline = Some(tokio::time::Instant::now() + first_token_timeout);
        Ok(Run {
            guard,
            stop: self.stop,
            limit: self.plan.limit,
            aborts_at_limit: self.plan.aborts_at_limit(),
            first_token_timeout,
            prefill_stall,
            deadline,
            request_end: None,
            reason,
            plan,
            generated: Vec::new(),
            split: false,
            text_dropped: false,
            prompt_cache: self.prompt_cache,
            job: self.job,
        })
    }
}

type Submitted = (SlotControl, UnboundedReceiver<Event>, Option<Plan>);

/// Submits a job's own run (`batch` = 1), with the turn held (`turn`: the
/// vision encoder takes the NPU too); with the job's image figures when it
/// has images.
async fn submit(
    engine: &Arc<Engine>,
    tokens: Option<&[i32]>,
    hints: &CacheHints,
    run: &RunPlan,
    turn: &mut Option<Turn>,
) -> Result<(Submitted, Option<ImageTimings>), EndReason> {
    if engine.is_closing() {
        return Err(EndReason::ShuttingDown);
    }
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    // A job with images has ids only with its images' positions among them (`Engine::cache_ids`).
    let plan = engine.plan_kv(tokens, hints, run.lora.as_deref(), run.limit).await;
    // The embeddings are made only for a run that sends them: a follow-up
    // whose images the KV cache holds sends its new text alone (kv.rs), and
    // the encoder does not run for it, whether its cache keeps them or not.
    let sends_images = !run.images.is_empty() && plan.as_ref().is_none_or(|p| p.cached == 0);
    let (images, figures) = if sends_images {
        if plan.is_none() {
            engine.clear_before_stateless_images().await.map_err(EndReason::RuntimeError)?;
        }
        let encoded = engine.encode_images(&run.images, run.image_timings, turn).await;
        encoded.map_err(EndReason::RuntimeError)?.unzip()
    } else {
        (None, None)
    };
    tracing::debug!(images = images.is_some(), "run submitted");
    let request = match (&plan, images) {
        // A whole multimodal run (nothing of it cached), kept in the cache for the next turn.
        (Some(plan), Some(images)) if plan.cached == 0 => {
            RunRequest { images: Some(images), ..run.request(RunInput::Prompt(run.prompt.clone()), true) }
        }
        // The ids after the cached ones: what is new holds no image (kv.rs).
        (Some(plan), _) => RunRequest {
            save_prompt_cache: plan.save.as_ref().map(|s| s.file.to_string_lossy().into_owned()),
            ..run.request(plan.input(), true)
        },
        (None, images) => RunRequest { images, ..run.request(RunInput::Prompt(run.prompt.clone()), false) },
    };
    match engine.model.submit(request, tx) {
        Ok(control) => Ok(((SlotControl::single(control), events, plan), figures)),
        Err(e) => Err(EndReason::RuntimeError(e.to_string())),
    }
}

/// A submitted run, read event by event.
struct Run {
    guard: RunGuard,
    stop: StopHandle,
    limit: u32,
    /// The runtime was not told the limit (ABI 1.2): the run is aborted at it.
    aborts_at_limit: bool,
    first_token_timeout: std::time::Duration,
    /// From the run's start to its first token, by the model's pace (`liveness.rs`).
    prefill_stall: std::time::Duration,
    /// First-token (from submission, then from admission), then the earlier
    /// of the request's end and the decode stall's.
    deadline: Option<tokio::time::Instant>,
    /// The request's end (`request_timeout` from admission), once decoding.
    request_end: Option<tokio::time::Instant>,
    /// Why the run is ending, once something decided it (limit, time-out).
    reason: Option<EndReason>,
    /// How the run uses the conversation cache (`None`: stateless).
    plan: Option<Plan>,
    /// Every id the runtime generated (those dropped from the reply too:
    /// they are in the KV cache all the same).
    generated: Vec<i32>,
    /// The reply so far ends inside a character (its bytes held back).
    split: bool,
    /// A token's bytes fit no convention for split characters: said once
    /// per reply (every byte is counted).
    text_dropped: bool,
    /// What the run should show of the model's prompt cache, if it has one.
    prompt_cache: Option<PromptCacheExpect>,
    /// The job's id.
    job: String,
}

enum Next {
    Event(Event),
    /// A batch slot's reply is over (limit, stop, time-out) while the
    /// batch runs on: the generation ends now, its further tokens dropped.
    LeftBatch,
    /// The runtime thread is gone.
    Gone,
    /// The run was aborted and did not return within [`ABORT_GRACE`].
    Unanswered,
}

/// What ended a wait for the runtime's next event.
enum Waited {
    Event(Option<Event>),
    Deadline,
    Closing,
}

enum Step {
    Started,
    Token(String),
    Skip,
    Finished(Box<Finish>),
}

impl Run {
    /// The next event from the runtime thread. A deadline that passes first,
    /// or the shutdown's abort, aborts the run (whose `Finished` then follows)
    /// or, in a batch, leaves it; an aborted run gets [`ABORT_GRACE`] to
    /// return before the generation ends without it.
    async fn next_event(&mut self) -> Next {
        loop {
            if self.guard.control.is_batched() && (self.reason.is_some() || stop_requested(&self.stop)) {
                return Next::LeftBatch;
            }
            if self.guard.aborted_at.is_none() && stop_requested(&self.stop) {
                // `Generation::stop` aborted the run.
                self.guard.aborted_at = Some(Instant::now());
            }
            let aborted_at = self.guard.aborted_at;
            let wait_until = match aborted_at {
                Some(at) => Some(tokio::time::Instant::from_std(at + ABORT_GRACE)),
                None => self.deadline,
            };
            let engine = self.guard.engine.clone();
            let waited = tokio::select! {
                event = self.guard.events.recv() => Waited::Event(event),
                () = sleep_until(wait_until) => Waited::Deadline,
                () = engine.halt.closed(), if aborted_at.is_none() => Waited::Closing,
            };
            let waited = match waited {
                // Polled after the deadline passed with events waiting (a
                // consumer that read nothing for a while): their stamps decide.
                Waited::Deadline if aborted_at.is_none() => {
                    self.guard.events.try_recv().map_or(Waited::Deadline, |e| Waited::Event(Some(e)))
                }
                waited => waited,
            };
            match waited {
                // A token stamped after the deadline missed it, even when this
                // task was polled too late to see the deadline pass first (a
                // loaded machine): the runtime's clock decides. The token still
                // goes through `step` (it is in the KV cache, and counted as
                // dropped after the abort).
                Waited::Event(Some(Event::Token(token)))
                    if aborted_at.is_none() && self.deadline.is_some_and(|d| token.at > d.into_std()) =>
                {
                    self.abort(EndReason::Timeout(self.missed_deadline()));
                    return Next::Event(Event::Token(token));
                }
                Waited::Event(event) => return event.map_or(Next::Gone, Next::Event),
                Waited::Deadline if aborted_at.is_some() => return Next::Unanswered,
                Waited::Deadline => self.abort(EndReason::Timeout(self.missed_deadline())),
                Waited::Closing => self.abort(EndReason::ShuttingDown),
            }
        }
    }

    /// Ends the run early for `reason` (unless something already decided its end).
    /// Which deadline a run past its deadline missed.
    fn missed_deadline(&self) -> Deadline {
        let timeline = &self.guard.timeline;
        match timeline.first_token {
            None if timeline.admitted.is_some() && self.prefill_stall < self.first_token_timeout => Deadline::Prefill,
            None => Deadline::FirstToken,
            Some(_) if self.deadline == self.request_end => Deadline::Request,
            Some(_) => Deadline::Stall,
        }
    }

    fn abort(&mut self, reason: EndReason) {
        self.reason.get_or_insert(reason);
        self.guard.control.abort();
        self.guard.aborted_at.get_or_insert_with(Instant::now);
    }

    fn step(&mut self, event: Event) -> Step {
        match event {
            Event::Started { at } => {
                self.guard.timeline.admitted = Some(self.plan.as_ref().map_or(at, |p| p.admitted(at)));
                let allowed = self.first_token_timeout.min(self.prefill_stall);
                self.deadline = Some(tokio::time::Instant::from_std(at + allowed));
                Step::Started
            }
            Event::Token(token) => {
                if self.plan.is_some() {
                    self.generated.push(token.token_id);
                }
                self.token(token)
            }
            Event::Finished(finish) => Step::Finished(Box::new(finish)),
        }
    }

    fn token(&mut self, token: rkllm_sys::Token) -> Step {
        let engine = &self.guard.engine;
        let timeline = &mut self.guard.timeline;
        if timeline.tokens >= self.limit || self.reason.is_some() || stop_requested(&self.stop) {
            // Past the limit or after an abort: not part of the reply.
            self.guard.dropped += 1;
            return Step::Skip;
        }
        if let Some(gap) = timeline.token(token.at) {
            crate::metrics::observer().metrics.inter_token(gap);
        }
        engine.queue.token();
        let admitted = timeline.admitted.unwrap_or(token.at);
        let request_end =
            *self.request_end.get_or_insert(tokio::time::Instant::from_std(admitted + engine.limits.request_timeout));
        let stall_end = tokio::time::Instant::from_std(token.at + super::liveness::decode_stall(timeline));
        self.deadline = Some(request_end.min(stall_end));
        self.split = token.split;
        if token.dropped_bytes > 0 && !std::mem::replace(&mut self.text_dropped, true) {
            // Not U+FFFD in the reply: a runtime that splits characters in a
            // way rkllm-sys/src/utf8.rs does not know. Once per reply, not a
            // line per token.
            tracing::warn!(
                bytes = token.dropped_bytes,
                token_id = token.token_id,
                raw = ?token.bytes,
                "the runtime's token text fits no known way of splitting a character over tokens; bytes left out \
                 of the reply (rkllm-sys/src/utf8.rs)"
            );
        }
        if token.dropped_bytes > 0 {
            crate::metrics::observer().metrics.runtime_text_dropped(token.dropped_bytes);
        }
        if timeline.tokens == self.limit {
            if self.aborts_at_limit {
                // The runtime was not told the limit (ABI 1.2): enforce it here.
                self.abort(EndReason::Length);
            } else {
                // The runtime stops at the limit by itself.
                self.reason = Some(EndReason::Length);
            }
        }
        Step::Token(token.text)
    }

    async fn finish(&mut self, finish: Finish) -> Outcome {
        self.guard.finished = true;
        if self.guard.control.is_batched() {
            // This slot's reply is over: when no other job's is running, the
            // run is ended rather than left to decode only fillers.
            self.guard.control.abort();
        }
        let engine = self.guard.engine.clone();
        // Still holding the turn: the size is this run's.
        let perf = finish.perf.map(RuntimePerf::from);
        engine.prefill_pace.measured(perf.as_ref());
        let (cached_tokens, cache) = match &self.plan {
            Some(_) if self.guard.control.is_batched() => self.slot_cache(),
            Some(plan) => {
                let (reused, found) = engine.settle_kv(&self.job, plan, &self.generated, perf.as_ref()).await;
                (reused, Some(found))
            }
            None => {
                if !self.guard.control.is_batched() {
                    engine.sample_kv_cache();
                }
                (0, None)
            }
        };
        let perf = perf.map(|p| self.plan.as_ref().map_or(p, |plan| plan.job_perf(p)));
        // The runtime is free: let the next job in before we report.
        self.guard.turn.take();
        self.guard.timeline.finished = Some(finish.at);
        let reason = if finish.is_error() {
            EndReason::RuntimeError(self.runtime_error(&finish))
        } else if let Some(reason) = self.reason.take() {
            reason
        } else if stop_requested(&self.stop) {
            EndReason::Stopped
        } else if finish.aborted && engine.is_closing() {
            // Cut off at the end of the shutdown grace period: not a natural end.
            EndReason::ShuttingDown
        } else {
            EndReason::Eos
        };
        self.guard.timeline.cache = cache.map(|c| (c.as_str(), c.reason()));
        let prompt_cache_n = super::prompt_cache::reused(self.prompt_cache, self.guard.prompt_tokens, perf.as_ref());
        self.guard.timeline.prompt_cache_n = prompt_cache_n;
        Outcome {
            reason,
            timeline: self.guard.timeline,
            perf,
            tail: finish.tail,
            dropped_tokens: self.guard.dropped,
            prompt_tokens: self.guard.prompt_tokens,
            cached_tokens: cached_tokens + prompt_cache_n.unwrap_or(0),
            cache,
        }
    }

    fn runtime_error(&self, finish: &Finish) -> String {
        // A refusal before the first token may be a prompt longer than the
        // context: the api judges that from the prompt's size.
        let state = if finish.runtime_error { ", callback state ERROR" } else { "" };
        format!("the runtime reported an error (rkllm_run returned {}{state})", finish.code)
    }

    /// The end of a batch slot that was left (see [`Next::LeftBatch`]): the
    /// reply ends where the client's part of it did, in U+FFFD when that is
    /// inside a character, as a run's end gives it.
    fn leave_batch(&mut self) -> Outcome {
        self.guard.control.abort();
        self.guard.finished = true;
        let reason = self.reason.take().unwrap_or(EndReason::Stopped);
        let (cached_tokens, cache) = self.slot_cache();
        self.guard.timeline.cache = cache.map(|c| (c.as_str(), c.reason()));
        let mut outcome = Outcome::without_run(reason, self.guard.timeline, self.guard.prompt_tokens);
        outcome.dropped_tokens = self.guard.dropped;
        (outcome.cached_tokens, outcome.cache) = (cached_tokens, cache);
        if self.split {
            outcome.tail = char::REPLACEMENT_CHARACTER.to_string();
        }
        outcome
    }

    /// What a batch slot's job reused: what it was planned to. The slot is
    /// settled when the whole run has returned (`slots.rs`).
    fn slot_cache(&self) -> (u32, Option<CacheUse>) {
        match &self.plan {
            Some(plan) => {
                let (reused, found) = plan.found();
                (u32::try_from(reused).unwrap_or(u32::MAX), Some(found))
            }
            None => (0, None),
        }
    }

    /// The aborted run did not return in time: the client gets the ending
    /// its abort was for now, and the guard's drop drains the run in the
    /// background, holding the turn (`guards.rs`).
    fn unanswered(&mut self) -> Outcome {
        // Delivered with `Done`: the drain hands over nothing.
        self.guard.abandoned = None;
        let reason = self.reason.take().unwrap_or(EndReason::Stopped);
        let mut outcome = Outcome::without_run(reason, self.guard.timeline, self.guard.prompt_tokens);
        outcome.dropped_tokens = self.guard.dropped;
        outcome
    }

    /// The runtime thread went away without finishing the run.
    fn thread_gone(mut self) -> Outcome {
        self.guard.finished = true;
        let reason = EndReason::RuntimeError("the runtime thread stopped".into());
        Outcome::without_run(reason, self.guard.timeline, self.guard.prompt_tokens)
    }
}

/// Sleeps until `at`; never wakes without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
