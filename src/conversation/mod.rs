//! Messages → prompt, and the text-level rules applied to generated output.
//!
//! The seam is [`render_chat`]: everything that turns an OpenAI message list
//! into the text given to the runtime goes through it.

mod chatml;
mod output;
mod stop;
mod think;
mod tool_calls;
mod tool_json;

pub use output::{Call, CallDelta, CallHead, Delta, Reply, ReplyParser};
pub use stop::StopMatcher;

/// How the reply text is read back: the output-side counterpart of the
/// prompt rendering. Decided per request (template family, tools, thinking,
/// config) and applied by the API layer to the generated text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyRules {
    pub reasoning: ReasoningMode,
    /// The rendered prompt already opened a `<think>` block (templates that
    /// force thinking end the generation prompt with `<think>\n`), so the
    /// reply starts inside it.
    pub starts_in_thinking: bool,
    /// Tool calls are parsed out of the reply in this syntax; `None` when the
    /// request has no tools or `tool_choice` is `none`.
    pub tool_syntax: Option<ToolSyntax>,
}

/// What happens to text inside `<think>…</think>` (config `reasoning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningMode {
    /// Returned as `reasoning_content`, not in `content`.
    #[default]
    Split,
    /// Left in `content` as the model wrote it.
    Inline,
    /// Dropped.
    Hide,
}

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSyntax {
    /// Hermes/Qwen: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.
    Hermes,
    /// Llama 3.x: a bare JSON object `{"name": …, "parameters": {…}}`.
    Llama3Json,
}

/// A message as the conversation layer sees it (content already flattened to text).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// Renders a whole transcript into one prompt, ending with the opening of
/// the assistant's turn. The runtime gets it as one "user" input with
/// `keep_history = 0`; its own template is disabled.
pub fn render_chat(messages: &[Message]) -> String {
    chatml::render(messages)
}
