//! The runtime-folded form: with no template of its own, the daemon leaves
//! the runtime's template on, and that template wraps exactly one user
//! message. A whole conversation is therefore folded into that one message
//! as a labelled transcript (docs/api.md, "Models without a chat template").
//! The form is plain text on purpose: the model sees every part of the
//! conversation, and a reader of the prompt sees how it was put together.

use super::Rendered;
use super::{Message, Role, ToolSyntax};
use serde_json::Value as Json;

/// What a model is told when tools are offered: the only call syntax the
/// reply is parsed for. A model that writes calls another way has its text
/// returned as content, visibly, rather than dropped.
const TOOL_INSTRUCTION: &str =
    "To call a tool, answer with only <tool_call>{\"name\": \"NAME\", \"arguments\": {…}}</tool_call>, one per call.";

/// One user message, alone and without tools, is sent as it is: the
/// runtime's template then renders exactly what the model was trained on.
pub(super) fn fold(messages: &[Message], tools: Option<&[Json]>) -> Rendered {
    let tool_syntax = tools.map(|_| ToolSyntax::Hermes);
    if let ([Message { role: Role::User, content: Some(text), name: None, .. }], None) = (messages, tools) {
        return Rendered { prompt: text.clone(), starts_in_thinking: false, tool_syntax };
    }
    let mut blocks: Vec<String> = Vec::new();
    // System text leads, wherever the client put it, as a template would.
    for m in messages.iter().filter(|m| m.role == Role::System) {
        blocks.push(format!("{}: {}", label(m), m.content.as_deref().unwrap_or_default()));
    }
    if let Some(tools) = tools {
        let list = serde_json::to_string(tools).unwrap_or_default();
        blocks.push(format!("Tools: {list}\n{TOOL_INSTRUCTION}"));
    }
    for m in messages.iter().filter(|m| m.role != Role::System) {
        if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty() || m.tool_calls.is_empty()) {
            blocks.push(format!("{}: {text}", label(m)));
        }
        for call in &m.tool_calls {
            blocks.push(format!("{} called {}({}) [{}]", label(m), call.name, call.arguments, call.id));
        }
    }
    Rendered { prompt: blocks.join("\n\n"), starts_in_thinking: false, tool_syntax }
}

/// `User`, `Assistant`, `System`, `Tool result [call id]`, with a
/// participant's `name` in parentheses.
fn label(m: &Message) -> String {
    let mut label = match m.role {
        Role::System => "System".to_owned(),
        Role::User => "User".to_owned(),
        Role::Assistant => "Assistant".to_owned(),
        Role::Tool => match &m.tool_call_id {
            Some(id) => format!("Tool result [{id}]"),
            None => "Tool result".to_owned(),
        },
    };
    if let Some(name) = &m.name {
        label.push_str(&format!(" ({name})"));
    }
    label
}

#[cfg(test)]
mod tests {
    use super::super::ToolCall;
    use super::*;
    use serde_json::json;

    fn msg(role: Role, text: &str) -> Message {
        Message { role, content: Some(text.into()), ..Default::default() }
    }

    #[test]
    fn a_single_user_message_is_sent_unchanged() {
        assert_eq!(fold(&[msg(Role::User, "Hello")], None).prompt, "Hello");
    }

    #[test]
    fn a_conversation_becomes_a_labelled_transcript() {
        let call = ToolCall { id: "c1".into(), name: "weather".into(), arguments: r#"{"city":"Oslo"}"#.into() };
        let messages = vec![
            msg(Role::User, "Hi"),
            msg(Role::System, "Be brief."),
            msg(Role::Assistant, "Hello!"),
            Message { role: Role::Assistant, content: None, tool_calls: vec![call], ..Default::default() },
            Message {
                role: Role::Tool,
                content: Some("-3 C".into()),
                tool_call_id: Some("c1".into()),
                ..Default::default()
            },
            Message { name: Some("ann".into()), ..msg(Role::User, "Coat?") },
        ];
        let tools = vec![json!({"type": "function", "function": {"name": "weather"}})];
        let r = fold(&messages, Some(&tools));
        let expected = [
            "System: Be brief.",
            &format!(r#"Tools: [{{"type":"function","function":{{"name":"weather"}}}}]{}{TOOL_INSTRUCTION}"#, "\n"),
            "User: Hi",
            "Assistant: Hello!",
            r#"Assistant called weather({"city":"Oslo"}) [c1]"#,
            "Tool result [c1]: -3 C",
            "User (ann): Coat?",
        ]
        .join("\n\n");
        assert_eq!(r.prompt, expected);
        assert_eq!(r.tool_syntax, Some(ToolSyntax::Hermes));
    }
}
