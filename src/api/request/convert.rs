//! Wire messages → the conversation layer's input: pure functions of the
//! request, each error naming the offending field.

use super::images::{ImageRef, MARKER};
use super::wire::{ChatCompletionRequest, ChatMessage, ChatRole, Content};
use crate::api::error::ApiError;
use crate::conversation::{self, ChatInput, Message, ToolChoice};
use serde_json::Value;

/// The chat request's messages, tools and template variables as the
/// conversation layer takes them.
/// Image parts become a marker in their message's text, in place, and an
/// [`ImageRef`] each, in prompt order.
pub fn chat_input(req: &ChatCompletionRequest) -> Result<(ChatInput, Vec<ImageRef>), ApiError> {
    if req.messages.is_empty() {
        return Err(ApiError::invalid_value("messages", "`messages` must contain at least one message."));
    }
    let mut images = Vec::new();
    let messages =
        req.messages.iter().enumerate().map(|(i, m)| to_message(i, m, &mut images)).collect::<Result<Vec<_>, _>>()?;
    let tools = req.tools.clone().unwrap_or_default();
    validate_tools(&tools)?;
    let tool_choice = tool_choice(req.tool_choice.as_ref(), &tools)?;
    let mut variables = req.chat_template_kwargs.clone().unwrap_or_default();
    // Any non-empty string is true to a template: "false" would turn thinking on.
    if variables.get("enable_thinking").is_some_and(|v| !v.is_boolean()) {
        return Err(ApiError::invalid_value(
            "chat_template_kwargs.enable_thinking",
            "`chat_template_kwargs.enable_thinking` must be a boolean (true or false).",
        ));
    }
    if let Some(on) = req.enable_thinking {
        variables.insert("enable_thinking".into(), Value::Bool(on));
    }
    if let Some(effort) = req.reasoning_effort {
        variables.entry("enable_thinking").or_insert(Value::Bool(effort.thinking()));
    }
    Ok((ChatInput { messages, tools, tool_choice, variables }, images))
}

fn to_message(i: usize, m: &ChatMessage, images: &mut Vec<ImageRef>) -> Result<Message, ApiError> {
    use conversation::Role;
    let role = match m.role {
        ChatRole::System | ChatRole::Developer => Role::System,
        ChatRole::User => Role::User,
        ChatRole::Assistant => Role::Assistant,
        ChatRole::Tool => Role::Tool,
    };
    if m.role == ChatRole::Tool && m.tool_call_id.is_none() {
        return Err(ApiError::invalid_value(
            &format!("messages[{i}].tool_call_id"),
            "A `tool` message needs `tool_call_id`.",
        ));
    }
    let tool_calls = match &m.tool_calls {
        None => Vec::new(),
        Some(_) if m.role != ChatRole::Assistant => {
            return Err(ApiError::invalid_value(
                &format!("messages[{i}].tool_calls"),
                "Only `assistant` messages carry `tool_calls`.",
            ));
        }
        Some(calls) => calls.iter().enumerate().map(|(j, c)| to_tool_call(i, j, c)).collect::<Result<_, _>>()?,
    };
    let content = match &m.content {
        None if !tool_calls.is_empty() => None,
        None => {
            return Err(ApiError::invalid_value(
                &format!("messages[{i}].content"),
                "`content` is required for this role.",
            ))
        }
        Some(Content::Text(t)) => Some(t.clone()),
        Some(Content::Parts(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let param = format!("messages[{i}].content[{j}]");
                match (part.kind.as_str(), &part.text, &part.image_url) {
                    ("text", Some(t), _) => text.push_str(t),
                    ("text", None, _) => return Err(ApiError::invalid_value(&param, "A text part needs `text`.")),
                    ("image_url", _, _) if m.role != ChatRole::User => {
                        return Err(ApiError::invalid_value(&param, "Only `user` messages carry images."));
                    }
                    ("image_url", _, Some(image)) => {
                        text.push_str(MARKER);
                        images.push(ImageRef { param: format!("{param}.image_url"), url: image.url().to_owned() });
                    }
                    ("image_url", _, None) => {
                        return Err(ApiError::invalid_value(&param, "An image part needs `image_url`."));
                    }
                    (kind, _, _) => {
                        return Err(ApiError::invalid_value(&param, format!("Content parts of type `{kind}` are not supported; only `text` and `image_url` parts are.")));
                    }
                }
            }
            Some(text)
        }
    };
    Ok(Message {
        role,
        content,
        name: m.name.clone(),
        tool_calls,
        tool_call_id: m.tool_call_id.clone(),
        reasoning_content: m.reasoning_content.clone().filter(|_| m.role == ChatRole::Assistant),
    })
}

