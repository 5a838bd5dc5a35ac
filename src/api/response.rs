//! Response wire types: non-stream bodies and stream chunks of both endpoints.

use crate::metrics::Timings;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Usage {
    /// Prompt tokens the runtime prefilled (null if the runtime reported none).
    pub prompt_tokens: Option<i64>,
    /// Generated tokens, counted as the runtime's callback delivered them.
    pub completion_tokens: u32,
    pub total_tokens: Option<i64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub finish_reason: Option<&'static str>,
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<()>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
    pub timings: Timings,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TextChoice {
    pub index: u32,
    pub text: String,
    pub finish_reason: Option<&'static str>,
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<()>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TextCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<TextChoice>,
    pub usage: Usage,
    pub timings: Timings,
}

/// `delta` of a chat chunk. The role rides on the first token's chunk.
#[derive(Debug, Clone, Serialize, ToSchema, Default)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<&'static str>,
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<()>,
}

/// One chunk of either endpoint's stream; `choices` holds `ChunkChoice`s
/// (chat) or `TextChoice`s (legacy), serialised as-is. It borrows what every
/// chunk repeats, so the per-token path copies no strings.
#[derive(Debug, Clone, Serialize)]
pub struct Chunk<'a, C> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub system_fingerprint: &'a str,
    pub choices: Vec<C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}
