//! The simulated model's vocabulary, built in code: a byte-level BPE run by
//! Hugging Face `tokenizers`, like the ones real models ship in
//! `tokenizer.json`, but small enough to read.
//!
//! * ids 0–255: one token per byte (id = byte value), so every text is
//!   encodable and a character outside the vocabulary becomes one token per
//!   UTF-8 byte (no merge joins non-ASCII bytes, so such a character is
//!   always split over several tokens, the way rare characters are on a
//!   real model);
//! * then the words of `words.txt` in four forms (`word`, `Word`, ` word`,
//!   ` Word`), two-digit numbers and common punctuation runs, each reachable
//!   by a chain of merges (prefix + next byte), so a word outside the list
//!   still merges into known prefixes;
//! * last, the special tokens [`SPECIAL_TOKENS`].
//!
//! The model sets `ignore_merges`: a pre-token (GPT-2's split: a word with
//! its leading space, a number, a punctuation run) that is in the
//! vocabulary is one token, whatever the merges would do. English prose
//! averages about 4 characters per token.

use std::collections::HashMap;
use tokenizers::models::bpe;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

/// Added special tokens, after the merged tokens: ChatML's markers (the
/// simulator's built-in template) and the end-of-text token.
pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

const WORDS: &str = include_str!("words.txt");

/// Punctuation and whitespace runs that GPT-2's pre-tokenizer keeps whole.
const SYMBOLS: [&str; 27] = [
    ".\n", ".\n\n", "\n\n", "  ", "   ", "    ", "...", "**", "```", "\",", "\")", "();", "{\"", "\":", " \"", "\"}",
    "\"\n", " (", "),", ").", " -", "://", "'s", "'t", "'re", "'ll", "?\n",
];

/// The vocabulary: every token's bytes, and the merges that build them.
pub(crate) struct Vocab {
    /// Token id → bytes; the special tokens last.
    pub tokens: Vec<Vec<u8>>,
    /// How many of `tokens` belong to the BPE model (the rest are special).
    pub model_len: usize,
    merges: Vec<(u32, u32)>,
}

/// GPT-2's byte-level alphabet: each byte as a printable character
/// (printable Latin-1 bytes stand for themselves, the others are moved
/// to U+0100 and up in byte order).
pub(crate) fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 33..=126 | 161..=172 | 174..=255);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|x| !printable(*x)).count() as u32;
    char::from_u32(256 + rank).unwrap_or('?')
}

/// Token bytes in the byte-level alphabet, as `tokenizer.json` spells them.
fn byte_level(alphabet: &[char], bytes: &[u8]) -> String {
    bytes.iter().map(|b| alphabet[usize::from(*b)]).collect()
}

/// The word list, most common first.
fn words() -> impl Iterator<Item = &'static str> {
    WORDS.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Every piece the vocabulary merges into one token: the words in their
/// four forms, two-digit numbers, punctuation runs.
fn pieces() -> Vec<String> {
    let mut pieces = Vec::new();
    for word in words() {
        let mut chars = word.chars();
        let capital: String = chars.next().map(|c| c.to_ascii_uppercase()).into_iter().chain(chars).collect();
        for form in [word.to_owned(), capital] {
            pieces.push(format!(" {form}"));
            pieces.push(form);
        }
    }
    for n in 0..100 {
        pieces.push(format!("{n:02}"));
        pieces.push(format!(" {n}"));
    }
    pieces.extend(SYMBOLS.iter().map(|s| (*s).to_owned()));
    pieces
}

impl Vocab {
    pub fn build() -> Vocab {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let mut ids: HashMap<Vec<u8>, u32> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let mut merges = Vec::new();
        for piece in pieces() {
            let bytes = piece.as_bytes();
            for end in 2..=bytes.len() {
                if ids.contains_key(&bytes[..end]) {
                    continue;
                }
                // Both halves exist: the prefix was added one step earlier.
                let (left, right) = (ids[&bytes[..end - 1]], u32::from(bytes[end - 1]));
                merges.push((left, right));
                ids.insert(bytes[..end].to_vec(), tokens.len() as u32);
                tokens.push(bytes[..end].to_vec());
            }
        }
        let model_len = tokens.len();
        tokens.extend(SPECIAL_TOKENS.iter().map(|t| t.as_bytes().to_vec()));
        Vocab { tokens, model_len, merges }
    }

    /// The tokenizer, built directly rather than parsed from a
    /// `tokenizer.json` text: `tokenizers` reads a model through a JSON tree
    /// of the whole model (an untagged enum), a peak of several MiB in a
    /// process whose own memory is measured (docs/performance.md, "Memory:
    /// the level-1 footprint"). Its text, when asked for, is `tokenizers`'
    /// own serialisation of it (`tokenizer_json`).
    pub fn to_tokenizer(&self) -> Tokenizer {
        let alphabet: Vec<char> = (0..=255u8).map(byte_char).collect();
        let byte_level = |bytes: &[u8]| byte_level(&alphabet, bytes);
        let vocab: bpe::Vocab =
            self.tokens[..self.model_len].iter().enumerate().map(|(id, t)| (byte_level(t), id as u32)).collect();
        let merges: bpe::Merges = self
            .merges
            .iter()
            .map(|(l, r)| (byte_level(&self.tokens[*l as usize]), byte_level(&self.tokens[*r as usize])))
            .collect();
        // Built from constants: a failure here is a bug in `vocab`, caught by every test that tokenizes.
        let model = bpe::BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(true)
            .build()
            .unwrap_or_else(|e| panic!("the simulator's BPE does not build: {e}"));
        let mut tokenizer = Tokenizer::new(model);
        // add_prefix_space, trim_offsets, use_regex: GPT-2's split, no prefix space.
        tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, false, true)));
        tokenizer.with_decoder(Some(ByteLevel::new(false, false, true)));
        let special: Vec<AddedToken> = SPECIAL_TOKENS.iter().map(|t| AddedToken::from(*t, true)).collect();
        tokenizer.add_special_tokens(&special);
        tokenizer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_alphabet_is_gpt2s() {
        assert_eq!(byte_char(b'a'), 'a');
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(0xAD), 'Ń');
        let all: std::collections::HashSet<char> = (0..=255u8).map(byte_char).collect();
        assert_eq!(all.len(), 256, "one character per byte");
    }
}
