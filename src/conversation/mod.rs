//! Messages → prompt, and the text-level rules applied to generated output.
//!
//! The seam is [`render_chat`]: everything that turns an OpenAI message list
//! into the text given to the runtime goes through it.

mod chatml;
mod stop;

pub use stop::StopMatcher;

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
