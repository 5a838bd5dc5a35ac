//! Request wire types and their validation into an engine [`Job`].

use super::error::ApiError;
use crate::conversation::{self, ChatInput, Message, PromptError, ReasoningMode, ReplyRules, ToolChoice};
use crate::engine::{Engine, Job};
use crate::sampling::SamplingOverrides;
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

macro_rules! wire_sampling {
    ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $lo:literal ..= $hi:literal ),* $(,)?) => {
        /// The sampling fields of a request (OpenAI's plus the llama.cpp/vLLM
        /// extensions RKLLM users expect); an omitted field keeps the RKLLM default.
        #[derive(Debug, Clone, Copy, Default, Deserialize, ToSchema)]
        pub struct SamplingFields {
            $( $(#[doc = $doc])* pub $name: Option<$ty>, )*
        }

        impl From<SamplingFields> for SamplingOverrides {
            fn from(w: SamplingFields) -> Self {
                SamplingOverrides { $( $name: w.$name, )* }
            }
        }
    };
}
crate::with_sampling_fields!(wire_sampling);

/// Range checks of the sampling fields.
fn validate_sampling(s: &SamplingOverrides) -> Result<(), ApiError> {
    s.check().map_err(|e| ApiError::invalid_value(e.field, e.to_string()))
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
    pub sampling: SamplingFields,
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
    /// The participant's name (passed to the template).
    pub name: Option<String>,
    /// Extension: an assistant turn's reasoning, as returned in `reasoning_content`.
    pub reasoning_content: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    pub messages: Vec<ChatMessage>,
    /// Alias of `max_tokens`; both may be set only to the same value.
    pub max_completion_tokens: Option<u32>,
    /// Extension: reaches the chat template and the runtime's `enable_thinking`.
    pub enable_thinking: Option<bool>,
    /// Extension: extra variables for the chat template (e.g. `{"enable_thinking": false}`).
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
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
                prompt_tokens: None,
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
        engine: &Engine,
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
        let tools = self.tools.clone().unwrap_or_default();
        validate_tools(&tools)?;
        let tool_choice = tool_choice(self.tool_choice.as_ref(), &tools)?;
        let mut variables = self.chat_template_kwargs.clone().unwrap_or_default();
        // Any non-empty string is true to a template: "false" would turn thinking on.
        if variables.get("enable_thinking").is_some_and(|v| !v.is_boolean()) {
            return Err(ApiError::invalid_value(
                "chat_template_kwargs.enable_thinking",
                "`chat_template_kwargs.enable_thinking` must be a boolean (true or false).",
            ));
        }
        if let Some(on) = self.enable_thinking {
            variables.insert("enable_thinking".into(), Value::Bool(on));
        }
        let enable_thinking = variables.get("enable_thinking").and_then(Value::as_bool).unwrap_or(false);
        let chat = ChatInput { messages, tools, tool_choice, variables };
        let rendered = engine.prompter().render(&chat).map_err(|e| match e {
            PromptError::Template(e) => ApiError::bad_request(Some("messages"), e.to_string()),
            e @ PromptError::AtMessage { index, .. } => {
                ApiError::bad_request(Some(&format!("messages[{index}]")), e.to_string())
            }
        })?;
        let limit = engine.limits().max_new_tokens;
        let mut v = self.common.validate(id, rendered.prompt, max_tokens, limit, received)?;
        count_prompt(&mut v.job, engine, "messages")?;
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
    pub fn validate(&self, id: &str, engine: &Engine, received: Instant) -> Result<Validated, ApiError> {
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
        let limit = engine.limits().max_new_tokens;
        let max_tokens = Some(self.common.max_tokens.unwrap_or(LEGACY_MAX_TOKENS.min(limit)));
        let mut v = self.common.validate(id, prompt, max_tokens, limit, received)?;
        count_prompt(&mut v.job, engine, "prompt")?;
        Ok(v)
    }
}

/// With a tokenizer, the prompt is counted exactly and refused before the
/// NPU is touched when it leaves no room for the reply: `max_tokens` if the
/// client set it, else one token (the reply then ends at the context's end).
fn count_prompt(job: &mut Job, engine: &Engine, param: &str) -> Result<(), ApiError> {
    let Some(n) = engine.prompter().count_tokens(&job.prompt) else { return Ok(()) };
    let context = u64::from(engine.limits().max_context_len);
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
    job.prompt_tokens = u32::try_from(n).ok();
    Ok(())
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
    let tool_calls = match &m.tool_calls {
        None => Vec::new(),
        Some(_) if m.role != ChatRole::Assistant => {
            return Err(ApiError::invalid_value(
                &format!("messages[{i}].tool_calls"),
                "Only `assistant` messages carry `tool_calls`.",
            ));
        }
        Some(calls) => calls.iter().enumerate().map(|(j, c)| to_tool_call(i, j, c)).collect::<Result<_, _>>()?,
    };
    let content = match &m.content {
        None if !tool_calls.is_empty() => None,
        None => {
            return Err(ApiError::invalid_value(
                &format!("messages[{i}].content"),
                "`content` is required for this role.",
            ))
        }
        Some(Content::Text(t)) => Some(t.clone()),
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
            Some(text)
        }
    };
    Ok(Message {
        role,
        content,
        name: m.name.clone(),
        tool_calls,
        tool_call_id: m.tool_call_id.clone(),
        reasoning_content: m.reasoning_content.clone().filter(|_| m.role == ChatRole::Assistant),
    })
}

