//! The request record: how a request that reached the engine gets into the
//! request log and the metrics exactly once, by value, from the api (which
//! alone knows the status and the finish reason it answered with).
//!
//! A reply that reaches its end is recorded there. A reply dropped earlier
//! (the client went away) is recorded when the engine hands over the
//! abandoned job's outcome, after its run was aborted and drained.
//!
//! An embedding or rerank request ([`ForwardRecord`]) is recorded when its
//! answer is known, or at once when the client goes away first.

use super::named::NamesModel;
use super::status::{self, Ending};
use crate::engine::{EndReason, Generation, Outcome};
use crate::metrics::{Finished, Kind, RuntimePerf, Timeline};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tokio::sync::oneshot;

/// Who counts a completion, embedding or rerank request: the counting
/// middleware (`metrics.rs`) hands each one this, and the request's record
/// takes it over once the request reached the engine. Until then the
/// middleware counts the request — its refusal, or its client going away —
/// under the model its body named (see [`Counting::name_model`]).
#[derive(Debug, Clone, Default)]
pub struct Counting(Arc<CountingState>);

#[derive(Debug, Default)]
struct CountingState {
    taken_over: AtomicBool,
    model: OnceLock<String>,
}

impl Counting {
    fn take_over(&self) {
        self.0.taken_over.store(true, Ordering::Relaxed);
    }

    /// Whether a request record counts the request.
    pub fn taken_over(&self) -> bool {
        self.0.taken_over.load(Ordering::Relaxed)
    }

    /// The model the request's body named, as soon as the body is parsed (the
    /// extractors call this), so a refusal after that is counted under it.
    pub fn name_model(&self, body: &impl NamesModel) {
        let _ = self.0.model.set(body.model().to_owned());
    }

    /// The model the body named, if it was parsed.
    pub fn named_model(&self) -> Option<&str> {
        self.0.model.get().map(String::as_str)
    }
}

pub struct Record {
    id: String,
    model: String,
    abandoned: Option<oneshot::Receiver<Outcome>>,
}

impl Record {
    pub fn new(id: String, model: String, generation: &mut Generation, counting: &Counting) -> Record {
        counting.take_over();
        Record { id, model, abandoned: generation.take_abandoned() }
    }

    /// The reply reached its end with this outcome.
    pub fn finish(mut self, outcome: &Outcome, ending: &Ending) {
        self.abandoned = None;
        write(&self.id, &self.model, outcome, ending, false);
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let Some(abandoned) = self.abandoned.take() else { return };
        let id = std::mem::take(&mut self.id);
        let model = std::mem::take(&mut self.model);
        let record = async move {
            if let Ok(outcome) = abandoned.await {
                let ending = super::status::ending(&outcome.reason, &super::status::Facts::default());
                write(&id, &model, &outcome, &ending, true);
            }
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(record);
        }
    }
}

fn write(id: &str, model: &str, outcome: &Outcome, ending: &Ending, client_disconnected: bool) {
    crate::metrics::finish_request(&Finished {
        id,
        model,
        kind: Kind::Completion,
        inputs: None,
        status: ending.status,
        finish_reason: ending.finish_reason,
        timeline: &outcome.timeline,
        perf: outcome.perf,
        dropped_tokens: outcome.dropped_tokens,
        client_disconnected,
        counted_prompt_tokens: outcome.prompt_tokens,
        cached_tokens: outcome.cached_tokens,
    });
}

/// An embedding or rerank request that reached the engine (its job was
/// queued). Dropped unfinished, the client went away: the handler's future
/// was dropped with the job's, whose run is aborted in the background, so
/// only `received` is known — recorded as 499 `abort` with no other instant.
pub struct ForwardRecord {
    id: String,
    model: String,
    kind: Kind,
    inputs: usize,
    received: Instant,
    open: bool,
}

impl ForwardRecord {
    pub fn new(kind: Kind, model: &str, inputs: usize, received: Instant, counting: &Counting) -> ForwardRecord {
        counting.take_over();
        let id = format!("{}-{}", kind.as_str(), uuid::Uuid::new_v4().simple());
        ForwardRecord { id, model: model.to_owned(), kind, inputs, received, open: true }
    }

    /// The answer is known: its ending, the job's timeline and perf stats,
    /// and the tokens the runtime read (`None` when not every input ran).
    pub fn finish(mut self, ran: (&Timeline, Option<RuntimePerf>), prompt_tokens: Option<u32>, ending: &Ending) {
        self.open = false;
        self.write(ran, prompt_tokens, ending);
    }

    fn write(&self, (timeline, perf): (&Timeline, Option<RuntimePerf>), prompt_tokens: Option<u32>, ending: &Ending) {
        crate::metrics::finish_request(&Finished {
            id: &self.id,
            model: &self.model,
            kind: self.kind,
            inputs: Some(self.inputs),
            status: ending.status,
            finish_reason: ending.finish_reason,
            timeline,
            perf,
            dropped_tokens: 0,
            client_disconnected: self.open,
            counted_prompt_tokens: prompt_tokens,
            cached_tokens: 0,
        });
    }
}

impl Drop for ForwardRecord {
    fn drop(&mut self) {
        if self.open {
            let ending = status::forward(Err(&EndReason::Abandoned));
            self.write((&Timeline::new(self.received), None), None, &ending);
        }
    }
}
