//! Tool calls in the answer text, recognised while it streams.
//!
//! * **Hermes/Qwen**: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`,
//!   anywhere in the answer; text before a call stays content; several blocks
//!   are parallel calls.
//! * **Llama 3.x JSON**: the answer *is* the call: `{"name": …, "parameters": {…}}`
//!   (optionally after `<|python_tag|>`), several separated by `;` or whitespace.
//!
//! A call is **committed** as soon as its head `{"name": "…", "arguments": {` is
//! seen: the name goes out, and the arguments object is passed on character by
//! character as the model writes it, so a client sees them grow token by token.
//! A call object that does not start like that (other key order, string
//! arguments, not JSON at all) is held until its block ends and then read as a
//! whole; if it is not a call after all, its text is returned as content, as
//! written. Only what could still be a call or its opening tag is ever held.
//!
//! A committed call whose arguments do not end as one complete, valid JSON
//! object (the block closed early, the reply was cut off, the JSON is broken)
//! is **malformed**: its steps have been passed on, so it is reported with the
//! call's text as written, for a whole reply to return as content instead.

use super::stop::partial_suffix;
use super::tool_json::{head, whole_call, Head, ValueEnd};
use super::ToolSyntax;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
/// A call head longer than this is not streamed: the call is read whole at its end.
const HEAD_LIMIT: usize = 1024;

/// What a piece of answer text turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOut {
    Content(String),
    /// A new call: its position among this reply's calls, a fresh id, the function's name.
    Start {
        index: u32,
        id: String,
        name: String,
    },
    /// The next characters of a call's JSON-encoded arguments.
    Args {
        index: u32,
        text: String,
    },
    /// A committed call turned out malformed; `text` is the call as written.
    Malformed {
        index: u32,
        text: String,
    },
}

#[derive(Debug)]
pub struct ToolCallParser {
    syntax: ToolSyntax,
    state: State,
    /// Calls started (the next call's index).
    calls: u32,
    /// Calls that ended with valid arguments.
    valid: u32,
    malformed: u32,
}

#[derive(Debug)]
enum State {
    /// Between calls: `held` is undecided text (a possible opening, or the
    /// separator after a call, which is dropped if another call or the end follows).
    Text {
        held: String,
        after_call: bool,
    },
    /// Llama 3: the answer did not start with a call, so it is plain text.
    Plain,
    Block(Block),
}

#[derive(Debug)]
struct Block {
    /// What opened the block (`<tool_call>`, and whitespace or `<|python_tag|>`
    /// before it): part of the content if the block is no call.
    opening: String,
    /// The block's text after the opening tag (Llama: from the object's `{`).
    text: String,
    /// Llama: where the call object ends (the block has no closing tag).
    outer: ValueEnd,
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    /// Matching `{"name": "…", "arguments": {`.
    Head,
    /// Committed; passing the arguments object on. `start`: where it begins in the block's text.
    Args { index: u32, start: usize, args: ValueEnd },
    /// Committed, arguments ended (`valid`: as one JSON object); waiting for the block's end.
    Tail { index: u32, valid: bool },
    /// Not a streamable head: held until the block ends, then read whole.
    Whole,
}

impl ToolCallParser {
    pub fn new(syntax: ToolSyntax) -> Self {
        ToolCallParser {
            syntax,
            state: State::Text { held: String::new(), after_call: false },
            calls: 0,
            valid: 0,
            malformed: 0,
        }
    }

    /// Whether the reply so far holds tool calls, every one of them complete
    /// with valid arguments (its finish reason is then `tool_calls`). A call
    /// still open does not count yet.
    pub fn called_tools(&self) -> bool {
        let open = matches!(&self.state, State::Block(b) if matches!(b.phase, Phase::Args { .. } | Phase::Tail { valid: false, .. }));
        self.valid > 0 && self.malformed == 0 && !open
    }

    pub fn push(&mut self, text: &str, out: &mut Vec<ToolOut>) {
        for (i, c) in text.char_indices() {
            if let State::Plain = self.state {
                emit(out, ToolOut::Content(text[i..].to_owned()));
                return;
            }
            self.push_char(c, out);
        }
    }

    fn push_char(&mut self, c: char, out: &mut Vec<ToolOut>) {
        match &mut self.state {
            State::Plain => emit(out, ToolOut::Content(c.to_string())),
            State::Text { held, .. } => {
                held.push(c);
                match self.syntax {
                    ToolSyntax::Hermes => self.hermes_text(out),
                    ToolSyntax::Llama3Json => self.llama_text(out),
                }
            }
            State::Block(_) => self.block_char(c, out),
        }
    }

    /// Hermes answer text: content, except a `<tool_call>` opening.
    fn hermes_text(&mut self, out: &mut Vec<ToolOut>) {
        let State::Text { held, after_call } = &mut self.state else { return };
        let tag = if *after_call { held.trim_start() } else { held.as_str() };
        if tag == OPEN {
            self.state = State::Block(Block::new(std::mem::take(held), ""));
        } else if !(OPEN.starts_with(tag) || tag.is_empty()) {
            let keep = partial_suffix(held, [OPEN].into_iter());
            let rest = held.split_off(held.len() - keep);
            emit(out, ToolOut::Content(std::mem::replace(held, rest)));
            *after_call = false;
        }
    }

