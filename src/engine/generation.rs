//! One admitted job as a stream of events, from its turn in the queue to the
//! runtime's return.
//!
//! Dropping a [`Generation`] (a client went away) leaves the queue if it was
//! still waiting, or aborts the run (`guards.rs`).

use super::batch::SlotControl;
use super::guards::{RunGuard, WaitGuard};
use super::job::{CacheHints, Handoff, Job};
use super::kv::Plan;
use super::outcome::{EndReason, GenEvent, Outcome};
use super::plan::RunPlan;
use super::prompt_cache::Expect as PromptCacheExpect;
use super::queue::{Place, Turn};
use super::run::{Next, Run, Step, StopHandle};
use super::schedule::Assigned;
use super::state::Engine;
use crate::metrics::{ImageTimings, Timeline};
use futures_util::Stream;
use rkllm_sys::{Event, RunInput, RunRequest};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

pub struct Generation {
    /// Sampling fields the request set that this runtime cannot apply per run.
    pub ignored_params: Vec<&'static str>,
    stop: StopHandle,
    events: Pin<Box<dyn Stream<Item = GenEvent> + Send>>,
    abandoned: Option<oneshot::Receiver<Outcome>>,
    /// The conversation cache's hand-off, until the api takes it.
    handoff: Option<Handoff>,
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

    /// The job's hand-off to the conversation cache, to give back when
    /// the reply ends (`Handoff::returned`); `None` once taken.
    pub fn take_handoff(&mut self) -> Option<Handoff> {
        self.handoff.take()
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
    pub fn submit(self: &Arc<Self>, place: Place, mut job: Job) -> Generation {
        let received = Instant::now();
        let job_id = job.id.clone();
        // The hints stay with the job's run; the hand-off goes back to the api, bound to this job.
        let mut cache = std::mem::take(&mut job.cache);
        let hints = std::mem::take(&mut cache.hints);
        let (engine, seen_as) = (self.clone(), job_id.clone());
        let handoff = cache.bound(move |shown| engine.reply_seen(&seen_as, shown));
        let prompt_cache = self.prompt_cache_expect(job.prompt.text());
        let plan = Arc::new(RunPlan::new(self.info.abi, self.defaults, self.handle.limits.max_new_tokens, job));
        let ignored_params = plan.ignored.clone();
        let stop = StopHandle::default();
        let (abandoned_tx, abandoned) = oneshot::channel();
        // usage.prompt_tokens: the sequence's ids, the images' positions
        // among them, unless the run's own prefill count (`timings.prompt_n`)
        // is the exact size.
        let prompt_tokens =
            plan.prompt.ids().filter(|_| !self.runtime_counts_prompt).and_then(|ids| u32::try_from(ids.len()).ok());
        let waiting = WaitGuard { received, prompt_tokens, abandoned: Some(abandoned_tx) };
        let start = Start {
            engine: self.clone(),
            plan,
            hints,
            job: job_id,
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
        Generation { ignored_params, stop, events, abandoned: Some(abandoned), handoff: Some(handoff) }
    }
}

/// A queued job, before its turn.
struct Start {
    engine: Arc<Engine>,
    plan: Arc<RunPlan>,
    /// What the conversation cache matches besides the prompt's ids.
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
        let first_token_timeout = self.engine.handle.limits.first_token_timeout(self.plan.prompt.text().len());
        let engine = self.engine.clone();
        // A queued job stops waiting at the shutdown's abort, or when the
        // runtime is stuck in an aborted run (`halt.rs`).
        let assigned = tokio::select! {
            assigned = engine.scheduler.wait_assigned(
                &engine,
                self.place,
                (self.job.clone(), self.plan.clone()),
                self.hints.clone(),
            ) => assigned,
            reason = engine.handle.halt.halted() => {
                self.waiting.start();
                return Err(Outcome::without_run(reason, Timeline::new(self.received), self.prompt_tokens));
            }
        };
        let mut image_figures = None;
        let (submitted, turn) = match assigned {
            Ok(Assigned::Batched(slot)) => (Ok((slot.control, slot.events, slot.plan, slot.jobs)), None),
            Ok(Assigned::Alone(turn)) => {
                let mut turn = Some(turn);
                let submitted = submit(&engine, &self.hints, &self.plan, &mut turn).await;
                let submitted = submitted.map(|((control, events, plan), figures)| {
                    image_figures = figures;
                    (control, events, plan, 1)
                });
                (submitted, turn)
            }
            Err(reason) => (Err(reason), None),
        };
        let mut timeline = Timeline::new(self.received);
        timeline.images = image_figures.or((self.plan.prompt.image_count() > 0).then_some(self.plan.image_timings));
        let abandoned = self.waiting.start();
        let (control, events, plan, prefill_stall) = match submitted {
            Ok((control, events, plan, batch_n)) => {
                timeline.batch_n = batch_n;
                let ids = self.prompt_tokens.map(|n| n as usize).or(self.plan.prompt.ids().map(<[i32]>::len));
                let sent = plan.as_ref().map(|p| p.input.len());
                let prefill_stall = engine.handle.prefill_stall(sent, (ids, self.plan.prompt.text().len()), batch_n);
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
    hints: &CacheHints,
    run: &RunPlan,
    turn: &mut Option<Turn>,
) -> Result<(Submitted, Option<ImageTimings>), EndReason> {
    if engine.is_closing() {
        return Err(EndReason::ShuttingDown);
    }
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let plan = engine.plan_kv(run.prompt.ids(), hints, run.lora.as_deref(), run.limit).await;
    // The embeddings are made only for a run that sends them: a follow-up
    // whose images the KV cache holds sends its new text alone (kv.rs), and
    // the encoder does not run for it, whether its cache keeps them or not.
    let sends_images = run.prompt.image_count() > 0 && plan.as_ref().is_none_or(|p| p.cached == 0);
    let (images, figures) = if sends_images {
        if plan.is_none() {
            engine.clear_before_stateless_images().await.map_err(EndReason::RuntimeError)?;
        }
        let encoded = engine.encode_images(&run.prompt, run.image_timings, turn).await;
        encoded.map_err(EndReason::RuntimeError)?.unzip()
    } else {
        (None, None)
    };
    tracing::debug!(images = images.is_some(), "run submitted");
    let save_prompt_cache = plan.as_ref().and_then(|p| p.save.as_ref()).map(|s| s.file.to_string_lossy().into_owned());
    let request = match (&plan, images) {
        // A whole multimodal run (nothing of it resident), kept in the cache
        // for the next turn and saved: the runtime matches it against a
        // restored file's positions, images included (prompt.rs).
        (Some(_), Some(images)) => RunRequest {
            images: Some(images),
            save_prompt_cache,
            ..run.request(RunInput::Prompt(run.prompt.text().to_owned()), true)
        },
        // The ids after the cached ones: what is new holds no image (kv.rs).
        (Some(plan), None) => RunRequest { save_prompt_cache, ..run.request(plan.input(), true) },
        (None, images) => RunRequest { images, ..run.request(RunInput::Prompt(run.prompt.text().to_owned()), false) },
    };
    match engine.handle.model.submit(request, tx) {
        Ok(control) => Ok(((SlotControl::single(control), events, plan), figures)),
        Err(e) => Err(EndReason::RuntimeError(e.to_string())),
    }
}
