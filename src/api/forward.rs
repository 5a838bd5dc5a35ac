//! What the embedding and rerank endpoints (OpenAI's, Ollama's) share
//! around the engine's hidden-layer and logits jobs: submitting the job and
//! recording the request once (`record.rs`).

use super::error::ApiError;
use super::record::{Counting, ForwardRecord};
use super::status;
use crate::engine::{Capture, ForwardJob, Matrix, Place, RunInput};
use crate::metrics::{Kind, RuntimePerf, Timeline, Timings};
use crate::registry::Lease;
use std::time::Instant;

/// A job that ran every input; its record is written by [`Ran::answered`]
/// or [`Ran::refuse`].
pub struct Ran {
    pub outputs: Vec<Matrix>,
    /// The tokens the runtime read, over every input (`usage.prompt_tokens`).
    pub prompt_tokens: usize,
    timeline: Timeline,
    perf: Option<RuntimePerf>,
    record: ForwardRecord,
}

/// Queues the job in its place and waits for it; a job that did not
/// complete is recorded with its reason's status.
pub async fn run(
    lease: &Lease,
    place: Place,
    kind: Kind,
    inputs: Vec<RunInput>,
    capture: Capture,
    counting: &Counting,
) -> Result<Ran, ApiError> {
    let count = inputs.len();
    let job = ForwardJob { inputs, capture, lora: lease.adapter.clone() };
    let pending = lease.engine.forward(place, job);
    // From here the request is the record's to count, even if the client
    // leaves (a record of a job that never ran starts when it was handed in).
    let record = ForwardRecord::new(kind, &lease.served_id(), count, Instant::now(), counting);
    let forward = pending.await;
    match forward.outputs {
        Ok(outputs) => {
            let prompt_tokens = outputs.iter().map(|m| m.num_tokens).sum();
            Ok(Ran { outputs, prompt_tokens, timeline: forward.timeline, perf: forward.perf, record })
        }
        Err(reason) => {
            let ending = status::forward(Err(&reason));
            record.finish((&forward.timeline, forward.perf), None, &ending);
            Err(recorded(ending))
        }
    }
}

impl Ran {
    /// Answered with 200; the job's timings (Ollama's durations read them).
    pub fn answered(self) -> Timings {
        let tokens = u32::try_from(self.prompt_tokens).ok();
        self.record.finish((&self.timeline, self.perf), tokens, &status::forward(Ok(())));
        Timings::derive(&self.timeline, self.perf, 0)
    }

    /// Refused after the run, with `ending`'s status.
    pub fn refuse(self, ending: status::Ending) -> ApiError {
        let tokens = u32::try_from(self.prompt_tokens).ok();
        self.record.finish((&self.timeline, self.perf), tokens, &ending);
        recorded(ending)
    }
}

fn recorded(ending: status::Ending) -> ApiError {
    ending.error.unwrap_or_else(|| ApiError::runtime("the request ended without a result"))
}
