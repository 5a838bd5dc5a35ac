//! The simulated model's tokenizer: the byte-level BPE of `vocab`, run by
//! Hugging Face `tokenizers`, the one the `tokenizer.json` text that
//! [`tokenizer_json`] gives describes. An in-process daemon counts with the same
//! [`tokenizer`] (one copy in memory, not a second parse of the text), so
//! both count every text alike.

use crate::vocab::{Vocab, SPECIAL_TOKENS};
use std::sync::OnceLock;
use tokenizers::Tokenizer;

struct Loaded {
    tokenizer: Tokenizer,
    /// Token id → bytes.
    tokens: Vec<Vec<u8>>,
}

fn loaded() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        let vocab = Vocab::build();
        // Built, not parsed from its text: a daemon takes this one
        // ([`tokenizer`]), and whoever wants the text ([`tokenizer_json`])
        // asks for it now and then.
        let tokenizer = vocab.to_tokenizer();
        // The pre-tokenizer compiles its regex on first use: do it here, not
        // inside a run's time to first token.
        let _ = tokenizer.encode("warm up", false);
        Loaded { tokenizer, tokens: vocab.tokens }
    })
}

/// The simulated model's `tokenizer.json` (Hugging Face `tokenizers`
/// format): a byte-level BPE of common English words with ChatML's special
/// tokens. Counting a text with it gives the simulator's prompt token count,
/// and decoding the `token_id`s of a reply gives the reply's text. Written
/// by `tokenizers` from the tokenizer the simulator runs, on each call: only
/// tools and tests write it out.
pub fn tokenizer_json() -> String {
    // Serialising a tokenizer built from constants cannot fail but by a bug
    // in `vocab`, which every test that writes the file would catch.
    tokenizer().to_string(false).unwrap_or_else(|e| panic!("the simulator's tokenizer does not serialise: {e}"))
}

/// The tokenizer [`tokenizer_json`] describes, as the simulator runs it:
/// an in-process daemon counts its prompts with this one rather than
/// parsing the text again (a second vocabulary and BPE cache, ~2 MiB, and a
/// parse whose transient peak is several times the text).
pub fn tokenizer() -> &'static Tokenizer {
    &loaded().tokenizer
}

/// The ids of `text`, special tokens (`<|im_start|>`, …) matched in it.
///
/// ```
/// let ids = rkllm_sim::token_ids("Hello, world!");
/// assert_eq!(ids.len(), 4); // "Hello" "," " world" "!"
/// ```
pub fn token_ids(text: &str) -> Vec<u32> {
    // Encoding a &str with this tokenizer cannot fail (byte-level BPE with
    // all 256 bytes in the vocabulary); an empty list is the safe fallback.
    loaded().tokenizer.encode(text, false).map(|e| e.get_ids().to_vec()).unwrap_or_default()
}

/// The bytes of one token; `None` for an id outside the vocabulary.
pub fn token_bytes(id: u32) -> Option<&'static [u8]> {
    loaded().tokens.get(id as usize).map(Vec::as_slice)
}

/// Size of the vocabulary: valid ids are `0..vocab_size()`.
pub fn vocab_size() -> usize {
    loaded().tokens.len()
}

/// The end-of-sequence token of the built-in template, `<|im_end|>`.
pub fn eos_token_id() -> u32 {
    let special = vocab_size() - SPECIAL_TOKENS.len();
    special as u32 + SPECIAL_TOKENS.iter().position(|t| *t == "<|im_end|>").unwrap_or(0) as u32
}

/// Splits text into the simulator's tokens, as bytes (a character outside
/// the vocabulary spans several tokens, none of them valid UTF-8 alone).
/// Concatenating the tokens gives back the text; their number is the
/// prompt token count.
///
/// ```
/// use rkllm_sim::tokenize;
/// assert_eq!(tokenize("Why is the sky blue?"), [&b"Why"[..], b" is", b" the", b" sky", b" blue", b"?"]);
/// // é is two bytes, two tokens.
/// assert_eq!(tokenize("café").concat(), "café".as_bytes());
/// assert_eq!(tokenize("<|im_end|>\n").len(), 2);
/// assert!(tokenize("").is_empty());
/// ```
pub fn tokenize(text: &str) -> Vec<&'static [u8]> {
    token_ids(text).into_iter().filter_map(token_bytes).collect()
}

/// The text of `ids` (special tokens included), as `tokenizers` decodes it;
/// bytes that are not UTF-8 become U+FFFD.
pub(crate) fn decode(ids: &[u32]) -> String {
    loaded().tokenizer.decode(ids, false).unwrap_or_default()
}
