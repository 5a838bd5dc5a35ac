//! A Responses request → the chat request it means, validated by the same
//! code as `/v1/chat/completions` (`api::request`).

use super::tools::{self, custom_arguments, Names, Tools};
use super::wire::{CreateResponse, Input};
use crate::api::error::ApiError;
use crate::api::request::{ChatCompletionRequest, ChatMessage, ChatRole, Common, Content};
use serde_json::{json, Value};

/// The chat request, and the client's tools as it took them (the names
/// the model sees, the tools it does not).
pub fn chat_request(req: &CreateResponse) -> Result<(ChatCompletionRequest, Tools), ApiError> {
    if req.previous_response_id.is_some() {
        return Err(ApiError::invalid_value(
            "previous_response_id",
            "Responses are not stored (the server is stateless): send the whole conversation in `input` instead of `previous_response_id`.",
        ));
    }
    let mut messages = Vec::new();
    if let Some(instructions) = &req.instructions {
        messages.push(message(ChatRole::System, instructions.clone()));
    }
    match &req.input {
        Input::Text(text) => messages.push(message(ChatRole::User, text.clone())),
        Input::Items(items) => {
            for (i, item) in items.iter().enumerate() {
                add_item(&mut messages, i, &Value::Object(item.0.clone()))?;
            }
            if messages.last().is_some_and(is_reasoning_only) {
                messages.pop();
            }
        }
    }
    if messages.is_empty() {
        // Named here: the chat check would name `messages`, which the client did not send.
        return Err(ApiError::invalid_value(
            "input",
            "`input` holds no message: send a message, function_call or function_call_output item (a reasoning item belongs to the assistant turn after it), or `instructions`.",
        ));
    }
    let mut tools = req.tools.as_deref().map(tools::convert).transpose()?.unwrap_or_default();
    let functions = std::mem::take(&mut tools.chat);
    let tool_choice = req.tool_choice.as_ref().map(tools::choice);
    let response_format = req.text.as_ref().and_then(|t| t.get("format")).map(format).transpose()?;
    let chat = ChatCompletionRequest {
        messages,
        max_completion_tokens: None,
        enable_thinking: None,
        reasoning_effort: req.reasoning.as_ref().and_then(|r| r.effort),
        chat_template_kwargs: None,
        // Only built-in tools sent: as if none were (`tool_choice` `auto` then offers nothing).
        tools: (!functions.is_empty()).then_some(functions),
        tool_choice,
        response_format,
        common: Common {
            model: req.model.clone(),
            stream: req.stream,
            max_tokens: req.max_output_tokens,
            prompt_cache_key: req.prompt_cache_key.clone(),
            sampling: req.sampling,
            extra: req.extra.clone(),
            ..Default::default()
        },
    };
    Ok((chat, tools))
}

/// The request's fields that change nothing here, for `x-rkllmd-ignored-params`:
/// the unknown ones (`include`, `parallel_tool_calls`, `metadata`, …; `store`
/// only when true: nothing is stored), `reasoning.summary` (no summaries
/// are written) and `text.verbosity`.
pub fn ignored(req: &CreateResponse) -> Vec<String> {
    let mut ignored: Vec<String> = req
        .extra
        .iter()
        .filter(|(k, v)| !(k.as_str() == "store" && **v != json!(true)))
        .map(|(k, _)| k.clone())
        .collect();
    if req.reasoning.as_ref().is_some_and(|r| r.summary.is_some()) {
        ignored.push("reasoning.summary".into());
    }
    if req.text.as_ref().is_some_and(|t| t.get("verbosity").is_some_and(|v| !v.is_null())) {
        ignored.push("text.verbosity".into());
    }
    ignored
}

fn message(role: ChatRole, text: String) -> ChatMessage {
    ChatMessage {
        role,
        content: Some(Content::Text(text)),
        tool_calls: None,
        tool_call_id: None,
        name: None,
        reasoning_content: None,
    }
}

fn bad(param: String, message: &str) -> ApiError {
    ApiError::invalid_value(&param, message.to_owned())
}

fn text_field(item: &Value, field: &str, param: &str) -> Result<String, ApiError> {
    match item.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(bad(format!("{param}.{field}"), &format!("`{field}` must be a string."))),
    }
}

