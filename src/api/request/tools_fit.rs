//! A chat whose tool definitions do not fit the context: with
//! `tools_overflow = "select"` the most relevant tools that fit are sent
//! (ranked by `conversation::rank_tools`), the rest dropped and reported.
//!
//! Room is kept for the reply: the client's `max_tokens`, else a quarter of
//! the context (at most the server's `max_new_tokens`), so that the tools
//! kept do not leave the model a handful of tokens to answer in. The kept
//! tools are counted by the model's tokenizer; without one, by the prompt's
//! bytes (a token is at least one byte), which always fits but keeps fewer.
//!
//! The tools sit at the start of the prompt, so a follow-up reuses the
//! conversation cache only if it gets the very same tools. Both halves of
//! the choice are therefore kept steady over a conversation's turns:
//! * the ranking reads the conversation's opening (its messages up to the
//!   first user turn, and the tools called since), not its latest turn;
//! * the tools' budget moves in steps of [`BUDGET_STEPS`]ths of the context:
//!   what the conversation has left for tools is rounded down to a step, so
//!   turns that grow it within a step keep the same tools, and one turn per
//!   step crossed (a full prefill) drops the next least relevant ones.
//!
//! The price: up to one step of the context left unused by tools.

use super::size::{self, PromptSize};
use super::Loaded;
use crate::conversation::{rank_tools, ChatInput, Rendered, Role, ToolChoice};
use serde_json::Value;

/// The tools sent and those dropped, with the prompt rendered with the kept ones.
pub struct Selection {
    pub chat: ChatInput,
    pub rendered: Rendered,
    pub kept: usize,
    /// The dropped tools' names, most relevant first.
    pub dropped: Vec<String>,
}

/// The reply's share of the context the selection leaves free.
pub fn reply_room(max_tokens: Option<u32>, context: usize, max_new_tokens: u32) -> usize {
    max_tokens.map_or_else(|| (context / 4).min(max_new_tokens as usize), |m| m as usize)
}

/// Whether a chat with tools needs a selection: its prompt (by exact count,
/// or by bytes without a tokenizer) leaves less than `room` for the reply.
/// A chat that names one function sends only that one, so has nothing to choose.
pub fn needed(chat: &ChatInput, size: &PromptSize, room: usize) -> bool {
    let offered = !chat.tools.is_empty() && matches!(chat.tool_choice, ToolChoice::Auto | ToolChoice::Required);
    offered && size.tokens.unwrap_or(size.bytes) + room > size.context
}

/// The tools' budget moves in steps of `context / BUDGET_STEPS` tokens.
const BUDGET_STEPS: usize = 8;

/// The most relevant tools whose prompt leaves `room` for the reply, or
/// `None` when not even the fewest allowed (none, or one when a call is
/// required) leave it: then the request is refused as it stands.
pub fn select(model: &Loaded, chat: &ChatInput, context: usize, room: usize) -> Option<Selection> {
    let budget = context.checked_sub(room)?;
    let order = rank_tools(&opening(chat));
    let fewest = usize::from(chat.tool_choice == ToolChoice::Required);
    // A prompt too long to tokenize weighs at least its fewest tokens, which
    // is more than any budget: it is not tokenized.
    let weight = |rendered: &Rendered| {
        let bytes = rendered.prompt.len();
        if size::too_long_to_tokenize(bytes, context) {
            return size::fewest_tokens(bytes);
        }
        model.prompter.tokenize(&rendered.prompt).map_or(bytes, |ids| ids.len())
    };
    // What the conversation leaves for tools, rounded down to a step.
    let mut bare = chat.clone();
    (bare.tools, bare.tool_choice) = (Vec::new(), ToolChoice::None);
    let step = (context / BUDGET_STEPS).max(1);
    let stepped = model.prompter.render(&bare).ok().and_then(|r| {
        let base = weight(&r);
        Some(budget - budget.checked_sub(base)? % step)
    });
    stepped
        .and_then(|b| select_within(model, chat, &order, fewest, b, &weight))
        .or_else(|| select_within(model, chat, &order, fewest, budget, &weight))
}

/// The conversation as far as the ranking reads it: up to the first user
/// turn, and the assistant turns that called tools (a called tool stays).
fn opening(chat: &ChatInput) -> ChatInput {
    let first_user = chat.messages.iter().position(|m| m.role == Role::User).map_or(0, |i| i + 1);
    let called = chat.messages[first_user..].iter().filter(|m| !m.tool_calls.is_empty()).cloned();
    let messages = chat.messages[..first_user].iter().cloned().chain(called).collect();
    ChatInput { messages, ..chat.clone() }
}

/// The first tools of `order` whose prompt weighs at most `budget`, as many as fit.
fn select_within(
    model: &Loaded,
    chat: &ChatInput,
    order: &[usize],
    fewest: usize,
    budget: usize,
    weight: &dyn Fn(&Rendered) -> usize,
) -> Option<Selection> {
    let with_first = |k: usize| -> Option<(ChatInput, Rendered)> {
        let mut keep: Vec<usize> = order[..k].to_vec();
        // The client's order in the prompt: only the set is the ranking's.
        keep.sort_unstable();
        let mut subset = chat.clone();
        subset.tools = keep.iter().map(|&i| chat.tools[i].clone()).collect();
        if subset.tools.is_empty() {
            subset.tool_choice = ToolChoice::None;
        }
        let rendered = model.prompter.render(&subset).ok()?;
        (weight(&rendered) <= budget).then_some((subset, rendered))
    };
    // A prompt grows with each tool added: the largest k that fits, by bisection.
    let mut best = (fewest, with_first(fewest)?);
    let (mut lo, mut hi) = (fewest + 1, chat.tools.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match with_first(mid) {
            Some(fit) => {
                best = (mid, fit);
                lo = mid + 1;
            }
            None => hi = mid,
        }
    }
    let (kept, (chat_kept, rendered)) = best;
    let dropped = order[kept..]
        .iter()
        .map(|&i| chat.tools[i].pointer("/function/name").and_then(Value::as_str).unwrap_or_default().to_owned())
        .collect();
    Some(Selection { chat: chat_kept, rendered, kept, dropped })
}
