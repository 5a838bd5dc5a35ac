//! What one request may take: the token limit, the time-outs and the
//! context.

use std::time::Duration;

/// What one request may take.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_new_tokens: u32,
    pub first_token_base: Duration,
    pub first_token_per_kib: Duration,
    pub request_timeout: Duration,
    /// The context given to `rkllm_init`; with `context_from_model`, the
    /// first init's, replaced at load by the context the model was
    /// converted for (`context.rs`).
    pub max_context_len: u32,
    pub context_from_model: bool,
}

/// The context the vendor's demos give `rkllm_init`, and the one a model is
/// first initialised with when its own is to be read (`context.rs`).
pub const DEFAULT_MAX_CONTEXT_LEN: u32 = 4096;

impl Limits {
    /// Prefill time grows with the prompt, so the first-token allowance does too.
    pub fn first_token_timeout(&self, prompt_bytes: usize) -> Duration {
        self.first_token_base + self.first_token_per_kib.mul_f64(prompt_bytes as f64 / 1024.0)
    }
}