/// `{"id", "type": "function", "function": {"name", "arguments"}}`; the
/// arguments are JSON text (an object is accepted and written as text).
fn to_tool_call(i: usize, j: usize, call: &Value) -> Result<conversation::ToolCall, ApiError> {
    let param = |s: &str| format!("messages[{i}].tool_calls[{j}]{s}");
    let bad = |s: &str, m: &str| Err(ApiError::invalid_value(&param(s), m.to_owned()));
    let Some(id) = call.get("id").and_then(Value::as_str) else {
        return bad(".id", "A tool call needs a string `id`.");
    };
    if call.get("type").is_some_and(|t| t != "function") {
        return bad(".type", "Only tool calls of type `function` are supported.");
    }
    let Some(name) = call.pointer("/function/name").and_then(Value::as_str) else {
        return bad(".function.name", "A tool call needs `function.name`.");
    };
    let arguments = match call.pointer("/function/arguments") {
        Some(Value::String(text)) => text.clone(),
        Some(object @ Value::Object(_)) => object.to_string(),
        _ => return bad(".function.arguments", "A tool call needs `function.arguments` (a JSON string)."),
    };
    Ok(conversation::ToolCall { id: id.to_owned(), name: name.to_owned(), arguments })
}

/// Each tool: `{"type": "function", "function": {"name", "description"?, "parameters"?}}`
/// with a unique name of 1–64 letters, digits, `_` or `-` (OpenAI's rule).
fn validate_tools(tools: &[Value]) -> Result<(), ApiError> {
    let mut seen = std::collections::HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let bad = |s: &str, m: &str| Err(ApiError::invalid_value(&format!("tools[{i}]{s}"), m.to_owned()));
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return bad(".type", "Only tools of type `function` are supported.");
        }
        let Some(function) = tool.get("function").and_then(Value::as_object) else {
            return bad(".function", "A function tool needs a `function` object.");
        };
        let name = function.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty()
            || name.len() > 64
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return bad(".function.name", "`function.name` must be 1 to 64 letters, digits, underscores or dashes.");
        }
        if !seen.insert(name) {
            return bad(".function.name", &format!("The function `{name}` is defined twice."));
        }
        if function.get("description").is_some_and(|d| !d.is_string()) {
            return bad(".function.description", "`function.description` must be a string.");
        }
        if function.get("parameters").is_some_and(|p| !p.is_object()) {
            return bad(".function.parameters", "`function.parameters` must be a JSON Schema object.");
        }
    }
    Ok(())
}

/// OpenAI's defaults: `none` without tools, `auto` with them.
fn tool_choice(choice: Option<&Value>, tools: &[Value]) -> Result<ToolChoice, ApiError> {
    let bad = |m: String| Err(ApiError::invalid_value("tool_choice", m));
    let needs_tools = |c: ToolChoice| {
        if tools.is_empty() {
            bad("`tool_choice` requires `tools`.".into())
        } else {
            Ok(c)
        }
    };
    match choice {
        None if tools.is_empty() => Ok(ToolChoice::None),
        None => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(if tools.is_empty() { ToolChoice::None } else { ToolChoice::Auto }),
            "required" => needs_tools(ToolChoice::Required),
            other => bad(format!("`tool_choice` must be `none`, `auto`, `required` or a function, not `{other}`.")),
        },
        Some(v) => {
            let name = match (v.get("type").and_then(Value::as_str), v.pointer("/function/name").and_then(Value::as_str)) {
                (Some("function"), Some(name)) => name,
                _ => return bad("`tool_choice` must be `none`, `auto`, `required` or `{\"type\": \"function\", \"function\": {\"name\": …}}`.".into()),
            };
            if !tools.iter().any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name)) {
                return bad(format!("`tool_choice` names the function `{name}`, which is not in `tools`."));
            }
            Ok(ToolChoice::Function(name.to_owned()))
        }
    }
}
