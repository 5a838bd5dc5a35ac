//! A submitted run, read event by event until the runtime returns: its
//! deadlines (first token, decode stall, the request's end), the reply's
//! limit and stop, and its outcome, with the conversation cache settled
//! (`conversations.rs`) while the turn is still held. `generation.rs` turns
//! it into a job's stream of events.

use super::batch::SlotControl;
use super::guards::RunGuard;
use super::halt::ABORT_GRACE;
use super::kv::Plan;
use super::outcome::{CacheUse, Deadline, EndReason, Outcome};
use super::prompt_cache::Expect as PromptCacheExpect;
use crate::metrics::RuntimePerf;
use rkllm_sys::{Event, Finish};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What the consumer tells a running generation: end early (a stop
/// sequence matched). Set before the run starts, it aborts it at once.
#[derive(Default)]
pub(super) struct StopState {
    pub requested: bool,
    pub control: Option<SlotControl>,
}

pub(super) type StopHandle = Arc<Mutex<StopState>>;

pub(super) fn stop_requested(stop: &StopHandle) -> bool {
    stop.lock().map(|s| s.requested).unwrap_or(true)
}

/// A submitted run, read event by event.
pub(super) struct Run {
    pub guard: RunGuard,
    pub stop: StopHandle,
    pub limit: u32,
    /// The runtime was not told the limit (ABI 1.2): the run is aborted at it.
    pub aborts_at_limit: bool,
    pub first_token_timeout: std::time::Duration,
    /// From the run's start to its first token, by the model's pace (`liveness.rs`).
    pub prefill_stall: std::time::Duration,
    /// First-token (from submission, then from admission), then the earlier
    /// of the request's end and the decode stall's.
    pub deadline: Option<tokio::time::Instant>,
    /// The request's end (`request_timeout` from admission), once decoding.
    pub request_end: Option<tokio::time::Instant>,
    /// Why the run is ending, once something decided it (limit, time-out).
    pub reason: Option<EndReason>,
    /// How the run uses the conversation cache (`None`: stateless).
    pub plan: Option<Plan>,
    /// Every id the runtime generated (those dropped from the reply too:
    /// they are in the KV cache all the same).
    pub generated: Vec<i32>,
    /// The reply so far ends inside a character (its bytes held back).
    pub split: bool,
    /// A token's bytes fit no convention for split characters: said once
    /// per reply (every byte is counted).
    pub text_dropped: bool,
    /// What the run should show of the model's prompt cache, if it has one.
    pub prompt_cache: Option<PromptCacheExpect>,
    /// The job's id.
    pub job: String,
}

pub(super) enum Next {
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

pub(super) enum Step {
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
    pub(super) async fn next_event(&mut self) -> Next {
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
                () = engine.handle.halt.closed(), if aborted_at.is_none() => Waited::Closing,
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

    /// Ends the run early for `reason` (unless something already decided its end).
    fn abort(&mut self, reason: EndReason) {
        self.reason.get_or_insert(reason);
        self.guard.control.abort();
        self.guard.aborted_at.get_or_insert_with(Instant::now);
    }

    pub(super) fn step(&mut self, event: Event) -> Step {
        match event {
            Event::Started { at, run } => {
                self.guard.timeline.admitted = Some(self.plan.as_ref().map_or(at, |p| p.admitted(at)));
                let allowed = self.first_token_timeout.min(self.prefill_stall);
                self.deadline = Some(tokio::time::Instant::from_std(at + allowed));
                // The watchdog judges the run by the same bound (`liveness.rs`).
                self.guard.engine.handle.liveness.bound.record(run, allowed);
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
        let request_end = *self
            .request_end
            .get_or_insert(tokio::time::Instant::from_std(admitted + engine.handle.limits.request_timeout));
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

    pub(super) async fn finish(&mut self, finish: Finish) -> Outcome {
        self.guard.finished = true;
        if self.guard.control.is_batched() {
            // This slot's reply is over: when no other job's is running, the
            // run is ended rather than left to decode only fillers.
            self.guard.control.abort();
        }
        let engine = self.guard.engine.clone();
        // Still holding the turn: the size is this run's.
        let perf = finish.perf.map(RuntimePerf::from);
        engine.handle.liveness.pace.measured(perf.as_ref());
        let (cached_tokens, cache) = match &self.plan {
            Some(_) if self.guard.control.is_batched() => self.slot_cache(),
            Some(plan) => {
                let (reused, found) =
                    engine.settle_kv(&self.job, plan, &self.generated, perf.as_ref(), finish.is_error()).await;
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
    pub(super) fn leave_batch(&mut self) -> Outcome {
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
    pub(super) fn unanswered(&mut self) -> Outcome {
        // Delivered with `Done`: the drain hands over nothing.
        self.guard.abandoned = None;
        let reason = self.reason.take().unwrap_or(EndReason::Stopped);
        let mut outcome = Outcome::without_run(reason, self.guard.timeline, self.guard.prompt_tokens);
        outcome.dropped_tokens = self.guard.dropped;
        outcome
    }

    /// The runtime thread went away without finishing the run.
    pub(super) fn thread_gone(mut self) -> Outcome {
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
