//! The request record: how a request that reached the engine gets into the
//! request log and the metrics exactly once, by value, from the api (which
//! alone knows the status and the finish reason it answered with).
//!
//! A reply that reaches its end is recorded there. A reply dropped earlier
//! (the client went away) is recorded when the engine hands over the
//! abandoned job's outcome, after its run was aborted and drained.

use super::status::Ending;
use crate::engine::{Generation, Outcome};
use crate::metrics::Finished;
use tokio::sync::oneshot;

pub struct Record {
    id: String,
    model: String,
    abandoned: Option<oneshot::Receiver<Outcome>>,
}

impl Record {
    pub fn new(id: String, model: String, generation: &mut Generation) -> Record {
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
