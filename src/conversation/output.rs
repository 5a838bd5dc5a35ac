//! Reading a reply as it is generated: stop sequences, then the thinking
//! block, then tool calls, token by token.
//!
//! The order is deliberate. Stop strings are matched on the raw model text,
//! as the model wrote it (as vLLM and llama.cpp do): a stop string is about
//! what the model says, wherever it says it, and matching it first means the
//! run is aborted at the token that completes it, whatever part of the reply
//! that is. Then the `<think>` block is split off, so text inside it is never
//! taken for a tool call. Tool calls are looked for in the answer only.
//!
//! Each stage holds back only text that could still become its pattern (a
//! stop string, `<think>`/`</think>`, `<tool_call>`, a call's head), so a
//! token that can be none of these is passed on in the same step it arrived.

use super::think::{Part, ThinkSplitter};
use super::tool_calls::{ToolCallParser, ToolOut};
use super::{ReasoningMode, ReplyRules, StopMatcher, ToolCall};

/// What one token (or the end of the reply) added to the reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    pub content: String,
    /// Thinking text, in `split` mode.
    pub reasoning: String,
    pub calls: Vec<CallDelta>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.reasoning.is_empty() && self.calls.is_empty()
    }
}

/// A step of one tool call: its head the first time, then arguments text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallDelta {
    pub index: u32,
    pub head: Option<CallHead>,
    /// The next part of the JSON-encoded arguments (may be empty).
    pub arguments: String,
    /// Set on the last step of a call whose arguments did not end as one
    /// complete, valid JSON object. A stream has sent its steps already; a
    /// whole reply drops the call and returns its text as content.
    pub malformed: Option<Malformed>,
}

/// A malformed call's text as the model wrote it, and where it goes in the
/// content: `at` is a byte offset into the same delta's `content`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    pub at: usize,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHead {
    pub id: String,
    pub name: String,
}

/// One token's effect.
#[derive(Debug)]
pub struct Step {
    pub delta: Delta,
    /// A stop sequence matched: the reply ends here and the run should be aborted.
    pub stopped: bool,
}

#[derive(Debug)]
pub struct ReplyParser {
    stop: StopMatcher,
    mode: ReasoningMode,
    /// Absent when nothing depends on the thinking block: `inline` without tools.
    think: Option<ThinkSplitter>,
    tools: Option<ToolCallParser>,
    /// The stop sequence that ended the reply.
    stopped: Option<String>,
    /// The reply held reasoning text (in any mode).
    reasoned: bool,
}

impl ReplyParser {
    pub fn new(rules: ReplyRules, stops: Vec<String>) -> Self {
        let needs_think = rules.reasoning != ReasoningMode::Inline || rules.tool_syntax.is_some();
        ReplyParser {
            stop: StopMatcher::new(stops),
            mode: rules.reasoning,
            think: needs_think.then(|| ThinkSplitter::new(rules.starts_in_thinking)),
            tools: rules.tool_syntax.map(ToolCallParser::new),
            stopped: None,
            reasoned: false,
        }
    }

    /// Reads the next token's text. After a stop sequence matched, tokens still
    /// in flight are ignored.
    pub fn push(&mut self, token: &str) -> Step {
        if self.stopped.is_some() {
            return Step { delta: Delta::default(), stopped: true };
        }
        let pushed = self.stop.push(token);
        self.stopped = pushed.matched;
        let mut delta = Delta::default();
        self.parse(&pushed.release, false, &mut delta);
        Step { delta, stopped: self.stopped.is_some() }
    }

    /// The stop sequence that ended the reply, if one did.
    pub fn stop_sequence(&self) -> Option<&str> {
        self.stopped.as_deref()
    }

