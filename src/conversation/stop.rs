//! Stop sequences matched across token boundaries with the minimum holdback.
//!
//! Text that may still be the beginning of a stop string is held; it is
//! released as soon as it cannot be, and text that cannot begin one is never
//! held at all.

#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What one push produced.
#[derive(Debug, PartialEq, Eq)]
pub struct Pushed {
    /// Text that is now certainly part of the reply.
    pub release: String,
    /// The stop sequence that matched; `release` ends right before it.
    pub matched: Option<String>,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), held: String::new() }
    }

    pub fn push(&mut self, text: &str) -> Pushed {
        if self.stops.is_empty() {
            return Pushed { release: text.to_owned(), matched: None };
        }
        self.held.push_str(text);
        // The earliest complete match wins (at one place, the first listed).
        let found = self.stops.iter().filter_map(|s| Some((self.held.find(s.as_str())?, s))).min_by_key(|(at, _)| *at);
        if let Some((at, stop)) = found {
            let matched = Some(stop.clone());
            self.held.truncate(at);
            return Pushed { release: std::mem::take(&mut self.held), matched };
        }
        let keep = self.longest_partial_suffix();
        let release = self.held[..self.held.len() - keep].to_owned();
        self.held.drain(..self.held.len() - keep);
        Pushed { release, matched: None }
    }

    /// At the end of generation held text can no longer become a stop string.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    fn longest_partial_suffix(&self) -> usize {
        partial_suffix(&self.held, self.stops.iter().map(String::as_str))
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of one of
/// `patterns`: the part that must be held back because the next token may
/// complete a pattern. Shared by stop strings and the `<think>`/`<tool_call>`
/// tags, so every stage holds only what could still become its pattern.
pub(crate) fn partial_suffix<'p>(text: &str, patterns: impl Iterator<Item = &'p str> + Clone) -> usize {
    text.char_indices()
        .map(|(i, _)| &text[i..])
        .find(|suffix| patterns.clone().any(|p| p.len() > suffix.len() && p.starts_with(suffix)))
        .map_or(0, str::len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], tokens: &[&str]) -> (Vec<String>, bool) {
        let (out, matched) = run_which(stops, tokens);
        (out, matched.is_some())
    }

    fn run_which(stops: &[&str], tokens: &[&str]) -> (Vec<String>, Option<String>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        for t in tokens {
            let p = m.push(t);
            out.push(p.release);
            if p.matched.is_some() {
                return (out, p.matched);
            }
        }
        out.push(m.finish());
        (out, None)
    }

    #[test]
    fn stop_split_across_tokens_is_trimmed() {
        let (out, matched) = run(&["</end>"], &["Hello", " </", "en", "d> tail"]);
        assert!(matched);
        assert_eq!(out.concat(), "Hello ");
        assert_eq!(out, vec!["Hello", " ", "", ""]);
    }

    #[test]
    fn text_that_cannot_start_a_stop_is_released_at_once() {
        let (out, matched) = run(&["STOP"], &["a", "b", "S", "x", "ST", "OP"]);
        assert!(matched);
        assert_eq!(out, vec!["a", "b", "", "Sx", "", ""]);
    }

    #[test]
    fn held_text_is_released_when_generation_ends() {
        let (out, matched) = run(&["\n\nUser:"], &["Hi", "\n"]);
        assert!(!matched);
        assert_eq!(out, vec!["Hi", "", "\n"]);
    }

    #[test]
    fn earliest_of_several_stops_wins_and_multibyte_is_safe() {
        let (out, matched) = run_which(&["b", "世界"], &["a日", "本世", "界b"]);
        assert_eq!(matched.as_deref(), Some("世界"), "the earlier match, not the first listed");
        assert_eq!(out.concat(), "a日本");
    }

    #[test]
    fn no_stops_passes_everything() {
        let (out, matched) = run(&[], &["x", "y"]);
        assert!(!matched);
        assert_eq!(out.concat(), "xy");
    }
}
