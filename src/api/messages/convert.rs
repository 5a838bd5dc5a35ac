//! A Messages request → the chat request it means, validated by the same
//! code as `/v1/chat/completions` (`api::request`).

use super::wire::{Block, Content, Conversation, CreateMessage, Role};
use crate::api::error::ApiError;
use crate::api::request::{self as chat, ChatCompletionRequest, ChatMessage, ChatRole, Common, StopSequences};
use serde_json::{json, Value};

/// `max_tokens` is left to the handler, which knows the model's limit (`ceiling.rs`).
pub fn chat_request(req: &CreateMessage) -> Result<ChatCompletionRequest, ApiError> {
    let mut chat = conversation(&req.conversation)?;
    chat.common.stream = req.stream;
    chat.common.stop = req.stop_sequences.clone().map(StopSequences::Many);
    chat.common.sampling = req.sampling;
    Ok(chat)
}

/// The conversation alone (what `count_tokens` counts).
pub fn conversation(c: &Conversation) -> Result<ChatCompletionRequest, ApiError> {
    let mut messages = Vec::new();
    if let Some(system) = system_text(c.system.as_ref(), "system")? {
        messages.push(message(ChatRole::System, system));
    }
    for (i, m) in c.messages.iter().enumerate() {
        add_message(&mut messages, i, m.role, &m.content)?;
    }
    let tools = c
        .tools
        .as_ref()
        .map(|tools| {
            tools
                .iter()
                .enumerate()
                .map(|(i, t)| match t.kind.as_deref() {
                    None | Some("custom") => {
                        let mut function = json!({"name": t.name, "parameters": t.input_schema});
                        // A null description is no description (chat's tools take only text).
                        if let Some(description) = &t.description {
                            function["description"] = json!(description);
                        }
                        Ok(json!({"type": "function", "function": function}))
                    }
                    Some(other) => Err(ApiError::invalid_value(
                        &format!("tools[{i}].type"),
                        format!(
                            "Server tools (`{other}`) are not supported: only custom tools (name, input_schema) are."
                        ),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let tool_choice = c.tool_choice.as_ref().map(tool_choice).transpose()?;
    let enable_thinking = thinking_switch(c)?;
    Ok(ChatCompletionRequest {
        messages,
        max_completion_tokens: None,
        enable_thinking,
        reasoning_effort: None,
        chat_template_kwargs: None,
        tools,
        tool_choice,
        response_format: None,
        common: Common { model: c.model.clone(), ..Default::default() },
    })
}

/// `output_config.effort`'s values, Anthropic's.
const EFFORTS: [&str; 4] = ["low", "medium", "high", "max"];

/// The runtime's one thinking switch, from `thinking` and `output_config.effort`:
/// `enabled` and `disabled` say it; `adaptive` (the model decides, Anthropic's
/// default effort `high`) and an effort alone turn it off only at `low`, the
/// effort that asks for the fewest tokens — a board has no finer control.
/// Neither given: the template's default, as on chat.
fn thinking_switch(c: &Conversation) -> Result<Option<bool>, ApiError> {
    let effort = match c.output_config.as_ref().and_then(|o| o.get("effort")) {
        None | Some(Value::Null) => None,
        Some(Value::String(e)) if EFFORTS.contains(&e.as_str()) => Some(e.as_str()),
        Some(_) => {
            return Err(ApiError::invalid_value(
                "output_config.effort",
                "`output_config.effort` must be low, medium, high or max.",
            ))
        }
    };
    let by_effort = effort.map(|e| e != "low");
    match c.thinking.as_ref().map(|t| t.get("type").and_then(Value::as_str)) {
        None => Ok(by_effort),
        Some(Some("enabled")) => Ok(Some(true)),
        Some(Some("disabled")) => Ok(Some(false)),
        Some(Some("adaptive")) => Ok(Some(by_effort.unwrap_or(true))),
        Some(_) => {
            Err(ApiError::invalid_value("thinking.type", "`thinking.type` must be enabled, disabled or adaptive."))
        }
    }
}

/// A system block that is client metadata (`request::is_client_metadata`).
/// Left out of the prompt, it is out of every cache key too: the caches
/// match the rendered prompt's tokens.
fn client_metadata(block: &Block) -> bool {
    let text = block.0.get("text").and_then(Value::as_str).unwrap_or_default();
    block.0.get("type").and_then(Value::as_str) == Some("text") && chat::is_client_metadata(text)
}

/// A system prompt's text, its client metadata left out; `None` when it
/// holds nothing else (no system message is made of it).
fn system_text(content: Option<&Content>, param: &str) -> Result<Option<String>, ApiError> {
    match content {
        None => Ok(None),
        Some(Content::Text(t)) => Ok(Some(t.clone())),
        Some(Content::Blocks(blocks)) => {
            let (mut out, mut instruction) = (String::new(), blocks.is_empty());
            for (j, b) in blocks.iter().enumerate().filter(|(_, b)| !client_metadata(b)) {
                out.push_str(block_text(b, &format!("{param}[{j}]"))?);
                instruction = true;
            }
            Ok(instruction.then_some(out))
        }
    }
}

fn message(role: ChatRole, text: String) -> ChatMessage {
    ChatMessage {
        role,
        content: Some(chat::Content::Text(text)),
        tool_calls: None,
        tool_call_id: None,
        name: None,
        reasoning_content: None,
    }
}

fn field<'a>(block: &'a Block, key: &str, param: &str) -> Result<&'a str, ApiError> {
    block
        .0
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid_value(&format!("{param}.{key}"), format!("`{key}` must be a string.")))
}

/// Text blocks' text joined (a string as it is).
fn text(content: &Content, param: &str) -> Result<String, ApiError> {
    match content {
        Content::Text(t) => Ok(t.clone()),
        Content::Blocks(blocks) => {
            let mut out = String::new();
            for (j, b) in blocks.iter().enumerate() {
                out.push_str(block_text(b, &format!("{param}[{j}]"))?);
            }
            Ok(out)
        }
    }
}

/// A text block's text (other blocks are refused).
fn block_text<'a>(b: &'a Block, param: &str) -> Result<&'a str, ApiError> {
    match b.0.get("type").and_then(Value::as_str) {
        Some("text") => field(b, "text", param),
        other => Err(ApiError::invalid_value(
            &format!("{param}.type"),
            format!("Blocks of type `{}` are not supported here; text blocks are.", other.unwrap_or("")),
        )),
    }
}

/// One message's blocks onto chat messages: a user turn's `tool_result`s
/// become tool messages (before its text), an assistant turn's `tool_use`s
/// its tool calls and its `thinking` its reasoning; a system message's text
/// a system message (placed by `system.rs`).
fn add_message(out: &mut Vec<ChatMessage>, i: usize, role: Role, content: &Content) -> Result<(), ApiError> {
    let param = format!("messages[{i}].content");
    if role == Role::System {
        out.extend(system_text(Some(content), &param)?.map(|t| message(ChatRole::System, t)));
        return Ok(());
    }
    let blocks = match content {
        Content::Text(t) => {
            let role = if role == Role::User { ChatRole::User } else { ChatRole::Assistant };
            out.push(message(role, t.clone()));
            return Ok(());
        }
        Content::Blocks(blocks) => blocks,
    };
    let (mut texts, mut calls, mut thinking) = (String::new(), Vec::new(), None::<String>);
    for (j, b) in blocks.iter().enumerate() {
        let param = format!("{param}[{j}]");
        match (role, b.0.get("type").and_then(Value::as_str)) {
            (_, Some("text")) => texts.push_str(field(b, "text", &param)?),
            (Role::User, Some("tool_result")) => {
                let result = match b.0.get("content") {
                    None => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => text(
                        &serde_json::from_value(v.clone()).map_err(|_| {
                            ApiError::invalid_value(&format!("{param}.content"), "`content` must be text or text blocks.")
                        })?,
                        &format!("{param}.content"),
                    )?,
                };
                let mut m = message(ChatRole::Tool, result);
                m.tool_call_id = Some(field(b, "tool_use_id", &param)?.to_owned());
                out.push(m);
            }
            (Role::Assistant, Some("tool_use")) => {
                let input = b.0.get("input").cloned().unwrap_or(json!({}));
                calls.push(json!({"id": field(b, "id", &param)?, "type": "function",
                    "function": {"name": field(b, "name", &param)?, "arguments": input.to_string()}}));
            }
            (Role::Assistant, Some("thinking")) => {
                thinking.get_or_insert_with(String::new).push_str(field(b, "thinking", &param)?)
            }
            (Role::Assistant, Some("redacted_thinking")) => {}
            (_, other) => {
                return Err(ApiError::invalid_value(
                    &format!("{param}.type"),
                    format!(
                        "Blocks of type `{}` are not supported in a {} message (no images or documents: no vision support).",
                        other.unwrap_or(""),
                        if role == Role::User { "user" } else { "assistant" }
                    ),
                ))
            }
        }
    }
    if role == Role::Assistant {
        out.push(ChatMessage {
            content: (!texts.is_empty() || calls.is_empty()).then_some(chat::Content::Text(texts)),
            tool_calls: (!calls.is_empty()).then_some(calls),
            reasoning_content: thinking,
            ..message(ChatRole::Assistant, String::new())
        });
    } else if !texts.is_empty() || out.last().is_none_or(|m| m.role != ChatRole::Tool) {
        out.push(message(ChatRole::User, texts));
    }
    Ok(())
}

fn tool_choice(choice: &serde_json::Map<String, Value>) -> Result<Value, ApiError> {
    match choice.get("type").and_then(Value::as_str) {
        Some("auto") => Ok(json!("auto")),
        Some("any") => Ok(json!("required")),
        Some("none") => Ok(json!("none")),
        Some("tool") => match choice.get("name").and_then(Value::as_str) {
            Some(name) => Ok(json!({"type": "function", "function": {"name": name}})),
            None => Err(ApiError::invalid_value("tool_choice.name", "`tool_choice` of type tool needs `name`.")),
        },
        _ => Err(ApiError::invalid_value("tool_choice.type", "`tool_choice.type` must be auto, any, tool or none.")),
    }
}
