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
//! The kept set is packed, not a prefix of the ranking: each tool in turn is
//! kept if it still fits, else skipped for the next one, so one huge
//! description (Claude Code's 10k-token `Workflow`) cannot cost a chat its
//! small core tools; a tool taking over a quarter of the tools' budget is
//! considered only after the others. What a tool costs is measured once per
//! request on a one-line chat (`Costs`), and the packed set's real prompt is
//! rendered and counted: while it is over, the least relevant kept tool goes.
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
use crate::conversation::{rank_tools, ChatInput, Message, Rendered, Role, ToolChoice};
use crate::registry::Loaded;
use serde_json::Value;
use std::collections::BTreeSet;

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

/// A tool whose own definition takes more than this share of the tools'
/// budget is considered after the others (a tool the conversation called
/// excepted): one huge description must not keep out a client's core tools.
const HUGE_SHARE: usize = 4;

/// The most relevant tools whose prompt leaves `room` for the reply, or
/// `None` when not even the fewest allowed (none, or one when a call is
/// required) leave it: then the request is refused as it stands.
pub fn select(model: &Loaded, chat: &ChatInput, context: usize, room: usize) -> Option<Selection> {
    let budget = context.checked_sub(room)?;
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
    let render = |tools: &[usize]| -> Option<(ChatInput, Rendered)> {
        let mut subset = chat.clone();
        subset.tools = tools.iter().map(|&i| chat.tools[i].clone()).collect();
        if subset.tools.is_empty() {
            subset.tool_choice = ToolChoice::None;
        }
        let rendered = model.prompter.render(&subset).ok()?;
        Some((subset, rendered))
    };
    let base = weight(&render(&[])?.1);
    let costs = Costs::of(chat, &|probe| model.prompter.render(probe).ok().map(|r| weight(&r)))?;
    let order = rank_tools(&opening(chat));
    // What the conversation leaves for tools, rounded down to a step.
    let step = (context / BUDGET_STEPS).max(1);
    let stepped = |base: usize| budget.checked_sub(base).map(|left| left - left % step);
    // The tools that `allowance` packs, while the prompt with them weighs at most `limit`.
    let fits = |allowance: usize, limit: usize| {
        let mut keep = pack(&order, &costs, allowance, &called(chat));
        // The costs are estimates: the rendered prompt decides, and the
        // least relevant kept tool goes until it fits.
        loop {
            if keep.len() < fewest {
                return None;
            }
            let mut sorted = keep.clone();
            // The client's order in the prompt: only the set is the ranking's.
            sorted.sort_unstable();
            let (subset, rendered) = render(&sorted)?;
            if weight(&rendered) <= limit {
                return Some((keep, subset, rendered));
            }
            keep.pop();
        }
    };
    // A later turn keeps its first turn's tools (the same allowance packs
    // the same set) while the whole prompt still fits, borrowing up to half
    // the reply's room: a turn that adds a tool call and its output must not
    // cost the conversation its cache by dropping a tool.
    let first = weight(&model.prompter.render(&first_turn(chat)).ok()?);
    let kept_from_first_turn = || fits(stepped(first).filter(|_| first < base)?, budget + room / 2);
    let (keep, chat_kept, rendered) = kept_from_first_turn()
        .or_else(|| fits(stepped(base)?, budget))
        .or_else(|| fits(budget.checked_sub(base)?, budget))?;
    let dropped = order
        .iter()
        .filter(|i| !keep.contains(i))
        .map(|&i| tool_name(&chat.tools[i]).unwrap_or_default().to_owned())
        .collect();
    Some(Selection { chat: chat_kept, rendered, kept: keep.len(), dropped })
}

/// What each tool adds to a prompt, measured on a one-line conversation:
/// `header` once for the tools' section, `each[i]` per tool.
struct Costs {
    header: usize,
    each: Vec<usize>,
}

impl Costs {
    /// `weigh` renders a chat and counts it (`None`: it does not render).
    fn of(chat: &ChatInput, weigh: &dyn Fn(&ChatInput) -> Option<usize>) -> Option<Costs> {
        let probe = |tools: &[&Value]| {
            let mut c = ChatInput {
                messages: vec![Message { role: Role::User, content: Some("x".into()), ..Default::default() }],
                ..chat.clone()
            };
            c.tools = tools.iter().map(|&t| t.clone()).collect();
            c.tool_choice = if tools.is_empty() { ToolChoice::None } else { ToolChoice::Auto };
            weigh(&c)
        };
        let none = probe(&[])?;
        let alone: Vec<usize> =
            chat.tools.iter().map(|t| Some(probe(&[t])?.saturating_sub(none))).collect::<Option<_>>()?;
        // The section's own text: two tools cost less than each alone by it.
        let header = match &chat.tools[..] {
            [a, b, ..] => (alone[0] + alone[1]).saturating_sub(probe(&[a, b])?.saturating_sub(none)),
            _ => 0,
        };
        let each = alone.iter().map(|a| a.saturating_sub(header)).collect();
        Some(Costs { header, each })
    }
}

/// The tools kept within `budget` (over the conversation's own prompt), in
/// the ranking's order: each in turn if it still fits, else skipped for the
/// next — never only a prefix of the ranking. Huge tools come last.
fn pack(order: &[usize], costs: &Costs, budget: usize, called: &BTreeSet<usize>) -> Vec<usize> {
    let huge = |i: usize| costs.each[i] > budget / HUGE_SHARE && !called.contains(&i);
    let considered = order.iter().filter(|&&i| !huge(i)).chain(order.iter().filter(|&&i| huge(i)));
    let mut used = costs.header;
    let mut keep = Vec::new();
    for &i in considered {
        if used + costs.each[i] <= budget {
            used += costs.each[i];
            keep.push(i);
        }
    }
    keep
}

/// The tools the conversation has called already.
fn called(chat: &ChatInput) -> BTreeSet<usize> {
    let names: BTreeSet<&str> = chat.messages.iter().flat_map(|m| &m.tool_calls).map(|c| c.name.as_str()).collect();
    (0..chat.tools.len()).filter(|&i| tool_name(&chat.tools[i]).is_some_and(|n| names.contains(n))).collect()
}

fn tool_name(tool: &Value) -> Option<&str> {
    tool.pointer("/function/name").and_then(Value::as_str)
}

/// The conversation's first turn, without tools: every message before the
/// first assistant one (system prompts, the first user message, a system
/// message after it).
fn first_turn(chat: &ChatInput) -> ChatInput {
    let end = chat.messages.iter().position(|m| m.role == Role::Assistant).unwrap_or(chat.messages.len());
    ChatInput {
        messages: chat.messages[..end].to_vec(),
        tools: Vec::new(),
        tool_choice: ToolChoice::None,
        ..chat.clone()
    }
}

/// The conversation as far as the ranking reads it: up to the first user
/// turn, the system messages after it (instructions, resent every turn:
/// Claude Code names its Bash, Read and Edit tools in one after the first
/// user turn), and the assistant turns that called tools (a called tool stays).
fn opening(chat: &ChatInput) -> ChatInput {
    let first_user = chat.messages.iter().position(|m| m.role == Role::User).map_or(0, |i| i + 1);
    let called =
        chat.messages[first_user..].iter().filter(|m| !m.tool_calls.is_empty() || m.role == Role::System).cloned();
    let messages = chat.messages[..first_user].iter().cloned().chain(called).collect();
    ChatInput { messages, ..chat.clone() }
}
