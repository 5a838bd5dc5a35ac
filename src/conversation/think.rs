//! Finding the `<think>…</think>` block of a thinking model's reply.
//!
//! Only one block is recognised, at the start of the reply (after optional
//! whitespace), or from the first character when the prompt already opened
//! it (`starts_in_thinking`; a model that writes `<think>` again anyway has
//! that one tag skipped). Once the reply has shown it is not starting
//! with `<think>`, or the block has closed, every character passes straight
//! through: a `<think>` in the answer is the answer's text. Text is held only
//! while it may still be part of a tag.

use super::stop::partial_suffix;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// What a piece of reply text turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text inside the block.
    Reasoning(String),
    /// The tags themselves and the whitespace right after each:
    /// kept only when the reply is returned as written.
    Markup(String),
    /// The answer.
    Content(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace and a possible beginning of `<think>` so far.
    Start,
    /// The prompt opened the block, and the reply so far is whitespace and
    /// a possible beginning of a redundant `<think>`.
    StartInside,
    /// Right after `<think>`: leading whitespace is not reasoning.
    Opened,
    Thinking,
    /// Right after `</think>`: whitespace here belongs to neither part.
    Closed,
    Answer,
}

#[derive(Debug)]
pub struct ThinkSplitter {
    state: State,
    /// Undecided text: leading whitespace and a partial `<think>` (Start), or a partial `</think>` (Thinking).
    held: String,
}

impl ThinkSplitter {
    pub fn new(starts_in_thinking: bool) -> Self {
        ThinkSplitter { state: if starts_in_thinking { State::StartInside } else { State::Start }, held: String::new() }
    }

    /// Splits the next released text; parts come out in reply order.
    pub fn push(&mut self, text: &str, out: &mut Vec<Part>) {
        for (i, c) in text.char_indices() {
            if self.state == State::Answer {
                emit(out, Part::Content(text[i..].to_owned()));
                return;
            }
            self.push_char(c, out);
        }
    }

    fn push_char(&mut self, c: char, out: &mut Vec<Part>) {
        match self.state {
            State::Start => {
                self.held.push(c);
                let tag = self.held.trim_start();
                if tag == OPEN {
                    emit(out, Part::Markup(std::mem::take(&mut self.held)));
                    self.state = State::Opened;
                } else if !OPEN.starts_with(tag) {
                    emit(out, Part::Content(std::mem::take(&mut self.held)));
                    self.state = State::Answer;
                }
            }
            State::StartInside => {
                self.held.push(c);
                let tag = self.held.trim_start();
                if tag == OPEN {
                    emit(out, Part::Markup(std::mem::take(&mut self.held)));
                    self.state = State::Opened;
                } else if !OPEN.starts_with(tag) {
                    // No second tag: the held text is the block's, read as such.
                    self.state = State::Opened;
                    for c in std::mem::take(&mut self.held).chars() {
                        self.push_char(c, out);
                    }
                }
            }
            State::Opened if c.is_whitespace() => emit(out, Part::Markup(c.to_string())),
            State::Opened | State::Thinking => {
                self.state = State::Thinking;
                self.held.push(c);
                if self.held.ends_with(CLOSE) {
                    let before = self.held.len() - CLOSE.len();
                    if before > 0 {
                        emit(out, Part::Reasoning(self.held[..before].to_owned()));
                    }
                    emit(out, Part::Markup(CLOSE.to_owned()));
                    self.held.clear();
                    self.state = State::Closed;
                } else {
                    let keep = partial_suffix(&self.held, [CLOSE].into_iter());
                    if keep < self.held.len() {
                        let rest = self.held.split_off(self.held.len() - keep);
                        emit(out, Part::Reasoning(std::mem::replace(&mut self.held, rest)));
                    }
                }
            }
            State::Closed if c.is_whitespace() => emit(out, Part::Markup(c.to_string())),
            State::Closed | State::Answer => {
                self.state = State::Answer;
                emit(out, Part::Content(c.to_string()));
            }
        }
    }

    /// The reply ended: held text is what it was written as, a tag never completed.
    pub fn finish(&mut self, out: &mut Vec<Part>) {
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return;
        }
        let part = match self.state {
            State::Thinking => Part::Reasoning(held),
            // A partial `<think>` inside the block is thinking text; the whitespace before it is not.
            State::StartInside => {
                let text = held.trim_start();
                let blank = held.len() - text.len();
                if blank > 0 {
                    emit(out, Part::Markup(held[..blank].to_owned()));
                }
                if text.is_empty() {
                    return;
                }
                Part::Reasoning(text.to_owned())
            }
            _ => Part::Content(held),
        };
        emit(out, part);
    }
}

