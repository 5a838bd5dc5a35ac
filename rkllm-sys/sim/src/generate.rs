//! What the simulated model says: a deterministic reply, as the pieces the
//! result callback delivers.

use crate::tokenize;
use rkllm_sys::SamplingParams;
use std::ffi::CString;

/// One result callback's worth of a reply.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    pub text: CString,
    pub token_id: i32,
    /// Delivered with state WAITING: its bytes end inside a character.
    pub waiting: bool,
}

/// Token ids are reported in the range of Qwen2.5's vocabulary.
const VOCAB_SIZE: u64 = 151_936;

/// Generated text is drawn from these; the non-ASCII ones exercise UTF-8
/// reassembly (each is delivered as a WAITING and a NORMAL piece).
const WORDS: [&str; 40] = [
    " The",
    " model",
    " runs",
    " on",
    " an",
    " NPU",
    " with",
    " three",
    " cores",
    " and",
    " it",
    " answers",
    " quickly",
    " because",
    " the",
    " prompt",
    " is",
    " short",
    " data",
    " flows",
    " through",
    " each",
    " layer",
    " of",
    " weights",
    ".",
    ",",
    "!",
    "?",
    ":",
    "\n",
    " 42",
    " café",
    " naïve",
    " 日本",
    " 语言",
    " 🚀",
    " 👍🏽",
    " über",
    " señor",
];

/// Default reply length (generated tokens) is drawn from this range.
const DEFAULT_REPLY: std::ops::RangeInclusive<u64> = 16..=48;

/// FNV-1a, 64 bit.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // Zero is xorshift's fixed point.
        Rng(if seed == 0 { 0x9e37_79b9_7f4a_7c15 } else { seed })
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Appends `token` as one NORMAL piece, or, if it contains a multi-byte
/// character, as a WAITING piece cut one byte into that character and a
/// NORMAL piece with the rest.
fn push_token(token: &str, pieces: &mut Vec<Piece>) {
    let bytes: Vec<u8> = token.bytes().filter(|b| *b != 0).collect();
    let parts = match bytes.iter().position(|b| !b.is_ascii()) {
        Some(lead) => vec![(bytes[..=lead].to_vec(), true), (bytes[lead + 1..].to_vec(), false)],
        None => vec![(bytes, false)],
    };
    for (part, waiting) in parts {
        let token_id = (fnv1a(&part) % VOCAB_SIZE) as i32;
        // NUL bytes were filtered out above.
        let text = CString::new(part).unwrap_or_default();
        pieces.push(Piece { text, token_id, waiting });
    }
}

/// Appends generated words until `pieces` holds `len` pieces. A word that
/// would need two pieces where only one is left is replaced by an ASCII one.
fn generate(rng: &mut Rng, len: usize, pieces: &mut Vec<Piece>) {
    let ascii: Vec<&str> = WORDS.iter().copied().filter(|w| w.is_ascii()).collect();
    while pieces.len() < len {
        let mut word = WORDS[rng.below(WORDS.len() as u64) as usize];
        if !word.is_ascii() && pieces.len() + 2 > len {
            word = ascii[rng.below(ascii.len() as u64) as usize];
        }
        push_token(word, pieces);
    }
}

/// Everything that decides a reply.
pub(crate) struct ReplySpec<'a> {
    pub prompt: &'a str,
    pub seed: u64,
    pub sampling: SamplingParams,
    /// Fixed reply length in generated tokens (else drawn from 16..=48).
    pub reply_tokens: Option<usize>,
    /// Scripted reply text, tokenized with [`tokenize`].
    pub scripted: Option<&'a str>,
    /// Keep generating past the reply's end up to `limit` (`ignore_eos_token`).
    pub ignore_eos: bool,
    /// At most this many pieces (`max_new_tokens`, context room).
    pub limit: usize,
}

/// The reply's pieces, and whether `limit` cut it short.
pub(crate) fn reply(spec: &ReplySpec) -> (Vec<Piece>, bool) {
    let mut rng = Rng::new(fnv1a(spec.prompt.as_bytes()) ^ spec.seed ^ sampling_salt(&spec.sampling));
    let mut pieces = Vec::new();
    match spec.scripted {
        Some(text) => tokenize(text).into_iter().for_each(|t| push_token(t, &mut pieces)),
        None => {
            let len = spec.reply_tokens.unwrap_or_else(|| {
                (DEFAULT_REPLY.start() + rng.below(DEFAULT_REPLY.end() - DEFAULT_REPLY.start() + 1)) as usize
            });
            // One piece past the limit is enough to know it cut the reply.
            generate(&mut rng, len.min(spec.limit.saturating_add(1)), &mut pieces);
        }
    }
    if spec.ignore_eos {
        generate(&mut rng, spec.limit, &mut pieces);
    }
    let truncated = pieces.len() > spec.limit;
    pieces.truncate(spec.limit);
    (pieces, truncated)
}

/// Greedy decoding (top_k 1 or temperature 0, the RKLLM default) depends on
/// the prompt and seed only; other sampling settings change the reply, the
/// same way every time.
fn sampling_salt(s: &SamplingParams) -> u64 {
    if s.top_k == 1 || s.temperature <= 0.0 {
        return 0;
    }
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&s.top_k.to_le_bytes());
    bytes.extend_from_slice(&s.top_p.to_le_bytes());
    bytes.extend_from_slice(&s.temperature.to_le_bytes());
    fnv1a(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prompt: &str) -> ReplySpec<'_> {
        ReplySpec {
            prompt,
            seed: 0,
            sampling: SamplingParams::RKLLM_DEFAULTS,
            reply_tokens: None,
            scripted: None,
            ignore_eos: false,
            limit: 10_000,
        }
    }

    #[test]
    fn fixed_length_counts_pieces() {
        for n in 0..60 {
            let (pieces, cut) = reply(&ReplySpec { reply_tokens: Some(n), ..spec("x") });
            assert_eq!((pieces.len(), cut), (n, false));
        }
    }

    #[test]
    fn multibyte_tokens_split_inside_a_character() {
        let mut pieces = Vec::new();
        push_token(" 日本", &mut pieces);
        let bytes: Vec<&[u8]> = pieces.iter().map(|p| p.text.as_bytes()).collect();
        assert_eq!(bytes, [&b" \xe6"[..], &"日本".as_bytes()[1..]]);
        assert!(pieces[0].waiting && !pieces[1].waiting);
    }

    #[test]
    fn limit_truncates_and_ignore_eos_fills() {
        let (pieces, cut) = reply(&ReplySpec { reply_tokens: Some(20), limit: 5, ..spec("x") });
        assert_eq!((pieces.len(), cut), (5, true));
        let (pieces, _) = reply(&ReplySpec { reply_tokens: Some(2), ignore_eos: true, limit: 30, ..spec("x") });
        assert_eq!(pieces.len(), 30);
    }
}
