//! Hidden-layer and logits jobs (embeddings, reranking): the model reads
//! each input and returns numbers instead of text. A job takes one queue
//! place and one turn, like a generation, so the NPU is shared in arrival
//! order; its inputs run one after the other inside that turn.

use super::outcome::{Deadline, EndReason};
use super::queue::Place;
use super::state::Engine;
use crate::metrics::{RuntimePerf, Timeline};
/// What a job is made of and what it returns: the binding's plain data
/// types (no FFI in them), named here so that the api asks the engine, not
/// the binding, for them.
pub use rkllm_sys::{Capture, Matrix, Rows, RunInput};
use rkllm_sys::{Event, Finish, RunControl, RunRequest};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

/// One job: what each input is and which numbers to keep of it.
#[derive(Debug, Clone)]
pub struct ForwardJob {
    /// Text (tokenized by the runtime) or token ids, one run each.
    pub inputs: Vec<RunInput>,
    pub capture: Capture,
    /// The LoRA adapter every input runs with; `None`: the base model.
    pub lora: Option<String>,
}

/// What a job returned, with its timeline: `received`, `admitted` (its
/// turn), `finished` (the last run's end, or the failure). No tokens are
/// generated, so no token instants.
#[derive(Debug, Clone)]
pub struct Forward {
    /// One matrix per input, in order; or why the job did not complete.
    pub outputs: Result<Vec<Matrix>, EndReason>,
    pub timeline: Timeline,
    /// The runtime's perf stats of a job of one input (a job of several has
    /// one set per run, none of which is the request's).
    pub perf: Option<RuntimePerf>,
}

/// If the consumer goes away mid-run: abort it (ignored during a prefill)
/// and tell the conversation cache the runtime's KV cache is unknown.
struct RunningGuard<'a> {
    engine: &'a Engine,
    control: Option<RunControl>,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        if let Some(control) = self.control.take() {
            control.abort();
        }
        // A stateless run leaves the KV cache empty; an abandoned one, unknown.
        self.engine.forget_kv();
    }
}

impl Engine {
    /// Queues a job in the place [`Engine::reserve`] gave (its `received`
    /// instant, as for a generation); the returned future waits for the
    /// turn, then runs every input.
    pub fn forward(self: &Arc<Self>, place: Place, job: ForwardJob) -> impl Future<Output = Forward> + Send + 'static {
        let received = Instant::now();
        let engine = self.clone();
        async move {
            let mut timeline = Timeline::new(received);
            // As a generation's: no waiting past the shutdown's abort or behind a stuck runtime.
            let _turn = tokio::select! {
                turn = engine.queue.wait_turn(place) => turn,
                reason = engine.handle.halt.halted() => {
                    timeline.finished = Some(Instant::now());
                    return Forward { outputs: Err(reason), timeline, perf: None };
                }
            };
            let admitted = Instant::now();
            timeline.admitted = Some(admitted);
            let single = job.inputs.len() == 1;
            let (outputs, last) = match engine.run_inputs(job, admitted).await {
                Ok((outputs, last)) => (Ok(outputs), Some(last)),
                Err(reason) => (Err(reason), None),
            };
            // `finished`: when the last `rkllm_run` returned, or the failure was seen.
            timeline.finished = Some(last.as_ref().map_or_else(Instant::now, |f| f.at));
            let perf = last.and_then(|f| f.perf).filter(|_| single).map(RuntimePerf::from);
            Forward { outputs, timeline, perf }
        }
    }

    /// Runs each input in turn (the caller holds the turn); the matrices and
    /// the last run's end.
    async fn run_inputs(&self, job: ForwardJob, admitted: Instant) -> Result<(Vec<Matrix>, Finish), EndReason> {
        let deadline = tokio::time::Instant::from_std(admitted + self.handle.limits.request_timeout);
        let mut guard = RunningGuard { engine: self, control: None };
        let mut outputs = Vec::with_capacity(job.inputs.len());
        let mut last = None;
        for input in job.inputs {
            if self.is_closing() {
                return Err(EndReason::ShuttingDown);
            }
            let sent = match &input {
                RunInput::Tokens(ids) => Some(ids.len()),
                RunInput::Prompt(_) => None,
            };
            let request = match input {
                RunInput::Prompt(text) => RunRequest::prompt(text),
                RunInput::Tokens(ids) => RunRequest::tokens(ids),
            };
            let request = RunRequest { capture: Some(job.capture.clone()), lora: job.lora.clone(), ..request };
            let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
            let control = self.handle.model.submit(request, tx).map_err(|e| EndReason::RuntimeError(e.to_string()))?;
            guard.control = Some(control.clone());
            let mut timed_out = false;
            let finish = loop {
                let next = if timed_out {
                    events.recv().await
                } else {
                    match tokio::time::timeout_at(deadline, events.recv()).await {
                        Ok(next) => next,
                        Err(_) => {
                            timed_out = true;
                            control.abort();
                            continue;
                        }
                    }
                };
                match next {
                    Some(Event::Finished(finish)) => break finish,
                    Some(_) => {}
                    None => return Err(EndReason::RuntimeError("the runtime thread stopped".into())),
                }
            };
            guard.control = None;
            if timed_out {
                return Err(EndReason::Timeout(Deadline::Request));
            }
            let (matrix, rest) = output(finish)?;
            if sent.is_some_and(|sent| sent != matrix.num_tokens) {
                // Pooling covers the rows the runtime returned: a runtime that
                // skipped part of the input (a loaded prompt cache, say) would
                // give a vector of part of the text, and a low prompt count.
                tracing::warn!(
                    sent,
                    read = matrix.num_tokens,
                    "the runtime's hidden states or logits do not cover the tokens sent; the vector or score is of what it read"
                );
            }
            outputs.push(matrix);
            last = Some(rest);
        }
        last.map(|last| (outputs, last)).ok_or_else(|| EndReason::RuntimeError("the job had no input".into()))
    }
}

/// The run's matrix, and the rest of its end.
fn output(mut finish: Finish) -> Result<(Matrix, Finish), EndReason> {
    if finish.is_error() {
        let state = if finish.runtime_error { ", callback state ERROR" } else { "" };
        return Err(EndReason::RuntimeError(format!(
            "the runtime reported an error (rkllm_run returned {}{state})",
            finish.code
        )));
    }
    match finish.output.take() {
        Some(Ok(matrix)) => Ok((matrix, finish)),
        Some(Err(e)) => Err(EndReason::RuntimeError(format!("the runtime's output cannot be read: {e}"))),
        None => Err(EndReason::RuntimeError("the runtime delivered no hidden states or logits".into())),
    }
}