/// One input item onto the chat messages: a call joins the assistant turn
/// before it (or starts one), reasoning waits for the assistant turn after it.
fn add_item(messages: &mut Vec<ChatMessage>, i: usize, item: &Value) -> Result<(), ApiError> {
    let param = format!("input[{i}]");
    if !item.is_object() {
        return Err(bad(param, "An input item must be an object."));
    }
    match item.get("type").and_then(Value::as_str).unwrap_or("message") {
        "message" => {
            let role = match item.get("role").and_then(Value::as_str) {
                Some("user") => ChatRole::User,
                Some("assistant") => ChatRole::Assistant,
                Some("system") => ChatRole::System,
                Some("developer") => ChatRole::Developer,
                _ => return Err(bad(format!("{param}.role"), "`role` must be user, assistant, system or developer.")),
            };
            let text = content(item.get("content"), &param)?;
            // Reasoning sent just before belongs to this assistant turn.
            let pending = match messages.last_mut() {
                Some(m) if role == ChatRole::Assistant && is_reasoning_only(m) => messages.pop(),
                _ => None,
            };
            let mut m = message(role, text);
            m.reasoning_content = pending.and_then(|p| p.reasoning_content);
            messages.push(m);
        }
        kind @ ("function_call" | "custom_tool_call") => {
            let namespace = match item.get("namespace") {
                None | Some(Value::Null) => None,
                Some(Value::String(ns)) => Some(ns.as_str()),
                Some(_) => return Err(bad(format!("{param}.namespace"), "`namespace` must be a string.")),
            };
            let name = Names::flat(namespace, &text_field(item, "name", &param)?);
            let arguments = match kind {
                "function_call" => text_field(item, "arguments", &param)?,
                _ => custom_arguments(&text_field(item, "input", &param)?),
            };
            let call = json!({"id": text_field(item, "call_id", &param)?, "type": "function",
                "function": {"name": name, "arguments": arguments}});
            match messages.last_mut() {
                Some(m) if m.role == ChatRole::Assistant => m.tool_calls.get_or_insert_with(Vec::new).push(call),
                _ => messages.push(ChatMessage {
                    content: None,
                    tool_calls: Some(vec![call]),
                    ..message(ChatRole::Assistant, String::new())
                }),
            }
        }
        "function_call_output" | "custom_tool_call_output" => {
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(parts @ Value::Array(_)) => content(Some(parts), &param)?,
                _ => return Err(bad(format!("{param}.output"), "`output` must be a string or text parts.")),
            };
            let mut m = message(ChatRole::Tool, output);
            m.tool_call_id = Some(text_field(item, "call_id", &param)?);
            messages.push(m);
        }
        "reasoning" => {
            let parts = ["content", "summary"].iter().filter_map(|k| item.get(*k)?.as_array()).flatten();
            let text: String = parts.filter_map(|p| p.get("text")?.as_str()).collect::<Vec<_>>().join("\n");
            // Held as an assistant turn with reasoning only, until the turn it belongs to comes.
            messages.push(ChatMessage {
                content: None,
                reasoning_content: Some(text),
                ..message(ChatRole::Assistant, String::new())
            });
        }
        other => {
            return Err(bad(
                format!("{param}.type"),
                &format!("Input items of type `{other}` are not supported: message, function_call, function_call_output, custom_tool_call, custom_tool_call_output and reasoning are."),
            ))
        }
    }
    // A reasoning item followed by something other than its turn has no turn: drop it.
    let n = messages.len();
    if n >= 2 && is_reasoning_only(&messages[n - 2]) {
        messages.remove(n - 2);
    }
    Ok(())
}

fn is_reasoning_only(m: &ChatMessage) -> bool {
    m.role == ChatRole::Assistant && m.content.is_none() && m.tool_calls.is_none() && m.reasoning_content.is_some()
}

/// A message's content: a string, or `input_text`/`output_text` parts.
fn content(value: Option<&Value>, param: &str) -> Result<String, ApiError> {
    match value {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
                match (kind, part.get("text").and_then(Value::as_str)) {
                    ("input_text" | "output_text" | "text", Some(t)) => text.push_str(t),
                    _ => {
                        return Err(bad(
                            format!("{param}.content[{j}]"),
                            &format!("Content parts of type `{kind}` are not supported; input_text and output_text parts with `text` are (no vision support)."),
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(bad(format!("{param}.content"), "`content` must be a string or an array of text parts.")),
    }
}

/// `text.format` → chat's `response_format`.
fn format(format: &Value) -> Result<Value, ApiError> {
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let name = format.get("name").cloned().unwrap_or(json!("response"));
            Ok(json!({"type": "json_schema", "json_schema": {"name": name, "schema": format.get("schema")}}))
        }
        Some(kind @ ("text" | "json_object")) => Ok(json!({"type": kind})),
        _ => Err(bad("text.format.type".into(), "`text.format.type` must be text, json_object or json_schema.")),
    }
}