    /// Llama 3 answer text: at the start or after a call, `{` opens a call
    /// (whitespace, `;` and `<|python_tag|>` before it are dropped); anything
    /// else makes the rest of the answer plain text.
    fn llama_text(&mut self, out: &mut Vec<ToolOut>) {
        let State::Text { held, after_call } = &mut self.state else { return };
        let after = *after_call;
        let sep = |c: char| c.is_whitespace() || (after && c == ';');
        let mut rest = held.trim_start_matches(sep);
        let tagged = rest.starts_with(PYTHON_TAG);
        if tagged {
            rest = rest[PYTHON_TAG.len()..].trim_start_matches(sep);
        }
        if rest == "{" {
            held.pop();
            self.state = State::Block(Block::new(std::mem::take(held), "{"));
        } else if !(rest.is_empty() || (!tagged && PYTHON_TAG.starts_with(rest))) {
            emit(out, ToolOut::Content(std::mem::take(held)));
            self.state = State::Plain;
        }
    }

    fn block_char(&mut self, c: char, out: &mut Vec<ToolOut>) {
        let State::Block(block) = &mut self.state else { return };
        let llama = self.syntax == ToolSyntax::Llama3Json;
        block.text.push(c);
        let object_closed = llama && block.outer.push(c);
        match &mut block.phase {
            Phase::Head if block.text.len() > HEAD_LIMIT => block.phase = Phase::Whole,
            Phase::Head => match head(&block.text) {
                Head::Incomplete => {}
                Head::Mismatch => block.phase = Phase::Whole,
                Head::Matched { name } => {
                    let index = self.calls;
                    self.calls += 1;
                    emit(out, ToolOut::Start { index, id: call_id(), name });
                    emit(out, ToolOut::Args { index, text: "{".to_owned() });
                    let mut args = ValueEnd::default();
                    args.push('{');
                    block.phase = Phase::Args { index, start: block.text.len() - 1, args };
                }
            },
            // `<` outside a string is never JSON: a Hermes model closing the
            // block before its arguments' `}`.
            Phase::Args { index, args, .. } if !llama && c == '<' && !args.in_string() => {
                block.phase = Phase::Tail { index: *index, valid: false }
            }
            Phase::Args { index, start, args } => {
                emit(out, ToolOut::Args { index: *index, text: c.to_string() });
                if args.push(c) {
                    let valid = serde_json::from_str::<serde_json::Value>(&block.text[*start..]).is_ok();
                    block.phase = Phase::Tail { index: *index, valid };
                }
            }
            Phase::Tail { .. } | Phase::Whole => {}
        }
        // Hermes blocks end at the tag, but not inside the arguments, where it can only be text.
        let closed =
            object_closed || (!llama && !matches!(block.phase, Phase::Args { .. }) && block.text.ends_with(CLOSE));
        if closed {
            self.end_block(out);
        }
    }

    /// The block's end was seen (or the reply ended inside it).
    fn end_block(&mut self, out: &mut Vec<ToolOut>) {
        let State::Block(block) = std::mem::replace(&mut self.state, State::Plain) else { return };
        let is_call = match block.phase {
            Phase::Tail { valid: true, .. } => true,
            // Cut off in its arguments, or they are not JSON: what was
            // passed on stands, but the call is no call.
            Phase::Args { index, .. } | Phase::Tail { index, valid: false } => {
                self.malformed += 1;
                emit(out, ToolOut::Malformed { index, text: block.opening + &block.text });
                false
            }
            Phase::Head | Phase::Whole => {
                let inner = block.text.strip_suffix(CLOSE).unwrap_or(&block.text);
                match whole_call(inner) {
                    Some((name, arguments)) => {
                        let index = self.calls;
                        self.calls += 1;
                        emit(out, ToolOut::Start { index, id: call_id(), name });
                        emit(out, ToolOut::Args { index, text: arguments });
                        true
                    }
                    None => {
                        // Not a call: the text goes out as the model wrote it.
                        emit(out, ToolOut::Content(block.opening + &block.text));
                        false
                    }
                }
            }
        };
        if is_call {
            self.valid += 1;
            self.state = State::Text { held: String::new(), after_call: true };
            return;
        }
        if self.syntax == ToolSyntax::Hermes {
            self.state = State::Text { held: String::new(), after_call: false };
        }
    }

    /// The reply ended: an unfinished block is read as it stands; a partial
    /// opening tag is content; whitespace after the last call is dropped.
    pub fn finish(&mut self, out: &mut Vec<ToolOut>) {
        match &mut self.state {
            State::Plain => {}
            State::Block(_) => self.end_block(out),
            State::Text { held, after_call } => {
                let only_separators = held.trim_start_matches(|c: char| c.is_whitespace() || c == ';').is_empty();
                if !(held.is_empty() || (only_separators && *after_call)) {
                    emit(out, ToolOut::Content(std::mem::take(held)));
                }
            }
        }
        self.state = State::Plain;
    }
}

impl Block {
    fn new(opening: String, text: &str) -> Block {
        let mut outer = ValueEnd::default();
        text.chars().for_each(|c| {
            outer.push(c);
        });
        Block { opening, text: text.to_owned(), outer, phase: Phase::Head }
    }
}

/// `call_` and 24 random hex digits, like OpenAI's ids.
fn call_id() -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("call_{}", &hex[..24])
}

/// Appends an output, merging text into the previous output of the same kind.
fn emit(out: &mut Vec<ToolOut>, next: ToolOut) {
    match (out.last_mut(), next) {
        (Some(ToolOut::Content(a)), ToolOut::Content(b)) => a.push_str(&b),
        (Some(ToolOut::Args { index: i, text: a }), ToolOut::Args { index: j, text: b }) if *i == j => a.push_str(&b),
        (_, next) => out.push(next),
    }
}
