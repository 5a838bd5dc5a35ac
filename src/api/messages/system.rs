//! System messages inside `messages`. Anthropic's API has none there, but
//! Claude Code sends them to a model it does not know as Claude's. Chat
//! templates differ: ChatML, Qwen 3, Llama 3 and Phi-3 render a system
//! message where it stands; Gemma folds only a leading one into the first
//! user turn (and refuses turns that do not alternate), DeepSeek-R1 keeps
//! only the last one. So a system message after the first turn stays in
//! place where the model's template renders it there — the prompt before
//! it is unchanged, and the conversation cache still holds that prefix —
//! and elsewhere its text joins the leading system prompt.

use super::wire::{self, Conversation};
use crate::api::error::ApiError;
use crate::api::request::{ChatCompletionRequest, ChatMessage, ChatRole, Content};
use crate::conversation::{ChatInput, Message, Prompter, Role};
use crate::registry::Loaded;

/// Places the request's system messages for this model's template.
pub fn place(chat: &mut ChatCompletionRequest, prompter: &Prompter) {
    let after_first = chat.messages.iter().skip(1).any(|m| m.role == ChatRole::System);
    if after_first && !renders_in_place(prompter) {
        fold(&mut chat.messages);
    }
}

/// Whether the template renders a system message where it stands, after a
/// user turn and after an assistant turn, keeping the leading one: a probe
/// conversation rendered, each text found in order. (Gemma's alternation
/// check passes a system message at an odd position and refuses one at an
/// even one: both are probed.)
fn renders_in_place(prompter: &Prompter) -> bool {
    use Role::{Assistant, System, User};
    let roles = [System, User, System, User, Assistant, System, User];
    let texts: Vec<String> =
        roles.iter().enumerate().map(|(i, r)| format!("rkllmd-probe-{i}-{}", r.as_str())).collect();
    let messages = roles
        .iter()
        .zip(&texts)
        .map(|(&role, text)| Message { role, content: Some(text.clone()), ..Default::default() })
        .collect();
    let Ok(rendered) = prompter.render(&ChatInput { messages, ..Default::default() }) else { return false };
    let mut rest = rendered.prompt.as_str();
    texts.iter().all(|text| match rest.find(text) {
        Some(at) => {
            rest = &rest[at + text.len()..];
            true
        }
        None => false,
    })
}

/// Every system message's text, in order, as one leading system message.
fn fold(messages: &mut Vec<ChatMessage>) {
    let texts: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == ChatRole::System)
        .filter_map(|m| match &m.content {
            Some(Content::Text(text)) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let system = ChatMessage {
        role: ChatRole::System,
        content: Some(Content::Text(texts.join("\n\n"))),
        tool_calls: None,
        tool_call_id: None,
        name: None,
        reasoning_content: None,
    };
    messages.retain(|m| m.role != ChatRole::System);
    messages.insert(0, system);
}

/// A template that refuses the conversation only for the system messages
/// `messages` carried: said with "Unexpected role", Claude Code's cue to
/// send them another way. Checked only for a template's refusal (a 400
/// naming `messages`, no code) of a request that had such messages, by
/// rendering it without them.
pub fn refused(e: ApiError, c: &Conversation, model: &Loaded) -> ApiError {
    let template = e.status == axum::http::StatusCode::BAD_REQUEST
        && e.body.code.is_none()
        && e.body.param.as_deref().is_some_and(|p| p == "messages" || p.starts_with("messages["));
    if !template || !c.messages.iter().any(|m| m.role == wire::Role::System) {
        return e;
    }
    let mut without = c.clone();
    without.messages.retain(|m| m.role != wire::Role::System);
    let renders = !without.messages.is_empty()
        && super::convert::conversation(&without).is_ok_and(|chat| chat.count_tokens(model).is_ok());
    if !renders {
        return e;
    }
    let message = format!(
        "Unexpected role `system` in `messages`: this model's chat template refuses the conversation with them ({}); send their text in `system`.",
        e.body.message
    );
    ApiError::bad_request(Some("messages"), message)
}
