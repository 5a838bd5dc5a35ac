//! What the API hands the engine: a prompt, limits and sampling choices.

use crate::sampling::SamplingOverrides;
use std::sync::Arc;

/// One generation request, already validated by the API layer.
#[derive(Debug, Clone)]
pub struct Job {
    /// The request id (for the request log).
    pub id: String,
    /// The fully rendered prompt (the runtime's own template is disabled).
    pub prompt: String,
    /// `None` = the configured maximum.
    pub max_new_tokens: Option<u32>,
    pub sampling: SamplingOverrides,
    pub enable_thinking: bool,
    /// The prompt's token ids by the model's tokenizer, when one is
    /// configured (its length is `usage.prompt_tokens`; with the
    /// conversation cache they are what the runtime is sent).
    pub tokens: Option<Vec<i32>>,
    /// The LoRA adapter to run with (loaded with the model); `None`: the base model.
    pub lora: Option<String>,
    /// The images, in the order of the prompt's markers (empty: a text job).
    /// Their embeddings are made in the job's turn (`vision.rs`).
    pub images: Vec<ImageInput>,
    /// `count`, `tokens` and `preprocess_ms` filled in by the api.
    pub image_timings: crate::metrics::ImageTimings,
    /// What the conversation cache matches the prompt with besides its ids.
    pub cache: CacheHints,
}

impl Job {
    /// A job of `prompt` asking nothing else: the configured token limit,
    /// RKLLM's sampling, no thinking, token ids, adapter, images or cache
    /// hints. Callers set what they ask with `Job { …, ..Job::new(id, prompt) }`.
    pub fn new(id: impl Into<String>, prompt: impl Into<String>) -> Job {
        Job {
            id: id.into(),
            prompt: prompt.into(),
            max_new_tokens: None,
            sampling: SamplingOverrides::default(),
            enable_thinking: false,
            tokens: None,
            lora: None,
            images: Vec::new(),
            image_timings: Default::default(),
            cache: CacheHints::default(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheHints {
    /// Where the prompt resends the reply of an earlier turn (chat requests
    /// with a tokenizer and the conversation cache on).
    pub resent: Option<Resent>,
    /// The client's name for the conversation (`prompt_cache_key`,
    /// `X-Session-Id`): a hint; the cache matches the ids themselves.
    pub conversation: Option<String>,
    /// How many of the prompt's ids its leading system messages and tools
    /// render to, on a conversation's first turn (no reply in it yet): the
    /// start every conversation of the same agent shares (`shared_prefix.rs`).
    pub stable: Option<usize>,
}

/// An earlier reply in a prompt, as the client resent it: the ids
/// `tokens[start..end]` render the assistant message whose view (the api's
/// name for what a client was shown of a reply) is `view`. The conversation
/// cache matches it against the reply it generated (`kv.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct Resent {
    pub start: usize,
    pub end: usize,
    pub view: String,
    /// The ids of the prompt that asked for the reply, as the client's
    /// history before it renders: only a cached run of that prompt can stand
    /// for it.
    pub before: usize,
}

/// One image of a job, preprocessed by the api.
#[derive(Debug, Clone)]
pub struct ImageInput {
    /// The cache key (a content hash of `pixels`).
    pub hash: u128,
    /// `height × width × 3` bytes, RGB, NHWC.
    pub pixels: Arc<Vec<u8>>,
    /// Where it stands in the prompt's ids (`Job::tokens`): before the id
    /// of this index (the conversation cache's record places it there).
    pub at: usize,
}
