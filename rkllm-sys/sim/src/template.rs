//! The chat template the simulated runtime wraps prompts in, which decides
//! how many tokens a run prefills.

use crate::token_ids;

/// The built-in template's system part (ChatML, as Qwen models use): 11 tokens.
pub const DEFAULT_SYSTEM: &str = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n";
/// The built-in template's text before the prompt: 3 tokens.
pub const DEFAULT_PREFIX: &str = "<|im_start|>user\n";
/// The built-in template's text after the prompt: 5 tokens.
pub const DEFAULT_POSTFIX: &str = "<|im_end|>\n<|im_start|>assistant\n";

/// `system`, `prefix` and `postfix` as given to `rkllm_set_chat_template`.
#[derive(Debug, Clone)]
pub(crate) struct ChatTemplate {
    system: String,
    prefix: String,
    postfix: String,
}

impl Default for ChatTemplate {
    fn default() -> Self {
        ChatTemplate::new(DEFAULT_SYSTEM, DEFAULT_PREFIX, DEFAULT_POSTFIX)
    }
}

impl ChatTemplate {
    /// Empty strings contribute nothing, so three of them disable wrapping.
    pub fn new(system: &str, prefix: &str, postfix: &str) -> Self {
        ChatTemplate { system: system.to_owned(), prefix: prefix.to_owned(), postfix: postfix.to_owned() }
    }

    /// Ids of the system part, prefilled only into an empty KV cache.
    pub fn system_ids(&self) -> Vec<u32> {
        token_ids(&self.system)
    }

    /// The text before a turn's prompt.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The text after a turn's prompt.
    pub fn postfix(&self) -> &str {
        &self.postfix
    }

    /// Ids of one turn: `prefix + prompt + postfix`, tokenized as one text.
    pub fn turn_ids(&self, prompt: &str) -> Vec<u32> {
        token_ids(&format!("{}{}{}", self.prefix, prompt, self.postfix))
    }
}
