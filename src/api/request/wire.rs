//! The request bodies as clients send them (serde + OpenAPI schema).

use crate::api::named::NamesModel;
use crate::sampling::SamplingOverrides;
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// Any JSON object the server reads whole (template variables, a JSON
/// schema, a tool's parameters). Only its schema is used: an object whose
/// keys and texts hold no NUL (`schema_rules` states it, `nul.rs` checks
/// it), since such objects reach the prompt.
pub struct AnyObject;

impl utoipa::PartialSchema for AnyObject {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new().schema_type(utoipa::openapi::schema::Type::Object).into()
    }
}

impl ToSchema for AnyObject {}

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
    /// Names the conversation (OpenAI's field; the `X-Session-Id` header
    /// does the same): a hint for the conversation cache, which still
    /// matches the prompt itself.
    pub prompt_cache_key: Option<String>,
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

/// One content part: `text`, or `image_url` (a base64 `data:` URL) for a
/// model with a vision encoder.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub image_url: Option<ImageUrl>,
}

/// `{"url": "data:image/png;base64,…", "detail": …}` (`detail` is ignored:
/// the encoder has one input size); a bare URL string is taken too.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ImageUrl {
    Object { url: String, detail: Option<String> },
    Url(String),
}

impl ImageUrl {
    pub fn url(&self) -> &str {
        match self {
            ImageUrl::Object { url, .. } | ImageUrl::Url(url) => url,
        }
    }
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
    /// Alias of `max_tokens` (which OpenAI deprecated for this one). Both may
    /// be set only to the same value: different values are refused (400,
    /// `param: max_completion_tokens`), a rule JSON Schema cannot state.
    pub max_completion_tokens: Option<u32>,
    /// Extension: reaches the chat template and the runtime's `enable_thinking`.
    pub enable_thinking: Option<bool>,
    /// OpenAI's reasoning switch: `none` or `minimal` turns thinking off,
    /// `low`, `medium`, `high` or `xhigh` on (the runtime has no finer control);
    /// `enable_thinking` and `chat_template_kwargs.enable_thinking` win over it.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Extension: extra variables for the chat template (e.g. `{"enable_thinking": false}`).
    #[schema(value_type = Option<AnyObject>)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// Functions the model may call, each name once (a rule JSON Schema cannot state).
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required` or `{"type":"function","function":{"name":…}}` naming a
    /// function of `tools` (a rule JSON Schema cannot state).
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    /// `{"type": "text"}`, `{"type": "json_object"}` or
    /// `{"type": "json_schema", "json_schema": {"name", "schema"}}`: the
    /// format is asked for in the prompt and the reply checked against it
    /// (the runtime cannot constrain decoding; see docs/api.md).
    #[schema(value_type = Option<AnyObject>)]
    pub response_format: Option<Value>,
    #[serde(flatten)]
    pub common: Common,
}

/// `reasoning_effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    /// OpenAI's newest level (Codex CLI sends it): on, as `high`.
    Xhigh,
}

impl ReasoningEffort {
    /// Whether the model is to think: the template's and the runtime's one switch.
    pub fn thinking(self) -> bool {
        !matches!(self, ReasoningEffort::None | ReasoningEffort::Minimal)
    }
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

impl NamesModel for ChatCompletionRequest {
    fn model(&self) -> &str {
        &self.common.model
    }
}

impl NamesModel for CompletionRequest {
    fn model(&self) -> &str {
        &self.common.model
    }
}
