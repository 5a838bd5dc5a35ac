//! Ollama's request and response bodies, with Ollama's field names and units
//! (durations in nanoseconds, times as RFC 3339).

use crate::api::named::NamesModel;
use crate::api::request::SamplingFields;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// `options`: the sampling fields (the same names as RKLLM's), the token
/// limit, stop strings, the context check; anything else is ignored.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[schema(as = OllamaOptions)]
pub struct Options {
    /// Tokens to generate; any value ≤ 0 (Ollama's -1 endless, -2 fill the context) means the server's maximum.
    pub num_predict: Option<i64>,
    pub stop: Option<Vec<String>>,
    /// RKLLM has no seed: accepted and ignored.
    pub seed: Option<i64>,
    /// `/api/embed`'s length to cut inputs to (0: the model's context; larger: capped
    /// at it); ignored elsewhere (the context is fixed when the model loads).
    pub num_ctx: Option<u32>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// Ollama's other options (`num_thread`, `num_gpu`, `use_mmap`, …): accepted,
    /// ignored. (`mirostat`, `mirostat_tau` and `mirostat_eta` are RKLLM's
    /// sampling fields too: `sampling` takes them.)
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: Map<String, Value>,
}

/// What chat and generate share.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[schema(as = OllamaCommon)]
pub struct Common {
    #[schema(min_length = 1)]
    pub model: String,
    pub stream: Option<bool>,
    pub options: Option<Options>,
    /// A duration (`"5m"`), seconds, negative = forever, 0 = unload after this request.
    #[schema(schema_with = schema::keep_alive)]
    pub keep_alive: Option<Value>,
    /// `true`/`false`, or a level (`"high"`, `"medium"`, `"low"`) = on.
    #[schema(schema_with = schema::think)]
    pub think: Option<Value>,
    /// `"json"` or a JSON schema: mapped to `response_format` (asked in the prompt, the reply checked).
    #[schema(schema_with = schema::format)]
    pub format: Option<Value>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaInCall)]
pub struct InCall {
    pub function: InFunction,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaInFunction)]
pub struct InFunction {
    pub name: String,
    pub arguments: Value,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaInMessage)]
pub struct InMessage {
    #[schema(schema_with = schema::role)]
    pub role: String,
    #[serde(default)]
    pub content: String,
    pub thinking: Option<String>,
    /// Base64 images (no `data:` prefix needed).
    #[schema(value_type = Option<Vec<String>>)]
    pub images: Option<Vec<Value>>,
    pub tool_calls: Option<Vec<InCall>>,
    pub tool_name: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaChatRequest)]
pub struct ChatRequest {
    #[serde(flatten)]
    pub common: Common,
    pub messages: Option<Vec<InMessage>>,
    /// Each function name once (a rule JSON Schema cannot state).
    pub tools: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaGenerateRequest)]
/// `suffix` and `template` are refused (400): prompts are rendered with the
/// model's chat template; `raw` prompts take no images.
pub struct GenerateRequest {
    #[serde(flatten)]
    pub common: Common,
    pub prompt: Option<String>,
    pub system: Option<String>,
    #[schema(ignore)]
    pub suffix: Option<String>,
    #[schema(ignore)]
    pub template: Option<String>,
    pub raw: Option<bool>,
    /// Base64 images (no `data:` prefix needed).
    #[schema(value_type = Option<Vec<String>>)]
    pub images: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaShowRequest)]
pub struct ShowRequest {
    #[serde(alias = "name")]
    pub model: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaOutCall)]
pub struct OutCall {
    pub function: OutFunction,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaOutFunction)]
pub struct OutFunction {
    pub name: String,
    /// An object, as Ollama sends it.
    pub arguments: Value,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaOutMessage)]
pub struct OutMessage {
    pub role: &'static str,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<OutCall>>,
}

/// The figures of the last object, in nanoseconds.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[schema(as = OllamaStats)]
pub struct Stats {
    pub total_duration: u64,
    pub load_duration: u64,
    pub prompt_eval_count: i64,
    /// Of `prompt_eval_count`, the tokens reused from the conversation cache
    /// (not prefilled), as Ollama reports them; absent where nothing was prefilled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_eval_cached_count: Option<u32>,
    pub prompt_eval_duration: u64,
    pub eval_count: u32,
    pub eval_duration: u64,
}

/// One object of a chat reply (`message`) or a generate reply (`response`).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaChunk)]
pub struct Chunk {
    pub model: String,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<OutMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// Generate's thinking text (chat's is in `message`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    pub done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<&'static str>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
}

/// One line of an NDJSON reply: a chunk, or the error that ends a stream
/// whose generation failed after it began (its status was already 200).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
#[schema(as = OllamaStreamLine)]
pub enum StreamLine {
    Chunk(Box<Chunk>),
    Error(ErrorReply),
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaDetails)]
pub struct Details {
    /// For a LoRA adapter (`BASE:NAME`), the base model; else empty.
    pub parent_model: String,
    pub format: &'static str,
    pub family: String,
    pub families: Vec<String>,
    pub parameter_size: String,
    pub quantization_level: String,
}

