//! Messages → prompt, and the text-level rules applied to generated output.
//!
//! The seam is [`Prompter`]: loaded once at startup (chat template, found,
//! configured or detected from the model file, and optional tokenizer), it
//! turns an OpenAI message list into the text given to the runtime and
//! counts its tokens; [`Prompter::describe`] says which template and why.

mod builtin;
mod detect;
mod fold;
mod output;
mod prompter;
mod pyjson;
pub mod resend;
mod source;
mod stop;
mod template;
mod think;
mod tool_calls;
mod tool_json;

pub use builtin::TemplateFamily;
pub use output::{CallDelta, CallHead, Delta, Reply, ReplyParser};
pub use prompter::{PromptError, Prompter, TemplateInfo, TemplateMode};
pub use source::{LoadError, PromptSettings};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
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

impl ReasoningMode {
    pub const ALL: [ReasoningMode; 3] = [ReasoningMode::Split, ReasoningMode::Inline, ReasoningMode::Hide];

    /// The name in the config (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            ReasoningMode::Split => "split",
            ReasoningMode::Inline => "inline",
            ReasoningMode::Hide => "hide",
        }
    }
}

impl std::str::FromStr for ReasoningMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        by_name(&Self::ALL, Self::name, "reasoning mode", s)
    }
}

/// The one of `all` whose name is `s`, for the `FromStr` of a named choice.
fn by_name<T: Copy>(all: &[T], name: fn(T) -> &'static str, what: &str, s: &str) -> Result<T, String> {
    all.iter().copied().find(|&v| name(v) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&v| name(v)).collect();
        format!("unknown {what} `{s}`; expected one of {}", names.join(", "))
    })
}

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSyntax {
    /// Hermes/Qwen: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.
    Hermes,
    /// Llama 3.x: a bare JSON object `{"name": …, "parameters": {…}}`.
    Llama3Json,
}

/// A message as the conversation layer sees it (content flattened to text;
/// `developer` already mapped to `system`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message {
    pub role: Role,
    /// `None` only for an assistant turn that carries tool calls.
    pub content: Option<String>,
    pub name: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    /// An assistant turn's reasoning, when the client sends it back.
    pub reasoning_content: Option<String>,
}

/// A function call made by the assistant: in an earlier turn (input) or in
/// this reply (output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text, as the client sent them or the model wrote them.
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    System,
    #[default]
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

/// `tool_choice`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// Tools are not shown to the model.
    None,
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must call this function.
    Function(String),
}

/// One chat request's input to the template.
#[derive(Debug, Clone, Default)]
pub struct ChatInput {
    pub messages: Vec<Message>,
    /// The `tools` array as the client sent it (validated).
    pub tools: Vec<serde_json::Value>,
    pub tool_choice: ToolChoice,
    /// Extra template variables: `chat_template_kwargs`, `enable_thinking`.
    pub variables: serde_json::Map<String, serde_json::Value>,
}

/// A rendered chat prompt and what it implies for reading the reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub prompt: String,
    /// The generation prompt left a `<think>` block open.
    pub starts_in_thinking: bool,
    /// `None` when no tools were offered.
    pub tool_syntax: Option<ToolSyntax>,
}
