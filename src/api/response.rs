//! Response wire types: non-stream bodies and stream chunks of both endpoints.

use crate::conversation::{CallDelta, CallHead, Delta as ReplyDelta, Reply, ToolCall as ReplyCall};
use crate::metrics::Timings;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Usage {
    /// The prompt's length in tokens: the tokenizer's exact count when a
    /// tokenizer is configured, else the runtime's prefill count (null if it
    /// reported none).
    pub prompt_tokens: Option<i64>,
    /// Generated tokens, counted as the runtime's callback delivered them.
    pub completion_tokens: u32,
    pub total_tokens: Option<i64>,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens reused from the conversation cache (the KV cache of the
    /// previous run), not prefilled again; 0 on a miss or with the cache off.
    pub cached_tokens: u32,
}

impl Usage {
    pub fn new(prompt_tokens: Option<i64>, completion_tokens: u32, cached_tokens: u32) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.map(|p| p + i64::from(completion_tokens)),
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AssistantMessage {
    pub role: &'static str,
    /// The answer; `null` when the reply is only tool calls.
    pub content: Option<String>,
    /// The text of the model's `<think>` block (config `reasoning = "split"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCall {
    /// `call_` and 24 hex digits, unique per call.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as a JSON-encoded string, as the model wrote them.
    pub arguments: String,
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
pub struct ChunkDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// One step of a streamed tool call: the first carries `id`, `type` and
/// `function.name`; every one carries the next part of `function.arguments`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: ChunkDelta,
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

impl AssistantMessage {
    /// The message of a whole reply.
    pub fn from_reply(reply: Reply) -> Self {
        let Reply { content, reasoning, calls } = reply;
        let tool_calls: Vec<ToolCall> = calls
            .into_iter()
            .map(|ReplyCall { id, name, arguments }| ToolCall {
                id,
                kind: "function",
                function: FunctionCall { name, arguments },
            })
            .collect();
        AssistantMessage {
            role: "assistant",
            content: (!content.is_empty() || tool_calls.is_empty()).then_some(content),
            reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
            tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
        }
    }
}

impl ChunkDelta {
    /// The chunk delta of one token's step. `content` is present when it has
    /// text, on the first chunk, and when nothing else is (a token that
    /// released nothing still makes a chunk, with `content: ""`).
    pub fn from_step(step: ReplyDelta, first: bool) -> Self {
        let ReplyDelta { content, reasoning, calls } = step;
        let tool_calls: Vec<ToolCallDelta> = calls
            .into_iter()
            // A malformed call's last step only says so: what was sent stands.
            .filter(|step| step.head.is_some() || !step.arguments.is_empty())
            .map(|CallDelta { index, head, arguments, .. }| {
                let (id, name) = head.map(|CallHead { id, name }| (id, name)).unzip();
                ToolCallDelta {
                    index,
                    kind: id.is_some().then_some("function"),
                    id,
                    function: FunctionDelta { name, arguments },
                }
            })
            .collect();
        let bare = reasoning.is_empty() && tool_calls.is_empty();
        ChunkDelta {
            role: first.then_some("assistant"),
            content: (!content.is_empty() || first || bare).then_some(content),
            reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
            tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
        }
    }
}
