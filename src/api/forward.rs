//! What the embedding and rerank endpoints (OpenAI's, Ollama's) share
//! around the engine's hidden-layer and logits jobs: submitting the job,
//! recording the request once (`record.rs`), and telling the counting
//! middleware whether the record has counted it.

use super::error::ApiError;
use super::record::ForwardRecord;
use super::respond::Admitted;
use super::status;
use crate::engine::ForwardJob;
use crate::metrics::{Kind, RuntimePerf, Timeline, Timings};
use crate::registry::Lease;
use axum::response::{IntoResponse, Response};
use rkllm_sys::{Capture, Matrix, RunInput};
use std::time::Instant;

/// A refusal, and whether the request record has counted it (the request
/// reached the engine); the counting middleware counts the others.
pub struct Refused {
    pub error: ApiError,
    recorded: bool,
}

impl From<ApiError> for Refused {
    fn from(error: ApiError) -> Self {
        Refused { error, recorded: false }
    }
}

/// A handler's body, and whether the request record counted the request:
/// every answer after a run did; one that only loaded the model (Ollama's
/// embed with no input) ran nothing, and the counting middleware counts it.
pub struct Answer<T> {
    body: T,
    recorded: bool,
}

impl<T> Answer<T> {
    /// An answer after a run ([`Ran::answered`] recorded it).
    pub fn recorded(body: T) -> Self {
        Answer { body, recorded: true }
    }

    /// `ran`: whether a run was made (and recorded) for this answer.
    pub fn new(body: T, ran: bool) -> Self {
        Answer { body, recorded: ran }
    }
}

/// The handler's answer as a response, marked [`Admitted`] when the record
/// counted it; `error` shapes a refusal's body.
pub fn respond<T: IntoResponse>(
    result: Result<Answer<T>, Refused>,
    error: impl FnOnce(ApiError) -> Response,
) -> Response {
    let (mut response, recorded) = match result {
        Ok(Answer { body, recorded }) => (body.into_response(), recorded),
        Err(Refused { error: e, recorded }) => (error(e), recorded),
    };
    if recorded {
        response.extensions_mut().insert(Admitted);
    }
    response
}

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

/// Queues the job and waits for it. A refusal of the queue (full) is not
/// recorded here; a job that did not complete is, with its reason's status.
pub async fn run(
    lease: &Lease,
    kind: Kind,
    received: Instant,
    inputs: Vec<RunInput>,
    capture: Capture,
) -> Result<Ran, Refused> {
    let count = inputs.len();
    let job = ForwardJob { inputs, capture, received, lora: lease.adapter.clone() };
    let pending = lease.engine.forward(job).map_err(|e| status::refused(&e))?;
    // From here the request is the record's to count, even if the client leaves.
    let record = ForwardRecord::new(kind, &lease.served_id(), count, received);
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
    pub fn refuse(self, ending: status::Ending) -> Refused {
        let tokens = u32::try_from(self.prompt_tokens).ok();
        self.record.finish((&self.timeline, self.perf), tokens, &ending);
        recorded(ending)
    }
}

fn recorded(ending: status::Ending) -> Refused {
    let error = ending.error.unwrap_or_else(|| ApiError::runtime("the request ended without a result"));
    Refused { error, recorded: true }
}
