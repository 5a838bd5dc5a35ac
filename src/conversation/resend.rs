//! What a client resends of a reply, and where it lies in a rendered prompt.
//!
//! The conversation cache holds a reply as the model generated it; the
//! client resends it as it was shown, rendered by the template: a reply cut
//! inside a character ends in U+FFFD, a thinking model's reasoning is left
//! out (or dropped by the template), a client may trim trailing whitespace.
//! Re-tokenized, such a reply no longer equals the generated ids, so the
//! cache matches it by its [`view`] instead: the same text on both sides
//! means the client holds the reply the model wrote.

use super::{ChatInput, Message, Prompter, Role};

/// A reply as a client was shown it and resends it: its content without
/// trailing whitespace, and its tool calls (name and arguments as sent).
/// Reasoning is not part of it: clients drop it or send it separately, and
/// templates drop it from history.
pub fn view<'a>(content: &str, calls: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut view = content.trim_end().to_owned();
    for (name, arguments) in calls {
        // NUL cannot occur in a request's text (it is refused), so the
        // parts cannot run into each other.
        view.push('\0');
        view.push_str(name);
        view.push('\0');
        view.push_str(arguments);
    }
    view
}

/// The last reply a chat request resends: where its assistant message lies
/// in the prompt's ids, and its view.
#[derive(Debug, Clone, PartialEq)]
pub struct ResentReply {
    pub start: usize,
    pub end: usize,
    pub view: String,
    /// The length in ids of the prompt that asked for this reply, as the
    /// history before it renders (with the generation prompt).
    pub before: usize,
}

/// Finds the last assistant message of `chat` that has a message after it
/// (the reply the conversation continues from) in `ids`, the rendered
/// prompt's tokens: the prompt rendered once more with that message empty
/// shares the ids before and after it. A message that is empty already (a
/// thinking reply cut before its answer, resent without its reasoning) is
/// rendered once more with one character instead, which marks where it
/// lies. `None` when there is no such message or the renderings do not
/// line up.
pub fn locate(prompter: &Prompter, chat: &ChatInput, ids: &[u32]) -> Option<ResentReply> {
    let last = chat.messages.len().checked_sub(1)?;
    let index = chat.messages[..last].iter().rposition(|m| m.role == Role::Assistant)?;
    let message = &chat.messages[index];
    let calls = message.tool_calls.iter().map(|c| (c.name.as_str(), c.arguments.as_str()));
    let view = view(message.content.as_deref().unwrap_or_default(), calls);
    let empty = message.content.as_deref().unwrap_or_default().is_empty() && message.tool_calls.is_empty();
    // U+0001: no request holds it in an empty message, and it is one token.
    let stand_in = if empty { "\u{1}" } else { "" };
    let mut emptied = chat.clone();
    emptied.messages[index] = Message { role: Role::Assistant, content: Some(stand_in.into()), ..Message::default() };
    let other = prompter.tokenize(&prompter.render(&emptied).ok()?.prompt)?;
    let (start, end) = span(ids, &other)?;
    // The prompt the reply answered: without it, a reply that ends like a
    // later one could stand in for it where the cache holds more turns.
    let mut asked = chat.clone();
    asked.messages.truncate(index);
    let before = prompter.tokenize(&prompter.render(&asked).ok()?.prompt)?.len();
    Some(ResentReply { start, end, view, before })
}

/// Where `ids` and `other` differ: `[start, end)` of `ids`, with
/// `ids[..start]` and `ids[end..]` shared with `other`, and all of the
/// shorter one shared (one of them has the message, the other has it empty).
fn span(ids: &[u32], other: &[u32]) -> Option<(usize, usize)> {
    let start = ids.iter().zip(other).take_while(|(a, b)| a == b).count();
    // The shared tail cannot reach into the shared head of either.
    let shorter = ids.len().min(other.len());
    let tail = ids.iter().rev().zip(other.iter().rev()).take(shorter - start).take_while(|(a, b)| a == b).count();
    let end = ids.len() - tail;
    (shorter == start + tail && start <= end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_ignores_trailing_whitespace_and_keeps_calls_apart() {
        assert_eq!(view("Hello there. \n", []), view("Hello there.", []));
        assert_ne!(view("Hello", []), view(" Hello", []));
        assert_ne!(view("", [("f", "{}")]), view("", [("f", "{ }")]));
        assert_ne!(view("a", [("b", "{}")]), view("a\0b", [("", "{}")]));
    }

    #[test]
    fn the_span_is_what_the_emptied_rendering_lacks() {
        assert_eq!(span(&[1, 2, 7, 8, 3, 4], &[1, 2, 3, 4]), Some((2, 4)));
        // The reply ends like the prompt before it: the tail does not overlap the head.
        assert_eq!(span(&[1, 2, 2, 3], &[1, 2, 3]), Some((2, 3)));
        assert_eq!(span(&[1, 2, 3], &[1, 2, 3]), Some((3, 3)), "an empty reply");
        assert_eq!(span(&[1, 2, 3], &[1, 9, 3]), None, "the renderings differ elsewhere");
        assert_eq!(span(&[1, 2, 3, 4], &[1, 2, 5, 3, 4]), Some((2, 2)), "an empty reply, found by a stand-in");
    }
}
