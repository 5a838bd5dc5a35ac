//! How a generation ends, with everything measured about it. The engine
//! says *why* it ended; the api alone decides what that means on the wire.

use crate::metrics::{RuntimePerf, Timeline};

/// Which time-out fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// From admission to the first generated token (grows with the prompt).
    FirstToken,
    /// From admission to the end of the generation.
    Request,
}

impl Deadline {
    pub fn as_str(self) -> &'static str {
        match self {
            Deadline::FirstToken => "first token",
            Deadline::Request => "request",
        }
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum EndReason {
    /// The runtime finished by itself (end of sequence).
    Eos,
    /// The token limit was reached.
    Length,
    /// [`super::Generation::stop`] was called (a stop sequence matched).
    Stopped,
    /// A time-out fired; the run was aborted.
    Timeout(Deadline),
    /// The runtime reported an error.
    RuntimeError(String),
    /// The daemon is shutting down: the job did not run, or it was cut off
    /// at the end of the shutdown grace period.
    ShuttingDown,
    /// The job did not run: the runtime has not returned from an aborted
    /// run (`halt.rs`), so nothing can run now.
    Unresponsive,
    /// The consumer dropped the generation (the client went away) while it
    /// waited or ran; the run, if any, was aborted.
    Abandoned,
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
    /// Prompt tokens the run reused from the conversation cache (not prefilled).
    pub cached_tokens: u32,
}

impl Outcome {
    /// The run started on the runtime thread and ended before its first
    /// token (a refused prompt ends this way).
    pub fn failed_before_first_token(&self) -> bool {
        self.timeline.admitted.is_some() && self.timeline.first_token.is_none()
    }

    /// An end without a run (or without its figures).
    pub(super) fn without_run(reason: EndReason, mut timeline: Timeline, prompt_tokens: Option<u32>) -> Outcome {
        timeline.finished.get_or_insert_with(std::time::Instant::now);
        Outcome {
            reason,
            timeline,
            perf: None,
            tail: String::new(),
            dropped_tokens: 0,
            prompt_tokens,
            cached_tokens: 0,
        }
    }
}

#[derive(Debug, Clone)]
pub enum GenEvent {
    /// One generated token; `text` may be empty while a character is split.
    Token { text: String },
    /// Always the last event.
    Done(Outcome),
}
