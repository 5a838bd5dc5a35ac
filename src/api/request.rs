//! Request wire types and their validation into an engine [`Job`].

use super::error::ApiError;
use crate::conversation::{self, Message, ReasoningMode, ReplyRules, ToolSyntax};
use crate::engine::{Job, SamplingOverrides};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::time::Instant;
use utoipa::ToSchema;

/// `stop`: a string or an array of up to 4 strings.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StopSequences {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// Range checks of the sampling fields (OpenAI's plus the llama.cpp/vLLM
/// extensions RKLLM users expect).
fn validate_sampling(s: &SamplingOverrides) -> Result<(), ApiError> {
    fn range(param: &str, v: Option<f32>, lo: f32, hi: f32) -> Result<(), ApiError> {
        match v {
            Some(x) if !(lo..=hi).contains(&x) => {
                Err(ApiError::invalid_value(param, format!("`{param}` must be between {lo} and {hi}, got {x}")))
            }
            _ => Ok(()),
        }
    }
    range("temperature", s.temperature, 0.0, 2.0)?;
    range("top_p", s.top_p, 0.0, 1.0)?;
    range("frequency_penalty", s.frequency_penalty, -2.0, 2.0)?;
    range("presence_penalty", s.presence_penalty, -2.0, 2.0)?;
    range("repeat_penalty", s.repeat_penalty, 0.0, 10.0)?;
    range("mirostat_tau", s.mirostat_tau, 0.0, 100.0)?;
    range("mirostat_eta", s.mirostat_eta, 0.0, 1.0)?;
    if matches!(s.top_k, Some(k) if k < 0) {
        return Err(ApiError::invalid_value("top_k", "`top_k` must be >= 0"));
    }
    if matches!(s.mirostat, Some(m) if !(0..=2).contains(&m)) {
        return Err(ApiError::invalid_value("mirostat", "`mirostat` must be 0, 1 or 2"));
    }
    Ok(())
}

/// Fields both endpoints share.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct Common {
    pub model: String,
    #[serde(default)]
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<u32>,
    pub n: Option<u32>,
    pub stop: Option<StopSequences>,
    #[serde(flatten)]
    pub sampling: SamplingOverrides,
    /// Anything else the client sent (ignored, logged at debug).
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

/// One content part; only `text` parts are supported.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatMessage {
    pub role: ChatRole,
    pub content: Option<Content>,
    #[schema(value_type = Option<Vec<Object>>)]
    pub tool_calls: Option<Vec<Value>>,
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    pub messages: Vec<ChatMessage>,
    /// Alias of `max_tokens`; both may be set only to the same value.
    pub max_completion_tokens: Option<u32>,
    /// Extension: reaches the runtime's `enable_thinking`.
    pub enable_thinking: Option<bool>,
    /// Functions the model may call.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required` or `{"type":"function","function":{"name":…}}`.
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    #[serde(flatten)]
    pub common: Common,
}

/// Legacy `prompt`: a string or an array of strings.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Prompt {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(flatten)]
    pub common: Common,
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
        validate_sampling(&self.sampling)?;
        let sampling = self.sampling;
        Ok(Validated {
            job: Job {
                id: id.to_owned(),
                prompt,
                received,
                max_new_tokens: max_tokens,
                sampling,
                enable_thinking: false,
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
        limit: u32,
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
        if self.messages.is_empty() {
            return Err(ApiError::invalid_value("messages", "`messages` must contain at least one message."));
        }
        let messages =
            self.messages.iter().enumerate().map(|(i, m)| to_message(i, m)).collect::<Result<Vec<_>, _>>()?;
        let mut v = self.common.validate(id, conversation::render_chat(&messages), max_tokens, limit, received)?;
        v.job.enable_thinking = self.enable_thinking.unwrap_or(false);
        let tools_on = self.tools.as_ref().is_some_and(|t| !t.is_empty())
            && self.tool_choice.as_ref().and_then(Value::as_str) != Some("none");
        v.rules =
            ReplyRules { reasoning, starts_in_thinking: false, tool_syntax: tools_on.then_some(ToolSyntax::Hermes) };
        Ok(v)
    }
}

impl CompletionRequest {
    pub fn validate(&self, id: &str, limit: u32, received: Instant) -> Result<Validated, ApiError> {
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
        let max_tokens = Some(self.common.max_tokens.unwrap_or(LEGACY_MAX_TOKENS.min(limit)));
        self.common.validate(id, prompt, max_tokens, limit, received)
    }
}

fn to_message(i: usize, m: &ChatMessage) -> Result<Message, ApiError> {
    use conversation::Role;
    let role = match m.role {
        ChatRole::System | ChatRole::Developer => Role::System,
        ChatRole::User => Role::User,
        ChatRole::Assistant => Role::Assistant,
        ChatRole::Tool => Role::Tool,
    };
    if m.role == ChatRole::Tool && m.tool_call_id.is_none() {
        return Err(ApiError::invalid_value(
            &format!("messages[{i}].tool_call_id"),
            "A `tool` message needs `tool_call_id`.",
        ));
    }
    let content = match &m.content {
        None if m.role == ChatRole::Assistant && m.tool_calls.is_some() => String::new(),
        None => {
            return Err(ApiError::invalid_value(
                &format!("messages[{i}].content"),
                "`content` is required for this role.",
            ))
        }
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Parts(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let param = format!("messages[{i}].content[{j}]");
                match (part.kind.as_str(), &part.text) {
                    ("text", Some(t)) => text.push_str(t),
                    ("text", None) => return Err(ApiError::invalid_value(&param, "A text part needs `text`.")),
                    (kind, _) => {
                        return Err(ApiError::invalid_value(&param, format!("Content parts of type `{kind}` are not supported; only `text` parts are (this server has no vision support).")));
                    }
                }
            }
            text
        }
    };
    Ok(Message { role, content })
}
