//! Requests: the wire types (`wire`), their pure conversion into the
//! conversation's input (`convert`), and here the validation that turns a
//! request into an engine [`Job`] (limits, prompt rendering and counting).

mod convert;
mod wire;

pub use wire::*;

use super::error::ApiError;
use super::Loaded;
use crate::conversation::{PromptError, ReasoningMode, ReplyRules};
use crate::engine::Job;
use crate::sampling::SamplingOverrides;
use serde_json::Value;
use std::time::Instant;

/// Range checks of the sampling fields.
fn validate_sampling(s: &SamplingOverrides) -> Result<(), ApiError> {
    s.check().map_err(|e| ApiError::invalid_value(e.field, e.to_string()))
}

/// A validated request, ready to become a job.
#[derive(Debug)]
pub struct Validated {
    pub job: Job,
    pub stream: bool,
    pub include_usage: bool,
    pub stops: Vec<String>,
    pub rules: ReplyRules,
}

/// `max_tokens` default of the legacy endpoint (OpenAI's).
pub const LEGACY_MAX_TOKENS: u32 = 16;

impl Common {
    fn validate(
        &self,
        id: &str,
        prompt: String,
        max_tokens: Option<u32>,
        limit: u32,
        received: Instant,
    ) -> Result<Validated, ApiError> {
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::invalid_value(
                    "n",
                    "Only `n = 1` is supported: the NPU runs one sequence at a time.",
                ));
            }
        }
        let stream = self.stream.unwrap_or(false);
        if self.stream_options.is_some() && !stream {
            return Err(ApiError::invalid_value(
                "stream_options",
                "`stream_options` is only allowed with `stream: true`.",
            ));
        }
        if let Some(m) = max_tokens {
            if m == 0 || m > limit {
                return Err(ApiError::invalid_value(
                    "max_tokens",
                    format!("`max_tokens` must be between 1 and {limit} (the server's max_new_tokens)."),
                ));
            }
        }
        let stops = match &self.stop {
            None => Vec::new(),
            Some(StopSequences::One(s)) => vec![s.clone()],
            Some(StopSequences::Many(v)) if v.len() > 4 => {
                return Err(ApiError::invalid_value("stop", "`stop` takes at most 4 sequences."));
            }
            Some(StopSequences::Many(v)) => v.clone(),
        };
        if !self.extra.is_empty() {
            tracing::debug!(fields = ?self.extra.keys().collect::<Vec<_>>(), "ignoring unknown request fields");
        }
        let sampling = SamplingOverrides::from(self.sampling);
        validate_sampling(&sampling)?;
        Ok(Validated {
            job: Job {
                id: id.to_owned(),
                prompt,
                received,
                max_new_tokens: max_tokens,
                sampling,
                enable_thinking: false,
                tokens: None,
            },
            stream,
            include_usage: self.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false),
            stops,
            rules: ReplyRules { reasoning: ReasoningMode::Inline, starts_in_thinking: false, tool_syntax: None },
        })
    }
}

impl ChatCompletionRequest {
    pub fn validate(
        &self,
        id: &str,
        model: &Loaded,
        reasoning: ReasoningMode,
        received: Instant,
    ) -> Result<Validated, ApiError> {
        let max_tokens = match (self.common.max_tokens, self.max_completion_tokens) {
            (Some(a), Some(b)) if a != b => {
                return Err(ApiError::invalid_value(
                    "max_completion_tokens",
                    "`max_tokens` and `max_completion_tokens` differ; send one of them.",
                ));
            }
            (a, b) => a.or(b),
        };
        let chat = convert::chat_input(self)?;
        let enable_thinking = chat.variables.get("enable_thinking").and_then(Value::as_bool).unwrap_or(false);
        let rendered = model.prompter.render(&chat).map_err(|e| match e {
            PromptError::Template(e) => ApiError::bad_request(Some("messages"), e.to_string()),
            e @ PromptError::AtMessage { index, .. } => {
                ApiError::bad_request(Some(&format!("messages[{index}]")), e.to_string())
            }
        })?;
        let limit = model.engine.limits().max_new_tokens;
        let mut v = self.common.validate(id, rendered.prompt, max_tokens, limit, received)?;
        count_prompt(&mut v.job, model, "messages")?;
        v.job.enable_thinking = enable_thinking;
        v.rules = ReplyRules {
            reasoning,
            starts_in_thinking: rendered.starts_in_thinking,
            tool_syntax: rendered.tool_syntax,
        };
        Ok(v)
    }
}

impl CompletionRequest {
    pub fn validate(&self, id: &str, model: &Loaded, received: Instant) -> Result<Validated, ApiError> {
        let prompt = match &self.prompt {
            Prompt::One(p) => p.clone(),
            Prompt::Many(v) if v.len() == 1 => v[0].clone(),
            Prompt::Many(_) => {
                return Err(ApiError::invalid_value(
                    "prompt",
                    "Only one prompt per request is supported (the NPU runs one sequence at a time).",
                ));
            }
        };
        convert::no_nul("prompt", &prompt)?;
        let limit = model.engine.limits().max_new_tokens;
        let max_tokens = Some(self.common.max_tokens.unwrap_or(LEGACY_MAX_TOKENS.min(limit)));
        let mut v = self.common.validate(id, prompt, max_tokens, limit, received)?;
        count_prompt(&mut v.job, model, "prompt")?;
        Ok(v)
    }
}

/// With a tokenizer, the prompt is counted exactly and refused before the
/// NPU is touched when it leaves no room for the reply: `max_tokens` if the
/// client set it, else one token (the reply then ends at the context's end).
fn count_prompt(job: &mut Job, model: &Loaded, param: &str) -> Result<(), ApiError> {
    let Some(ids) = model.prompter.tokenize(&job.prompt) else { return Ok(()) };
    let n = ids.len();
    let context = u64::from(model.engine.limits().max_context_len);
    let prompt = n as u64;
    let completion = u64::from(job.max_new_tokens.unwrap_or(1));
    if prompt + completion > context {
        let mut e = ApiError::bad_request(
            Some(param),
            match job.max_new_tokens {
                Some(m) => format!("This model's maximum context length is {context} tokens. However, you requested {} tokens ({prompt} in the {param}, {m} in the completion). Please reduce the length of the {param} or completion.", prompt + completion),
                None => format!("This model's maximum context length is {context} tokens. However, your {param} resulted in {prompt} tokens, leaving no room for a reply. Please reduce the length of the {param}."),
            },
        );
        e.body.code = Some("context_length_exceeded");
        return Err(e);
    }
    // Vocabularies are far below 2^31: an id that does not fit is not sent.
    job.tokens = ids.into_iter().map(|id| i32::try_from(id).ok()).collect();
    Ok(())
}
