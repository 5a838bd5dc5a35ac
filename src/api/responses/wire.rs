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
    /// `none`/`minimal`: thinking off; `low`, `medium`, `high`: on.
    pub effort: Option<crate::api::request::ReasoningEffort>,
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
    /// Function tools: `{"type": "function", "name", "description"?, "parameters"?}`, each
    /// name once (a rule JSON Schema cannot state).
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required` or `{"type": "function", "name"}` naming a function of
    /// `tools` (a rule JSON Schema cannot state).
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    pub reasoning: Option<ReasoningOptions>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", …}}`.
    #[schema(value_type = Option<crate::api::request::AnyObject>)]
    pub text: Option<Map<String, Value>>,
    /// Refused unless null: responses are not stored (docs/api.md).
    #[schema(schema_with = null_only)]
    pub previous_response_id: Option<String>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// Anything else (`store`, `metadata`, `user`, …) is accepted and ignored.
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
