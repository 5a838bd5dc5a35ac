//! One admitted job as a stream of events, from its turn in the queue to the
//! runtime's return.
//!
//! Dropping a [`Generation`] (a client went away) leaves the queue if it was
//! still waiting, or aborts the run; in the latter case a small task keeps
//! the turn until `rkllm_run` has returned, so the next job starts right
//! after and the request is still logged with its timeline.

use super::job::Job;
use super::{Engine, Limits};
use crate::metrics::{RuntimePerf, Timeline};
use futures_util::Stream;
use rkllm_sys::{Event, RunControl, RunRequest};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum EndReason {
    /// The runtime finished by itself (end of sequence).
    Eos,
    /// The token limit was reached.
    Length,
    /// [`Generation::stop`] was called (a stop sequence matched).
    Stopped,
    /// A time-out fired; the run was aborted.
    Timeout(&'static str),
    /// The runtime reported an error.
    RuntimeError(String),
    /// The daemon is shutting down; the job did not run.
    ShuttingDown,
}

impl EndReason {
    /// The HTTP status and OpenAI-style finish reason this end is reported
    /// with (for the request log and metrics; a stream that already started
    /// carries the status in its error event). `called_tools`: the reply
    /// held tool calls ([`Generation::note_tool_calls`]).
    pub fn status_and_finish_reason(&self, called_tools: bool) -> (u16, &'static str) {
        match self {
            EndReason::Eos | EndReason::Stopped if called_tools => (200, "tool_calls"),
            EndReason::Eos | EndReason::Stopped => (200, "stop"),
            EndReason::Length => (200, "length"),
            EndReason::Timeout(_) => (504, "timeout"),
            EndReason::RuntimeError(_) => (500, "error"),
            EndReason::ShuttingDown => (503, "shutdown"),
        }
    }
}

/// The end of a generation, with everything measured about it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub reason: EndReason,
    pub timeline: Timeline,
    pub perf: Option<RuntimePerf>,
    /// Bytes of an unfinished character at the end, as U+FFFD ("" normally).
    pub tail: String,
    /// Tokens the runtime generated that are not part of the reply: those
    /// after a stop sequence, the limit, a time-out or the client leaving
    /// (an abort lands at a token boundary, or the run ends first).
    pub dropped_tokens: u32,
    /// The prompt's length by the model's tokenizer (the job's count).
    pub prompt_tokens: Option<u32>,
}

#[derive(Debug, Clone)]
pub enum GenEvent {
    /// One generated token; `text` may be empty while a character is split.
    Token { text: String },
    /// Always the last event.
    Done(Outcome),
}

/// What the consumer tells a running generation: end early (stop
/// sequences), and that the reply holds tool calls (so the request log and
/// metrics report `tool_calls` as the reply does).
#[derive(Default)]
struct StopState {
    requested: bool,
    control: Option<RunControl>,
    called_tools: bool,
}

pub struct Generation {
    /// Sampling fields the request set that this runtime cannot apply per run.
    pub ignored_params: Vec<&'static str>,
    stop: Arc<Mutex<StopState>>,
    events: Pin<Box<dyn Stream<Item = GenEvent> + Send>>,
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

    /// Whether the reply's text so far holds tool calls (all well-formed).
    pub fn note_tool_calls(&self, called: bool) {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).called_tools = called;
    }
}

impl Stream for Generation {
    type Item = GenEvent;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<GenEvent>> {
        self.events.as_mut().poll_next(cx)
    }
}

/// Aborts the run if the generation is dropped before the runtime returned.
struct RunGuard {
    engine: Arc<Engine>,
    control: RunControl,
    events: Option<UnboundedReceiver<Event>>,
    turn: Option<super::queue::Turn>,
    timeline: Timeline,
    job_id: String,
    prompt_tokens: Option<u32>,
    /// Tokens received but not part of the reply ([`Outcome::dropped_tokens`]).
    dropped: u32,
    finished: bool,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.control.abort();
        let (Some(mut events), Some(turn)) = (self.events.take(), self.turn.take()) else {
            return;
        };
        let mut timeline = self.timeline;
        let job_id = std::mem::take(&mut self.job_id);
        let prompt_tokens = self.prompt_tokens;
        let mut dropped = self.dropped;
        let engine = self.engine.clone();
        let drain = async move {
            let mut perf = None;
            while let Some(event) = events.recv().await {
                match event {
                    // Tokens after the client left are not part of any reply.
                    Event::Started { at } => timeline.admitted = Some(at),
                    Event::Token(_) => dropped += 1,
                    Event::Finished(f) => {
                        timeline.finished = Some(f.at);
                        perf = f.perf.map(RuntimePerf::from);
                        break;
                    }
                }
            }
            sample_kv_cache(&engine);
            drop(turn);
            let outcome = Outcome {
                reason: EndReason::Stopped,
                timeline,
                perf,
                tail: String::new(),
                dropped_tokens: dropped,
                prompt_tokens,
            };
            super::log_request(&job_id, &outcome, true, false);
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(drain);
        }
    }
}