/// `{"id", "type": "function", "function": {"name", "arguments"}}`; the
/// arguments are JSON text (an object is accepted and written as text).
/// Text that is not valid JSON is passed on as written, as OpenAI does: it
/// is what the model produced, and clients send it back unchanged.
fn to_tool_call(i: usize, j: usize, call: &Value) -> Result<conversation::ToolCall, ApiError> {
    let param = |s: &str| format!("messages[{i}].tool_calls[{j}]{s}");
    let bad = |s: &str, m: &str| Err(ApiError::invalid_value(&param(s), m.to_owned()));
    let Some(id) = call.get("id").and_then(Value::as_str) else {
        return bad(".id", "A tool call needs a string `id`.");
    };
    if call.get("type").is_some_and(|t| t != "function") {
        return bad(".type", "Only tool calls of type `function` are supported.");
    }
    let Some(name) = call.pointer("/function/name").and_then(Value::as_str) else {
        return bad(".function.name", "A tool call needs `function.name`.");
    };
    let arguments = match call.pointer("/function/arguments") {
        Some(Value::String(text)) => text.clone(),
        Some(object @ Value::Object(_)) => object.to_string(),
        _ => return bad(".function.arguments", "A tool call needs `function.arguments` (a JSON string)."),
    };
    Ok(conversation::ToolCall { id: id.to_owned(), name: name.to_owned(), arguments })
}

/// Each tool: `{"type": "function", "function": {"name", "description"?, "parameters"?}}`
/// with a unique name of 1–64 letters, digits, `_` or `-` (OpenAI's rule).
pub(super) fn validate_tools(tools: &[Value]) -> Result<(), ApiError> {
    let mut seen = std::collections::HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let bad = |s: &str, m: &str| Err(ApiError::invalid_value(&format!("tools[{i}]{s}"), m.to_owned()));
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return bad(".type", "Only tools of type `function` are supported.");
        }
        let Some(function) = tool.get("function").and_then(Value::as_object) else {
            return bad(".function", "A function tool needs a `function` object.");
        };
        let name = function.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty()
            || name.len() > 64
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return bad(".function.name", "`function.name` must be 1 to 64 letters, digits, underscores or dashes.");
        }
        if !seen.insert(name) {
            return bad(".function.name", &format!("The function `{name}` is defined twice."));
        }
        if function.get("description").is_some_and(|d| !d.is_string()) {
            return bad(".function.description", "`function.description` must be a string.");
        }
        if function.get("parameters").is_some_and(|p| !p.is_object()) {
            return bad(".function.parameters", "`function.parameters` must be a JSON Schema object.");
        }
    }
    Ok(())
}

/// OpenAI's defaults: `none` without tools, `auto` with them.
fn tool_choice(choice: Option<&Value>, tools: &[Value]) -> Result<ToolChoice, ApiError> {
    let bad = |m: String| Err(ApiError::invalid_value("tool_choice", m));
    let needs_tools = |c: ToolChoice| {
        if tools.is_empty() {
            bad("`tool_choice` requires `tools`.".into())
        } else {
            Ok(c)
        }
    };
    match choice {
        None if tools.is_empty() => Ok(ToolChoice::None),
        None => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(if tools.is_empty() { ToolChoice::None } else { ToolChoice::Auto }),
            "required" => needs_tools(ToolChoice::Required),
            other => bad(format!("`tool_choice` must be `none`, `auto`, `required` or a function, not `{other}`.")),
        },
        Some(v) => {
            let name = match (v.get("type").and_then(Value::as_str), v.pointer("/function/name").and_then(Value::as_str)) {
                (Some("function"), Some(name)) => name,
                _ => return bad("`tool_choice` must be `none`, `auto`, `required` or `{\"type\": \"function\", \"function\": {\"name\": …}}`.".into()),
            };
            if !tools.iter().any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name)) {
                return bad(format!("`tool_choice` names the function `{name}`, which is not in `tools`."));
            }
            Ok(ToolChoice::Function(name.to_owned()))
        }
    }
}
