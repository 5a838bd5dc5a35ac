//! Reassembling UTF-8 text from the bytes of successive token callbacks.
//!
//! A multi-byte character can be split over several tokens: the runtime
//! delivers the first bytes with state WAITING and the rest with NORMAL. The
//! assembler keeps an incomplete tail until the next bytes arrive, emits
//! every complete character exactly once, and replaces only truly invalid
//! bytes with U+FFFD. It never panics on any input.

#[derive(Debug, Default)]
pub struct Utf8Assembler {
    pending: Vec<u8>,
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
        self.pending.extend_from_slice(bytes);
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
                        // Invalid sequence: replace it and go on.
                        Some(len) => {
                            out.push(char::REPLACEMENT_CHARACTER);
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
        out
    }

    /// Ends the stream: an incomplete tail can no longer complete, so it
    /// becomes one U+FFFD. Returns "" when nothing was pending.
    pub fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }

    /// Bytes held back because they may still complete a character.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
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
    fn invalid_bytes_become_one_replacement_each_and_text_goes_on() {
        let mut a = Utf8Assembler::new();
        assert_eq!(a.push(b"a\xffb"), "a\u{FFFD}b");
        // A lone continuation byte after a held-back lead byte.
        assert_eq!(a.push(b"\xe6"), "");
        assert_eq!(a.push(b"x"), "\u{FFFD}x");
    }

    #[test]
    fn a_tail_that_never_completes_is_one_replacement_at_finish() {
        let mut a = Utf8Assembler::new();
        assert_eq!(a.push(&"🚀".as_bytes()[..3]), "");
        assert_eq!(a.finish(), "\u{FFFD}");
        assert_eq!(a.finish(), "");
    }
}