impl Engine {
    /// Queues a job. Refused at once when the queue is full; otherwise the
    /// returned stream waits for its turn when first polled.
    pub fn submit(self: &Arc<Self>, job: Job) -> Result<Generation, super::EngineError> {
        let place = self.queue.try_enter().ok_or(super::EngineError::QueueFull)?;
        let per_run = self.info.abi.per_run_sampling();
        let given = job.sampling.given();
        let limit = job.max_new_tokens.unwrap_or(self.limits.max_new_tokens).min(self.limits.max_new_tokens);
        let request = RunRequest {
            prompt: job.prompt.clone(),
            role: rkllm_sys::Role::User,
            enable_thinking: job.enable_thinking,
            keep_history: false,
            max_new_tokens: per_run.then_some(limit as i32),
            sampling: (per_run && !given.is_empty()).then(|| job.sampling.apply(self.defaults)),
        };
        let ignored_params = if per_run { Vec::new() } else { given };
        let stop = Arc::new(Mutex::new(StopState::default()));
        let waiting =
            WaitGuard { job_id: job.id.clone(), received: job.received, prompt_tokens: job.prompt_tokens, armed: true };
        let events = Box::pin(run(self.clone(), job, request, limit, place, stop.clone(), waiting));
        crate::metrics::handed_to_engine();
        Ok(Generation { ignored_params, stop, events })
    }
}

