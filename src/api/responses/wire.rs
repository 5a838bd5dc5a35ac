//! OpenAI's Responses API request, as far as the daemon serves it.

use crate::api::request::SamplingFields;
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// `input`: a user message's text, or a list of items.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    /// Messages (`{role, content}`), `function_call`, `function_call_output`
    /// and `reasoning` items, as earlier responses returned them.
    Items(Vec<InputItem>),
}

/// One input item (an object; its `type` says which).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(value_type = Object)]
pub struct InputItem(pub Map<String, Value>);

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ReasoningOptions {
    /// `none`/`minimal`: thinking off; `low`, `medium`, `high`, `xhigh`: on.
    pub effort: Option<crate::api::request::ReasoningEffort>,
    /// Accepted and ignored (reported in `x-rkllmd-ignored-params`): no
    /// summary is written; the reasoning item carries the model's own text.
    pub summary: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CreateResponse {
    pub model: String,
    pub input: Input,
    /// A system message put before `input`.
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub stream: Option<bool>,
    /// Function tools: `{"type": "function", "name", "description"?, "parameters"?}`;
    /// `custom` tools (`{"type": "custom", "name", "description"?, "format"?}`: one text
    /// input); `namespace` tools (`{"type": "namespace", "name", "tools": [function or custom
    /// tools]}`), whose tools the model sees as `NAMESPACE__NAME`, at most 64 characters. Each
    /// name once, a namespace's joined to its own (rules JSON Schema cannot state). Tools of
    /// other types (`web_search`, `file_search`, …) cannot run here: left out and reported.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required` or `{"type": "function" | "custom", "name", "namespace"?}`
    /// naming a tool of `tools` (a rule JSON Schema cannot state).
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    pub reasoning: Option<ReasoningOptions>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", …}}`; `verbosity` is ignored.
    #[schema(value_type = Option<crate::api::request::AnyObject>)]
    pub text: Option<Map<String, Value>>,
    /// Names the conversation, as on chat: a hint for the conversation cache (at most 256 bytes).
    pub prompt_cache_key: Option<String>,
    /// Refused unless null: responses are not stored (docs/api.md).
    #[schema(schema_with = null_only)]
    pub previous_response_id: Option<String>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// Anything else (`store`, `include`, `parallel_tool_calls`, `metadata`, …) is accepted,
    /// ignored and named in `x-rkllmd-ignored-params` (`store: false` is what is done anyway).
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

impl crate::api::named::NamesModel for CreateResponse {
    fn model(&self) -> &str {
        &self.model
    }
}

/// A field the server takes only as `null` (or absent).
fn null_only() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new().schema_type(utoipa::openapi::schema::Type::Null).build()
}
