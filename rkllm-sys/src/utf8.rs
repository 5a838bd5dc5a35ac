//! Reassembling UTF-8 text from the bytes of successive token callbacks.
//!
//! A multi-byte character can be split over several tokens. How the runtime
//! delivers such a character is open in its manual (shared/rkllm-runtime.md,
//! "A character split over tokens"); the assembler gives the exact text under
//! each convention without being told which one is in use:
//! - the incomplete bytes in WAITING, the rest in the next text (`C3`, then
//!   `B6 r l d`), or every byte as NORMAL as it comes: the next text starts
//!   with a continuation byte, so it is appended;
//! - the incomplete bytes in WAITING, repeated by the text that completes the
//!   character (`C3`, then `C3 B6 r l d`, as Rockchip's demo reads NORMAL
//!   texts: whole characters): the next text starts with the held-back bytes,
//!   so it replaces them;
//! - WAITING with `""` or NULL, then the whole character: nothing is held back.
//!
//! Held-back bytes that the next text neither continues nor repeats, and bytes
//! that are invalid anywhere, fit no convention: they are dropped (never shown
//! as U+FFFD) and counted in [`Utf8Assembler::take_dropped`], for the caller
//! to report loudly. Only a tail still incomplete when the reply ends becomes
//! U+FFFD ([`Utf8Assembler::finish`]): the reply really stopped inside a
//! character. It never panics on any input.

#[derive(Debug, Default)]
pub struct Utf8Assembler {
    /// Bytes held back: the start of a character not complete yet.
    pending: Vec<u8>,
    /// Every text pushed since bytes were first held back: a runtime that
    /// repeats (Rockchip's NORMAL text is its whole buffer since the last
    /// NORMAL) resends this, and not only the held-back bytes, when a token
    /// held whole characters before the split one (`h C3`, then `h C3 B6`).
    since: Vec<u8>,
    /// Bytes dropped since the last `take_dropped`.
    dropped: usize,
}

impl Utf8Assembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `bytes` and returns the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        if self.pending.is_empty() {
            // Fast path: most tokens are whole characters.
            if let Ok(text) = std::str::from_utf8(bytes) {
                return text.to_owned();
            }
        }
        let new = self.new_bytes(bytes);
        self.pending.extend_from_slice(new);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // SAFETY-free: `valid` was just checked by from_utf8.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // Invalid sequence: drop it (counted) and go on.
                        Some(len) => {
                            self.dropped += len;
                            rest = &after[len..];
                        }
                        // Incomplete at the end: wait for more bytes.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        if self.pending.is_empty() {
            self.since.clear();
        }
        out
    }

    /// What of `bytes` follows the held-back bytes (see the module's
    /// comment); records `bytes` in `since`.
    fn new_bytes<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        let new = if self.pending.is_empty() || bytes.first().is_none_or(|b| is_continuation(*b)) {
            // Nothing held back, or the bytes continue it. (A repeat starts
            // where a character starts: never with a continuation byte.)
            bytes
        } else if let Some(rest) =
            bytes.strip_prefix(self.since.as_slice()).or_else(|| bytes.strip_prefix(self.pending.as_slice()))
        {
            // Repeated: only what follows is new.
            self.since.clear();
            rest
        } else {
            // Neither continued nor repeated: they cannot become a character.
            self.dropped += self.pending.len();
            self.pending.clear();
            self.since.clear();
            bytes
        };
        self.since.extend_from_slice(bytes);
        new
    }

    /// Ends the stream: an incomplete tail can no longer complete, so it
    /// becomes one U+FFFD. Returns "" when nothing was pending.
    pub fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            self.since.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }

    /// Bytes held back because they may still complete a character.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Bytes dropped since the last call because they fit no convention
    /// (see the module's comment); 0 normally.
    pub fn take_dropped(&mut self) -> usize {
        std::mem::take(&mut self.dropped)
    }
}

