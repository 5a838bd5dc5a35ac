//! What a run reports: its tokens, how it ended, and the runtime's own
//! figures, as plain Rust values.

use crate::common::RKLLMPerfStat;
use crate::output::{CaptureError, Matrix};
use std::time::Instant;

/// One generated token as the callback delivered it.
#[derive(Debug, Clone)]
pub struct Token {
    /// Text completed by this token (may be empty while a character is split).
    pub text: String,
    /// The raw bytes the runtime passed for this token.
    pub bytes: Vec<u8>,
    pub token_id: i32,
    /// The callback state was WAITING (an incomplete character).
    pub waiting: bool,
    /// Bytes (of this token's or held back before it) that fit no
    /// convention for a character split over tokens and were left out of
    /// `text` (`Utf8Assembler`); 0 normally, a wrong guess about the runtime
    /// otherwise, for the caller to report loudly.
    pub dropped_bytes: usize,
    /// Bytes of an unfinished character are held back after this token: a
    /// reply that ends here ends in U+FFFD (a run's `Finish::tail`).
    pub split: bool,
    pub at: Instant,
}

/// How a run ended; always the last event of a run.
#[derive(Debug, Clone)]
pub struct Finish {
    /// When `rkllm_run` returned (or when the run was skipped).
    pub at: Instant,
    /// False when the run was aborted before `rkllm_run` was called.
    pub started: bool,
    /// The return value of `rkllm_run`.
    pub code: i32,
    /// The callback reported the ERROR state.
    pub runtime_error: bool,
    /// `abort` was called for this run.
    pub aborted: bool,
    /// The runtime's perf stats from the FINISH callback.
    pub perf: Option<Perf>,
    /// Bytes that never completed a character, as U+FFFD ("" normally).
    pub tail: String,
    /// A hidden-layer or logits run: what the callback copied (`None`: the
    /// runtime delivered no buffer).
    pub output: Option<Result<Matrix, CaptureError>>,
    /// What a batched run did that contradicts this layer's reading of the
    /// manual's open points (where `perf` is reported, finished slots
    /// staying finished): the caller logs each one loudly. Empty normally.
    pub surprises: Vec<String>,
}

/// How a batched run ended, as its caller learns it once `rkllm_run` returned.
#[derive(Debug, Clone)]
pub struct BatchEnd {
    pub finish: Finish,
    /// Each slot's generated ids in order, as the callbacks delivered them
    /// (fillers' and left slots' too: they are in the slots' KV caches all
    /// the same).
    pub slot_tokens: Vec<Vec<i32>>,
}

/// The runtime's own figures for one run (`RKLLMPerfStat` in plain Rust
/// types, so the daemon never reads a `repr(C)` struct).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perf {
    pub prefill_time_ms: f64,
    pub prefill_tokens: i64,
    pub generate_time_ms: f64,
    pub generate_tokens: i64,
    pub memory_usage_mb: f64,
    /// Sequences the figures cover: 1, or `n_batch` for a batched run
    /// (whose tokens and times are the whole batch's).
    pub batch_size: u32,
}

impl From<RKLLMPerfStat> for Perf {
    fn from(p: RKLLMPerfStat) -> Self {
        Perf {
            prefill_time_ms: p.prefill_time_ms.into(),
            prefill_tokens: p.prefill_tokens.into(),
            generate_time_ms: p.generate_time_ms.into(),
            generate_tokens: p.generate_tokens.into(),
            memory_usage_mb: p.memory_usage_mb.into(),
            batch_size: 1,
        }
    }
}

impl Finish {
    pub fn is_error(&self) -> bool {
        self.started && (self.runtime_error || self.code != 0)
    }
}

#[derive(Debug, Clone)]
pub enum Event {
    /// `rkllm_run` is about to be called (the request's `admitted` instant).
    Started {
        at: Instant,
        /// The run's id, as [`Activity::run`](crate::Activity::run) names it
        /// while the run is inside `rkllm_run` (a batch's slots share one).
        run: u64,
    },
    Token(Token),
    Finished(Finish),
}
