//! What the API hands the engine: a prompt, limits and sampling choices.

use crate::sampling::SamplingOverrides;

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
}