    /// The reply ended. `tail` is text the runtime left unfinished (U+FFFD for
    /// an incomplete character); it is dropped after a stop sequence.
    pub fn finish(&mut self, tail: &str) -> Delta {
        let mut rest = self.stop.finish();
        if self.stopped.is_none() {
            rest.push_str(tail);
        }
        let mut delta = Delta::default();
        self.parse(&rest, true, &mut delta);
        delta
    }

    /// Whether the reply so far held reasoning (a `<think>` block's text).
    /// Known only when the block is split out (not with `inline` and no tools).
    pub fn reasoned(&self) -> bool {
        self.reasoned
    }

    /// Whether the reply made tool calls, each with valid arguments (its
    /// finish reason is then `tool_calls`).
    pub fn called_tools(&self) -> bool {
        self.tools.as_ref().is_some_and(ToolCallParser::called_tools)
    }

    fn parse(&mut self, text: &str, end: bool, delta: &mut Delta) {
        let mut parts = Vec::new();
        match &mut self.think {
            Some(think) => {
                think.push(text, &mut parts);
                if end {
                    think.finish(&mut parts);
                }
            }
            None if text.is_empty() => {}
            None => parts.push(Part::Content(text.to_owned())),
        }
        let mut outs = Vec::new();
        self.reasoned |= parts.iter().any(|p| matches!(p, Part::Reasoning(t) if !t.trim().is_empty()));
        for part in parts {
            match (part, self.mode) {
                (Part::Content(t), _) => match &mut self.tools {
                    Some(tools) => tools.push(&t, &mut outs),
                    None => outs.push(ToolOut::Content(t)),
                },
                (Part::Reasoning(t), ReasoningMode::Split) => delta.reasoning.push_str(&t),
                // Inline: the block as written, tags included, but never parsed for tool calls.
                (Part::Reasoning(t) | Part::Markup(t), ReasoningMode::Inline) => delta.content.push_str(&t),
                (Part::Reasoning(_) | Part::Markup(_), _) => {}
            }
        }
        if end {
            if let Some(tools) = &mut self.tools {
                tools.finish(&mut outs);
            }
        }
        for out in outs {
            match out {
                ToolOut::Content(t) => delta.content.push_str(&t),
                ToolOut::Start { index, id, name } => delta.calls.push(CallDelta {
                    index,
                    head: Some(CallHead { id, name }),
                    arguments: String::new(),
                    malformed: None,
                }),
                ToolOut::Args { index, text } => match delta.calls.last_mut() {
                    Some(last) if last.index == index => last.arguments.push_str(&text),
                    _ => delta.calls.push(CallDelta { index, head: None, arguments: text, malformed: None }),
                },
                ToolOut::Malformed { index, text } => {
                    let malformed = Some(Malformed { at: delta.content.len(), text });
                    match delta.calls.last_mut() {
                        Some(last) if last.index == index => last.malformed = malformed,
                        _ => delta.calls.push(CallDelta { index, head: None, arguments: String::new(), malformed }),
                    }
                }
            }
        }
    }
}

/// A whole reply, gathered from its deltas exactly as a streaming client
/// gathers them, so the two response shapes cannot disagree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<ToolCall>,
}

impl Reply {
    pub fn absorb(&mut self, delta: Delta) {
        let mut content = delta.content;
        let mut malformed = Vec::new();
        self.reasoning.push_str(&delta.reasoning);
        // Calls never interleave: every step after a head is the latest call's.
        for step in delta.calls {
            if let Some(CallHead { id, name }) = step.head {
                self.calls.push(ToolCall { id, name, arguments: String::new() });
            }
            if let Some(call) = self.calls.last_mut() {
                call.arguments.push_str(&step.arguments);
            }
            if let Some(m) = step.malformed {
                self.calls.pop();
                malformed.push(m);
            }
        }
        // Back to front, so the earlier offsets still hold.
        for Malformed { at, text } in malformed.into_iter().rev() {
            if content.is_char_boundary(at) {
                content.insert_str(at, &text);
            }
        }
        self.content.push_str(&content);
    }
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