/// Appends a part, merging it into the previous one of the same kind.
fn emit(out: &mut Vec<Part>, part: Part) {
    match (out.last_mut(), part) {
        (Some(Part::Reasoning(a)), Part::Reasoning(b))
        | (Some(Part::Markup(a)), Part::Markup(b))
        | (Some(Part::Content(a)), Part::Content(b)) => a.push_str(&b),
        (_, part) => out.push(part),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits `reply` fed as the given tokens; returns (reasoning, markup, content)
    /// and the parts released by each push.
    fn split(starts_in_thinking: bool, tokens: &[&str]) -> ((String, String, String), Vec<Vec<Part>>) {
        let mut s = ThinkSplitter::new(starts_in_thinking);
        let mut per_push = Vec::new();
        for t in tokens {
            let mut out = Vec::new();
            s.push(t, &mut out);
            per_push.push(out);
        }
        let mut out = Vec::new();
        s.finish(&mut out);
        per_push.push(out);
        let mut acc = (String::new(), String::new(), String::new());
        for p in per_push.iter().flatten() {
            match p {
                Part::Reasoning(t) => acc.0.push_str(t),
                Part::Markup(t) => acc.1.push_str(t),
                Part::Content(t) => acc.2.push_str(t),
            }
        }
        (acc, per_push)
    }

    /// Every way of cutting `reply` into two or three tokens gives the same split.
    fn every_split(starts_in_thinking: bool, reply: &str, want: (&str, &str, &str)) {
        let cuts: Vec<usize> = reply.char_indices().map(|(i, _)| i).skip(1).collect();
        for &a in &cuts {
            for &b in cuts.iter().filter(|&&b| b >= a) {
                let tokens = [&reply[..a], &reply[a..b], &reply[b..]];
                let (got, _) = split(starts_in_thinking, &tokens);
                assert_eq!((got.0.as_str(), got.1.as_str(), got.2.as_str()), want, "tokens {tokens:?}");
            }
        }
    }

    #[test]
    fn block_at_the_start_is_reasoning_at_every_split_point() {
        every_split(false, "<think>Hmm, 2+2.</think>\n\nIt is 4.", ("Hmm, 2+2.", "<think></think>\n\n", "It is 4."));
        every_split(false, "\n<think>a<b</think>c", ("a<b", "\n<think></think>", "c"));
        every_split(false, "<think>\n\n</think>\n\nHi", ("", "<think>\n\n</think>\n\n", "Hi"));
        every_split(false, "<think>\nwhy\n</think>x", ("why\n", "<think>\n</think>", "x"));
    }

    #[test]
    fn reply_that_starts_inside_the_block() {
        every_split(true, "plan: x</think> done", ("plan: x", "</think> ", "done"));
        every_split(true, "\nplan</think>", ("plan", "\n</think>", ""));
    }

    #[test]
    fn a_redundant_think_tag_is_skipped_when_the_reply_starts_inside() {
        every_split(
            true,
            "<think>\nLet me reason.\n</think>\n\nHi",
            ("Let me reason.\n", "<think>\n</think>\n\n", "Hi"),
        );
        every_split(true, " \n<think>a</think>b", ("a", " \n<think></think>", "b"));
        // Only one, and only at the start.
        every_split(true, "<think><think>a</think>", ("<think>a", "<think></think>", ""));
        every_split(true, "a<think>b</think>", ("a<think>b", "</think>", ""));
        // A beginning of the tag that is not it is thinking text.
        every_split(true, "<thin", ("<thin", "", ""));
        every_split(true, "\n<thin", ("<thin", "\n", ""));
        every_split(true, "\n<b></think>", ("<b>", "\n</think>", ""));
    }

    #[test]
    fn block_never_closed_stays_reasoning_including_a_partial_tag() {
        every_split(true, "still thinking </thi", ("still thinking </thi", "", ""));
        every_split(false, "<think>cut off", ("cut off", "<think>", ""));
    }

    #[test]
    fn no_block_is_all_content_and_a_later_tag_is_text() {
        every_split(false, "Hi <think>x</think>", ("", "", "Hi <think>x</think>"));
        every_split(false, "<thinking>", ("", "", "<thinking>"));
        every_split(false, " <thi", ("", "", " <thi"));
    }

    #[test]
    fn only_a_possible_tag_is_held() {
        // The answer is released character by character as soon as it is one.
        let (_, pushes) = split(false, &["Hello", " world"]);
        assert_eq!(pushes[0], vec![Part::Content("Hello".into())]);
        assert_eq!(pushes[1].concat_content(), " world");
        // Inside the block, "<" waits for the next token, which shows it is not "</think>".
        let (_, pushes) = split(true, &["a <", "b", "</", "think>"]);
        assert_eq!(pushes[0].concat_reasoning(), "a ");
        assert_eq!(pushes[1].concat_reasoning(), "<b");
        assert_eq!(pushes[2].concat_reasoning(), "");
        assert_eq!(pushes[3], vec![Part::Markup("</think>".into())]);
    }

    trait Concat {
        fn concat_content(&self) -> String;
        fn concat_reasoning(&self) -> String;
    }
    impl Concat for Vec<Part> {
        fn concat_content(&self) -> String {
            self.iter().filter_map(|p| if let Part::Content(t) = p { Some(t.as_str()) } else { None }).collect()
        }
        fn concat_reasoning(&self) -> String {
            self.iter().filter_map(|p| if let Part::Reasoning(t) = p { Some(t.as_str()) } else { None }).collect()
        }
    }
}