fn run(
    engine: Arc<Engine>,
    job: Job,
    request: RunRequest,
    limit: u32,
    place: super::queue::Place,
    stop: Arc<Mutex<StopState>>,
    mut waiting: WaitGuard,
) -> impl Stream<Item = GenEvent> + Send {
    async_stream::stream! {
        let first_token_timeout = engine.limits.first_token_timeout(request.prompt.len());
        let turn = engine.queue.wait_turn(place).await;
        let (tx, rx) = unbounded_channel();
        let mut timeline = Timeline::new(job.received);
        let submitted = if engine.is_closing() { Err(EndReason::ShuttingDown) } else { engine.model.submit(request, tx).map_err(|e| EndReason::RuntimeError(e.to_string())) };
        let control = match submitted {
            Ok(control) => control,
            Err(reason) => {
                waiting.disarm();
                timeline.finished = Some(Instant::now());
                let outcome = Outcome { reason, timeline, perf: None, tail: String::new(), dropped_tokens: 0, prompt_tokens: job.prompt_tokens };
                log_outcome(&job.id, &outcome, false);
                yield GenEvent::Done(outcome);
                return;
            }
        };
        let mut reason = None;
        {
            let mut s = stop.lock().unwrap_or_else(|e| e.into_inner());
            if s.requested {
                control.abort();
                reason = Some(EndReason::Stopped);
            }
            s.control = Some(control.clone());
        }
        // From here the run guard accounts for a client that goes away.
        waiting.disarm();
        let mut guard = RunGuard { engine: engine.clone(), control, events: Some(rx), turn: Some(turn), timeline, job_id: job.id.clone(), prompt_tokens: job.prompt_tokens, dropped: 0, finished: false };
        // Until admission there is no deadline of ours (the turn is held, so
        // the runtime thread is about to start); then first-token, then total.
        let mut deadline: Option<tokio::time::Instant> = None;
        while let Some(events) = guard.events.as_mut() {
            let next = match deadline {
                Some(d) if reason.is_none() => match tokio::time::timeout_at(d, events.recv()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let which = if guard.timeline.first_token.is_none() { "first token" } else { "request" };
                        reason = Some(EndReason::Timeout(which));
                        guard.control.abort();
                        continue;
                    }
                },
                _ => events.recv().await,
            };
            match next {
                Some(Event::Started { at }) => {
                    guard.timeline.admitted = Some(at);
                    deadline = Some(tokio::time::Instant::from_std(at + first_token_timeout));
                }
                Some(Event::Token(token)) => {
                    let stopped = stop.lock().map(|s| s.requested).unwrap_or(true);
                    if guard.timeline.tokens >= limit || reason.is_some() || stopped {
                        // Past the limit or after an abort: not part of the reply.
                        guard.dropped += 1;
                        continue;
                    }
                    if let Some(gap) = guard.timeline.token(token.at) {
                        crate::metrics::observer().metrics.inter_token(gap);
                    }
                    if let Some(turn) = &guard.turn {
                        turn.token();
                    }
                    if guard.timeline.tokens == 1 {
                        let admitted = guard.timeline.admitted.unwrap_or(token.at);
                        deadline = Some(tokio::time::Instant::from_std(admitted + engine.limits.request_timeout));
                    }
                    if guard.timeline.tokens == limit {
                        reason = Some(EndReason::Length);
                        if !engine.info.abi.per_run_sampling() {
                            // ABI 1.2 cannot take a per-run limit: enforce it here.
                            guard.control.abort();
                        }
                    }
                    yield GenEvent::Token { text: token.text };
                }
                Some(Event::Finished(finish)) => {
                    guard.finished = true;
                    // Queued before the next job can submit its run, so the
                    // size is this run's, sampled right after it.
                    sample_kv_cache(&engine);
                    // The runtime is free: let the next job in before we report.
                    guard.turn.take();
                    guard.timeline.finished = Some(finish.at);
                    let stopped = stop.lock().map(|s| s.requested).unwrap_or(false);
                    let reason = if finish.is_error() {
                        // Before any token, a prompt too long for the context is the usual cause;
                        // with a tokenizer the daemon refuses those itself.
                        let hint = if guard.timeline.first_token.is_none() && job.prompt_tokens.is_none() {
                            format!("; a prompt longer than the context (max_context_len = {}) is refused this way: configure `tokenizer` to have prompts checked before they run", engine.limits.max_context_len)
                        } else {
                            String::new()
                        };
                        EndReason::RuntimeError(format!("the runtime reported an error (rkllm_run returned {}{}){hint}", finish.code, if finish.runtime_error { ", callback state ERROR" } else { "" }))
                    } else if let Some(reason) = reason.take() {
                        reason
                    } else if stopped {
                        EndReason::Stopped
                    } else if finish.aborted && engine.is_closing() {
                        // Cut off at the end of the shutdown grace period: not a natural end.
                        EndReason::ShuttingDown
                    } else {
                        EndReason::Eos
                    };
                    let outcome = Outcome { reason, timeline: guard.timeline, perf: finish.perf.map(RuntimePerf::from), tail: finish.tail, dropped_tokens: guard.dropped, prompt_tokens: job.prompt_tokens };
                    log_outcome(&job.id, &outcome, stop.lock().map(|s| s.called_tools).unwrap_or(false));
                    yield GenEvent::Done(outcome);
                    break;
                }
                None => {
                    guard.finished = true;
                    guard.timeline.finished = Some(Instant::now());
                    let outcome = Outcome { reason: EndReason::RuntimeError("the runtime thread stopped".into()), timeline: guard.timeline, perf: None, tail: String::new(), dropped_tokens: 0, prompt_tokens: job.prompt_tokens };
                    log_outcome(&job.id, &outcome, stop.lock().map(|s| s.called_tools).unwrap_or(false));
                    yield GenEvent::Done(outcome);
                    break;
                }
            }
        }
    }
}

/// Accounts for a request whose client went away while it waited in the
/// queue (it never reached the runtime, so no run guard exists yet).
struct WaitGuard {
    job_id: String,
    received: Instant,
    prompt_tokens: Option<u32>,
    armed: bool,
}

impl WaitGuard {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if self.armed {
            let mut timeline = Timeline::new(self.received);
            timeline.finished = Some(Instant::now());
            let outcome = Outcome {
                reason: EndReason::Stopped,
                timeline,
                perf: None,
                tail: String::new(),
                dropped_tokens: 0,
                prompt_tokens: self.prompt_tokens,
            };
            super::log_request(&self.job_id, &outcome, true, false);
        }
    }
}

/// Asks the runtime thread for the KV cache's size (it answers between runs)
/// and publishes it as a gauge when it comes; nothing waits for it.
fn sample_kv_cache(engine: &Engine) {
    let size = engine.model.kv_cache_size();
    let publish = async move {
        if let Ok(Ok(sizes)) = size.await {
            crate::metrics::observer().metrics.set_kv_cache_tokens(sizes.iter().map(|&s| i64::from(s)).sum());
        }
    };
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(publish);
    }
}

fn log_outcome(job_id: &str, outcome: &Outcome, called_tools: bool) {
    super::log_request(job_id, outcome, false, called_tools);
}

impl Limits {
    /// Prefill time grows with the prompt, so the first-token allowance does too.
    pub fn first_token_timeout(&self, prompt_bytes: usize) -> Duration {
        self.first_token_base + self.first_token_per_kib.mul_f64(prompt_bytes as f64 / 1024.0)
    }
}