/// A byte that can only continue a character (`10xxxxxx`).
fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_every_way(text: &str) {
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut a = Utf8Assembler::new();
            let mut out = a.push(&bytes[..cut]);
            out += &a.push(&bytes[cut..]);
            out += &a.finish();
            assert_eq!(out, text, "cut at {cut}");
        }
    }

    #[test]
    fn any_split_of_multibyte_text_is_lossless() {
        split_every_way("café 日本語 🚀👍🏽 done");
    }

    #[test]
    fn byte_by_byte_is_lossless() {
        let text = "Grüße, 世界! 🎉";
        let mut a = Utf8Assembler::new();
        let mut out = String::new();
        for b in text.as_bytes() {
            out += &a.push(std::slice::from_ref(b));
        }
        assert_eq!(a.pending_len(), 0);
        assert_eq!(out + &a.finish(), text);
    }

    #[test]
    fn incomplete_prefix_is_held_back_not_replaced() {
        let mut a = Utf8Assembler::new();
        assert_eq!(a.push(&"日".as_bytes()[..2]), "");
        assert_eq!(a.pending_len(), 2);
        assert_eq!(a.push(&"日".as_bytes()[2..]), "日");
    }

    #[test]
    fn invalid_bytes_are_dropped_and_counted_and_text_goes_on() {
        let mut a = Utf8Assembler::new();
        assert_eq!(a.push(b"a\xffb"), "ab");
        assert_eq!(a.take_dropped(), 1);
        // A held-back lead byte that the next text neither continues nor repeats.
        assert_eq!(a.push(b"\xe6"), "");
        assert_eq!(a.push(b"x"), "x");
        assert_eq!(a.take_dropped(), 1);
        // A continuation byte with nothing before it.
        assert_eq!(a.push(b"\xb6y"), "y");
        assert_eq!(a.take_dropped(), 1);
        assert_eq!(a.take_dropped(), 0);
    }

    /// Every token of `text` as the runtime might deliver it under each
    /// convention: (bytes, whether the token ends inside a character).
    fn tokens(text: &str, per_token: usize) -> Vec<(&[u8], bool)> {
        let bytes = text.as_bytes();
        let ends: Vec<usize> = (per_token..bytes.len()).step_by(per_token).chain([bytes.len()]).collect();
        let mut start = 0;
        ends.iter()
            .map(|&end| {
                let token = (&bytes[start..end], !text.is_char_boundary(end));
                start = end;
                token
            })
            .collect()
    }

    /// Feeds `text` split every `per_token` bytes, each token's callback text
    /// made by `deliver(all bytes, token start, token end, shown until,
    /// inside a character)`; returns the assembled text and bytes dropped.
    fn assemble(
        text: &str,
        per_token: usize,
        deliver: impl Fn(&[u8], usize, usize, usize, bool) -> Vec<u8>,
    ) -> (String, usize) {
        let mut a = Utf8Assembler::new();
        let (mut out, mut start, mut shown) = (String::new(), 0, 0);
        for (token, inside) in tokens(text, per_token) {
            let end = start + token.len();
            out += &a.push(&deliver(text.as_bytes(), start, end, shown, inside));
            if !inside {
                shown = end;
            }
            start = end;
        }
        out += &a.finish();
        (out, a.take_dropped())
    }

    const SPLIT: &str = "héllo wörld 你好 🙂 naïve 🚀👍🏽 end";

    #[test]
    fn every_convention_gives_the_exact_text() {
        for per_token in 1..=5 {
            // WAITING with its own bytes, or every byte as NORMAL.
            let own = assemble(SPLIT, per_token, |all, start, end, _, _| all[start..end].to_vec());
            // WAITING with the bytes since the last NORMAL; the completing
            // NORMAL text repeats them (whole characters).
            let repeat = assemble(SPLIT, per_token, |all, _, end, shown, _| all[shown..end].to_vec());
            // WAITING with its own bytes; the completing NORMAL text repeats
            // every byte since the last NORMAL.
            let own_then_repeat = assemble(SPLIT, per_token, |all, start, end, shown, inside| {
                all[if inside { start } else { shown }..end].to_vec()
            });
            // WAITING "" (or NULL: no bytes), then the whole characters.
            let empty = assemble(
                SPLIT,
                per_token,
                |all, _, end, shown, inside| {
                    if inside {
                        Vec::new()
                    } else {
                        all[shown..end].to_vec()
                    }
                },
            );
            let cases =
                [("own bytes", own), ("repeated", repeat), ("own, then repeated", own_then_repeat), ("empty", empty)];
            for (name, got) in cases {
                assert_eq!(got, (SPLIT.to_owned(), 0), "{name}, {per_token} bytes per token");
            }
        }
    }

    #[test]
    fn a_repeated_prefix_then_its_rest_is_one_character() {
        let mut a = Utf8Assembler::new();
        assert_eq!(a.push(b"w\xc3"), "w");
        assert_eq!(a.push("örld".as_bytes()), "örld");
        // Repeated and grown over several WAITING texts.
        assert_eq!(a.push(b"\xf0"), "");
        assert_eq!(a.push(b"\xf0\x9f"), "");
        assert_eq!(a.push(b"\xf0\x9f\x99"), "");
        assert_eq!(a.push("🙂!".as_bytes()), "🙂!");
        // Whole characters before the split one, repeated with it.
        assert_eq!(a.push(b"h\xc3"), "h");
        assert_eq!(a.push("hé!".as_bytes()), "é!");
        assert_eq!(a.take_dropped(), 0);
    }

    /// A token that ends one character and starts the next, twice (`你你`
    /// as `E4`, `BD A0 E4`, `BD A0 E4`…): continuation bytes continue, even
    /// when they look like the held-back text again.
    #[test]
    fn continuation_bytes_are_never_taken_for_a_repeat() {
        let text = "你你你";
        let b = text.as_bytes();
        let mut a = Utf8Assembler::new();
        let mut out = a.push(&b[..1]);
        for chunk in [&b[1..4], &b[4..7], &b[7..]] {
            out += &a.push(chunk);
        }
        assert_eq!((out, a.take_dropped()), (text.to_owned(), 0));
    }

    #[test]
    fn a_tail_that_never_completes_is_one_replacement_at_finish() {
        let mut a = Utf8Assembler::new();
        assert_eq!(a.push(&"🚀".as_bytes()[..3]), "");
        assert_eq!(a.finish(), "\u{FFFD}");
        assert_eq!(a.finish(), "");
    }
}
