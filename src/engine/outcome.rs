//! How a generation ends, with everything measured about it. The engine
//! says *why* it ended; the api alone decides what that means on the wire.

use crate::metrics::{RuntimePerf, Timeline};

/// Which time-out fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// From admission to the first generated token (grows with the prompt).
    FirstToken,
    /// From the run's start to its first token, by this model's own pace
    /// (`liveness::PrefillPace::stall`): a prefill that hung. Shorter than
    /// the first-token time-out with the defaults.
    Prefill,
    /// From admission to the end of the generation.
    Request,
    /// From one generated token to the next (`liveness::decode_stall`): a
    /// runtime that stopped producing.
    Stall,
}

impl Deadline {
    pub fn as_str(self) -> &'static str {
        match self {
            Deadline::FirstToken => "first token",
            Deadline::Prefill => "prefill stall",
            Deadline::Request => "request",
            Deadline::Stall => "decode stall",
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
    /// [`super::generation::Generation::stop`] was called (a stop sequence matched).
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

/// How a run found its prompt's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// The KV cache held it.
    Resident,
    /// A saved conversation's file was loaded.
    Restored,
    /// A new conversation: the file of a prefix other conversations began
    /// with (an agent's system prompt and tools) was loaded (`shared_prefix.rs`).
    Prefix,
    /// Prefilled from the start, and why.
    Miss(MissReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissReason {
    /// Nothing was cached yet.
    Empty,
    /// The cache and the saved conversations hold other prompts (another
    /// conversation, or this one with an earlier turn edited).
    Other,
    /// The conversation the client named (`prompt_cache_key`, `X-Session-Id`)
    /// is cached, but the prompt does not continue it (an edited turn).
    Edited,
    /// It continues the cached conversation but would overflow the context.
    Context,
    /// The cached positions were computed with another LoRA adapter.
    Adapter,
    /// What the KV cache holds is not known (a run abandoned or disagreeing).
    Unknown,
    /// A saved conversation held it, but loading a file has measured slower
    /// than prefilling here (`saved.rs`), so it was prefilled.
    Costlier,
    /// Its conversation's batch slot was cleared with every other one, for
    /// a job that needed an empty slot (`slots.rs`).
    Displaced,
    /// It continues the cached conversation, but what it adds holds an
    /// image: only a whole multimodal run places images (`prompt.rs`).
    Image,
}

impl CacheUse {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheUse::Resident => "resident",
            CacheUse::Restored => "restored",
            CacheUse::Prefix => "prefix",
            CacheUse::Miss(_) => "miss",
        }
    }

    pub fn reason(self) -> Option<&'static str> {
        match self {
            CacheUse::Miss(reason) => Some(reason.as_str()),
            _ => None,
        }
    }
}

impl MissReason {
    pub fn as_str(self) -> &'static str {
        match self {
            MissReason::Empty => "empty",
            MissReason::Other => "other",
            MissReason::Edited => "edited",
            MissReason::Context => "context",
            MissReason::Adapter => "adapter",
            MissReason::Unknown => "unknown",
            MissReason::Displaced => "displaced",
            MissReason::Costlier => "costlier",
            MissReason::Image => "image",
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
    /// Prompt tokens the run reused from the conversation cache (not prefilled).
    pub cached_tokens: u32,
    /// How the conversation cache found the prompt (`None`: it was not used).
    pub cache: Option<CacheUse>,
}

impl Outcome {
    /// The run started on the runtime thread and ended before its first
    /// token (a refused prompt ends this way).
    pub fn failed_before_first_token(&self) -> bool {
        self.timeline.admitted.is_some() && self.timeline.first_token.is_none()
    }

    /// The job ended before its run started: still queued, or refused by
    /// the runtime (nothing of it ran).
    pub fn never_ran(&self) -> bool {
        self.timeline.admitted.is_none()
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
            cache: None,
        }
    }
}

// `Done` is one event per request and a token arrives every tens of
// milliseconds: moving its bytes costs nothing next to a box per request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum GenEvent {
    /// The run started (the job left the queue; `rkllm_run` was called):
    /// once, before any token.
    Started,
    /// One generated token; `text` may be empty while a character is split.
    Token { text: String },
    /// Always the last event.
    Done(Box<Outcome>),
}
