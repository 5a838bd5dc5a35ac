//! Anthropic's Messages API bodies, as far as the daemon serves them.

use crate::api::request::SamplingFields;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    /// Not Anthropic's, but what Claude Code sends inside `messages` to a
    /// model it does not know as Claude's: text for the system prompt
    /// (`messages/system.rs` says where it goes).
    System,
}

/// A content block (`text`, `tool_use`, `tool_result`, `thinking`, …): an object.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(value_type = Object)]
pub struct Block(pub Map<String, Value>);

/// Text, or content blocks.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
#[schema(as = MessagesContent)]
pub enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct InMessage {
    pub role: Role,
    pub content: Content,
}

/// A tool the model may call: `{"name", "description"?, "input_schema"}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    #[schema(value_type = crate::api::request::AnyObject)]
    pub input_schema: Map<String, Value>,
    /// Server tools (`web_search_…`) have one; only custom tools are served.
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// What `/v1/messages` and `/v1/messages/count_tokens` share.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct Conversation {
    pub model: String,
    pub messages: Vec<InMessage>,
    /// The system prompt: text or text blocks.
    pub system: Option<Content>,
    /// Each name once (a rule JSON Schema cannot state).
    pub tools: Option<Vec<Tool>>,
    /// `{"type": "auto" | "any" | "none"}` or `{"type": "tool", "name"}` naming a tool of
    /// `tools` (a rule JSON Schema cannot state).
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Map<String, Value>>,
    /// `{"type": "enabled", "budget_tokens"}`, `{"type": "disabled"}` or
    /// `{"type": "adaptive"}` (as `output_config.effort` says): the thinking switch.
    #[schema(value_type = Option<Object>)]
    pub thinking: Option<Map<String, Value>>,
    /// `{"effort": "low" | "medium" | "high" | "max"}`: with `thinking`
    /// adaptive or absent, `low` turns thinking off and the others on.
    #[schema(value_type = Option<Object>)]
    pub output_config: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CreateMessage {
    #[serde(flatten)]
    pub conversation: Conversation,
    pub max_tokens: u32,
    #[serde(default)]
    pub stream: Option<bool>,
    pub stop_sequences: Option<Vec<String>>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CountTokens {
    #[serde(flatten)]
    pub conversation: Conversation,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenCount {
    pub input_tokens: usize,
}

/// Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorResponse {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}

impl crate::api::named::NamesModel for CreateMessage {
    fn model(&self) -> &str {
        &self.conversation.model
    }
}