/// One entry of `/api/tags` and `/api/ps`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaModelEntry)]
pub struct ModelEntry {
    pub name: String,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_at: Option<String>,
    pub size: u64,
    pub digest: String,
    pub details: Details,
    /// `/api/ps` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_vram: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_length: Option<u32>,
    /// `/api/ps` only, an extension: the conversations kept warm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversations: Option<crate::api::runtime_info::Conversations>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaModels)]
pub struct Models {
    pub models: Vec<ModelEntry>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaShow)]
pub struct Show {
    pub modelfile: String,
    pub parameters: String,
    pub template: String,
    pub details: Details,
    pub model_info: Map<String, Value>,
    pub capabilities: Vec<&'static str>,
    pub modified_at: String,
}

/// `/api/embed`'s `input`: one text or several.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
#[schema(as = OllamaEmbedInput)]
pub enum EmbedInput {
    Text(String),
    Texts(Vec<String>),
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaEmbedRequest)]
pub struct EmbedRequest {
    #[schema(min_length = 1)]
    pub model: String,
    pub input: Option<EmbedInput>,
    /// Cut each input to the context (default), or refuse one too long (`false`).
    pub truncate: Option<bool>,
    /// Only `num_ctx` applies (a smaller context to truncate to); sampling has no say.
    pub options: Option<Options>,
    #[schema(schema_with = schema::keep_alive)]
    pub keep_alive: Option<Value>,
    /// The model's own width only (as `/v1/embeddings`).
    #[schema(minimum = 1)]
    pub dimensions: Option<u32>,
}

/// The legacy `/api/embeddings`: one prompt, one vector.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaLegacyEmbedRequest)]
pub struct LegacyEmbedRequest {
    #[schema(min_length = 1)]
    pub model: String,
    pub prompt: Option<String>,
    pub options: Option<Options>,
    #[schema(schema_with = schema::keep_alive)]
    pub keep_alive: Option<Value>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaEmbedResponse)]
pub struct EmbedResponse {
    pub model: String,
    pub embeddings: Vec<Vec<f32>>,
    pub total_duration: u64,
    pub load_duration: u64,
    pub prompt_eval_count: usize,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaLegacyEmbedResponse)]
pub struct LegacyEmbedResponse {
    pub embedding: Vec<f32>,
}

impl NamesModel for ChatRequest {
    fn model(&self) -> &str {
        &self.common.model
    }
}

impl NamesModel for GenerateRequest {
    fn model(&self) -> &str {
        &self.common.model
    }
}

impl NamesModel for EmbedRequest {
    fn model(&self) -> &str {
        &self.model
    }
}

impl NamesModel for LegacyEmbedRequest {
    fn model(&self) -> &str {
        &self.model
    }
}

/// `/api/version`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaVersion)]
pub struct Version {
    /// The Ollama version whose API this server stands in for (clients compare it).
    pub version: &'static str,
    /// rkllmd's own version.
    pub rkllmd_version: &'static str,
}

/// Every error, as Ollama sends it (clients match on the text).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaError)]
pub struct ErrorReply {
    pub error: String,
}

/// The schemas of fields kept as JSON values and checked by hand (`convert`).
mod schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};

    fn null() -> ObjectBuilder {
        ObjectBuilder::new().schema_type(Type::Null)
    }

    fn one_of(items: impl IntoIterator<Item = ObjectBuilder>) -> Schema {
        items.into_iter().fold(OneOfBuilder::new(), |one_of, item| one_of.item(item.build())).build().into()
    }

    /// Seconds (negative: forever), or the same as a string or a Go duration
    /// (`"5m"`, `"1h30m"`, `"-1"`) — `KeepAlive::parse`.
    pub fn keep_alive() -> Schema {
        // Any number: one too long for a duration is forever (`KeepAlive::from_secs`).
        let seconds = ObjectBuilder::new().schema_type(Type::Number);
        let duration = ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+|((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+)\s*$"));
        one_of([seconds, duration, null()])
    }

    pub fn think() -> Schema {
        let level = ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["high", "medium", "low"]));
        one_of([ObjectBuilder::new().schema_type(Type::Boolean), level, null()])
    }

    /// `"json"` or a JSON schema (`AnyObject`: it reaches the prompt).
    pub fn format() -> Schema {
        let json = ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["json"]));
        let schema = utoipa::openapi::Ref::from_schema_name("AnyObject");
        OneOfBuilder::new().item(json.build()).item(schema).item(null().build()).build().into()
    }

    pub fn role() -> Schema {
        let roles = ["system", "user", "assistant", "tool"];
        ObjectBuilder::new().schema_type(Type::String).enum_values(Some(roles)).build().into()
    }
}
