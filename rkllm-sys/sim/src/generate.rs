//! What the simulated model says: a deterministic reply, as the pieces the
//! result callback delivers.

use crate::{token_bytes, token_ids};
use rkllm_sys::SamplingParams;
use std::ffi::CString;

/// One result callback's worth of a reply.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    /// The callback's `text` (`None`: NULL).
    pub text: Option<CString>,
    pub token_id: i32,
    /// Delivered with state WAITING: its bytes end inside a character.
    pub waiting: bool,
}

/// How a character split over tokens is delivered (`split_chars`): which of
/// the runtime conventions the manual leaves open is simulated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum SplitChars {
    /// WAITING carries the token's own bytes, the next text the rest.
    #[default]
    Bytes,
    /// WAITING carries the bytes since the last whole character, and the
    /// text that completes it repeats them: NORMAL texts are whole
    /// characters, as Rockchip's demo decodes them.
    Repeat,
    /// WAITING carries `""`; the completing NORMAL text the whole characters.
    Empty,
    /// WAITING carries NULL; the completing NORMAL text the whole characters.
    Null,
    /// No WAITING: every token's own bytes as NORMAL.
    Raw,
    /// A fault: WAITING carries NULL and the completing text only its own
    /// bytes, so a split character's first bytes are never delivered.
    Lost,
}

impl SplitChars {
    pub(crate) fn parse(value: &str) -> Option<SplitChars> {
        Some(match value {
            "bytes" => SplitChars::Bytes,
            "repeat" => SplitChars::Repeat,
            "empty" => SplitChars::Empty,
            "null" => SplitChars::Null,
            "raw" => SplitChars::Raw,
            "lost" => SplitChars::Lost,
            _ => return None,
        })
    }
}

/// Every reply starts with one of these, so nobody mistakes it for a model's.
const OPENINGS: [&str; 4] = [
    "Simulated reply: no model computed this text.",
    "Simulated reply: the NPU behind this answer is imaginary.",
    "Simulated reply: this answer was made up on purpose.",
    "Simulated reply: every sentence here comes from a short list.",
];

/// The rest of a reply is drawn from these. The non-ASCII words exercise
/// UTF-8 reassembly: their characters are outside the vocabulary, so each
/// is delivered over several tokens (WAITING, then NORMAL).
const SENTENCES: [&str; 20] = [
    "The simulator reads your prompt and picks a few sentences from a fixed list.",
    "Each token arrives at the pace of the chosen profile.",
    "A naïve café owner in 東京 would serve this reply with coffee.",
    "Señor García checks the logs every morning.",
    "The daemon streams every token as soon as the callback delivers it.",
    "This sentence mentions 日本語 to test how characters are split.",
    "Results look plausible, but no weights were used 🙂.",
    "Why is the sky blue? Light with shorter wavelengths is scattered more.",
    "Once upon a time, a tiny robot learned to count to ten.",
    "The word über is German for over.",
    "The same prompt and seed always give the same reply.",
    "Tests can check the text because it never changes.",
    "A résumé written in Zürich has two accents.",
    "Paris is the capital of France, and Tokyo is the capital of 日本.",
    "Memory use is read from the process, not from the profile.",
    "The kitchen was quiet, so the robot wrote notes about the weather.",
    "Ten seconds later, the answer was ready.",
    "Ask again with another seed to get a different reply.",
    "The café on the corner opens at seven.",
    "Numbers like 42 and 2026 are tokens too.",
];

/// Default reply length (generated tokens) is drawn from this range; the
/// reply then ends with the sentence that reaches it.
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

/// Sentences after `text` until it has at least `len` tokens; its ids.
fn grow(rng: &mut Rng, text: &mut String, len: usize) -> Vec<u32> {
    let mut ids = token_ids(text);
    while ids.len() < len {
        let drawn = rng.below(SENTENCES.len() as u64) as usize;
        text.push(' ');
        text.push_str(SENTENCES[drawn]);
        ids.extend_from_slice(&sentence_ids()[drawn]);
    }
    ids
}

/// Each sentence's ids after a space. The pre-tokenizer splits at the space
/// before a sentence, so a text's ids are its ids before the sentence and
/// these (`a_sentence_adds_its_own_ids` checks it after every text a reply
/// can hold there): tokenizing the reply as it grew — the BPE's regex, the
/// simulator's largest cost — showed as CPU per token in the daemon's
/// process (docs/performance.md, "What grew per token").
fn sentence_ids() -> &'static [Vec<u32>; SENTENCES.len()] {
    static IDS: std::sync::OnceLock<[Vec<u32>; SENTENCES.len()]> = std::sync::OnceLock::new();
    IDS.get_or_init(|| SENTENCES.map(|sentence| token_ids(&format!(" {sentence}"))))
}

/// Whether `bytes` ends inside a UTF-8 character.
fn ends_inside_a_character(bytes: &[u8]) -> bool {
    matches!(std::str::from_utf8(bytes), Err(e) if e.error_len().is_none())
}

/// Cuts `ids` to `len` tokens. A reply that ends there (EOS) ends on a
/// whole character: the tokens of a cut character become full stops.
fn cut_at_eos(mut ids: Vec<u32>, len: usize) -> Vec<u32> {
    ids.truncate(len);
    let mut replaced = 0;
    while ends_inside_a_character(&ids.iter().filter_map(|id| token_bytes(*id)).flatten().copied().collect::<Vec<_>>())
    {
        ids.pop();
        replaced += 1;
    }
    ids.extend(std::iter::repeat_n(u32::from(b'.'), replaced));
    ids
}

/// One piece per token; a token whose bytes end inside a character (of the
/// whole reply, before any cut) is WAITING, its text as `split` says.
fn pieces(ids: &[u32], limit: usize, split: SplitChars) -> Vec<Piece> {
    let bytes: Vec<&[u8]> = ids.iter().map(|id| token_bytes(*id).unwrap_or_default()).collect();
    let all = bytes.concat();
    // `shown`: where the text delivered as whole characters ends.
    let (mut start, mut shown) = (0, 0);
    bytes
        .iter()
        .zip(ids)
        .take(limit)
        .map(|(b, id)| {
            let end = start + b.len();
            let inside = all.get(end).is_some_and(|next| next & 0xC0 == 0x80);
            let text = match (split, inside) {
                (SplitChars::Bytes | SplitChars::Raw, _) | (SplitChars::Lost, false) => Some(&all[start..end]),
                (SplitChars::Empty, true) => Some(&[][..]),
                (SplitChars::Null | SplitChars::Lost, true) => None,
                (SplitChars::Repeat, _) | (SplitChars::Empty | SplitChars::Null, false) => Some(&all[shown..end]),
            };
            start = end;
            if !inside {
                shown = end;
            }
            Piece {
                // A NUL byte (only from a script) cannot be in a C string.
                text: text.map(|t| CString::new(t).unwrap_or_default()),
                token_id: *id as i32,
                waiting: inside && split != SplitChars::Raw,
            }
        })
        .collect()
}

/// Everything that decides a reply.
pub(crate) struct ReplySpec<'a> {
    pub prompt: &'a str,
    pub seed: u64,
    pub sampling: SamplingParams,
    /// Fixed reply length in generated tokens (else drawn from 16..=48 and
    /// grown to the end of the sentence that reaches it).
    pub reply_tokens: Option<usize>,
    /// Scripted reply text, tokenized with [`tokenize`].
    pub scripted: Option<&'a str>,
    /// Keep generating past the reply's end up to `limit` (`ignore_eos_token`).
    pub ignore_eos: bool,
    /// At most this many pieces (`max_new_tokens`, context room).
    pub limit: usize,
    pub split: SplitChars,
}

/// The reply's pieces, and whether `limit` cut it short.
pub(crate) fn reply(spec: &ReplySpec) -> (Vec<Piece>, bool) {
    let mut rng = Rng::new(fnv1a(spec.prompt.as_bytes()) ^ spec.seed ^ sampling_salt(&spec.sampling));
    let mut text = match spec.scripted {
        Some(text) => text.to_owned(),
        None => OPENINGS[rng.below(OPENINGS.len() as u64) as usize].to_owned(),
    };
    let mut ids = match (spec.scripted, spec.reply_tokens) {
        (Some(_), _) => token_ids(&text),
        (None, Some(len)) => cut_at_eos(grow(&mut rng, &mut text, len), len),
        (None, None) => {
            let span = DEFAULT_REPLY.end() - DEFAULT_REPLY.start() + 1;
            let len = (DEFAULT_REPLY.start() + rng.below(span)) as usize;
            grow(&mut rng, &mut text, len)
        }
    };
    if spec.ignore_eos && ids.len() < spec.limit {
        // Past its end the model goes on talking, in more sentences.
        let more = grow(&mut rng, &mut String::new(), spec.limit - ids.len());
        ids.extend(more);
    }
    // Past its own end, only the limit ends a reply.
    let truncated = spec.ignore_eos || ids.len() > spec.limit;
    (pieces(&ids, spec.limit, spec.split), truncated)
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
            split: SplitChars::Bytes,
        }
    }

    #[test]
    fn fixed_length_counts_pieces_and_ends_on_a_whole_character() {
        for n in 0..60 {
            let (pieces, cut) = reply(&ReplySpec { reply_tokens: Some(n), ..spec("x") });
            assert_eq!((pieces.len(), cut), (n, false));
            assert!(pieces.last().is_none_or(|p| !p.waiting), "{n} tokens end inside a character");
        }
    }

    #[test]
    fn replies_say_they_are_simulated_and_decode_from_their_ids() {
        let (pieces, _) = reply(&spec("Hello"));
        let bytes: Vec<u8> =
            pieces.iter().flat_map(|p| p.text.as_deref().unwrap_or_default().to_bytes().to_vec()).collect();
        let text = String::from_utf8(bytes).expect("a whole reply is UTF-8");
        assert!(text.starts_with("Simulated reply: "), "{text}");
        assert!(text.ends_with('.') || text.ends_with('?'), "ends with a sentence: {text}");
        assert!((16..=80).contains(&pieces.len()), "{} tokens", pieces.len());
        let ids: Vec<u32> = pieces.iter().map(|p| p.token_id as u32).collect();
        assert_eq!(crate::tokenizer::decode(&ids), text);
    }

    #[test]
    fn multibyte_characters_split_over_waiting_and_normal() {
        let (pieces, _) = reply(&ReplySpec { scripted: Some("café 日本"), ..spec("x") });
        let waiting: Vec<bool> = pieces.iter().map(|p| p.waiting).collect();
        let texts: Vec<&[u8]> = pieces.iter().map(|p| p.text.as_deref().unwrap_or_default().to_bytes()).collect();
        assert_eq!(texts.concat(), "café 日本".as_bytes());
        // é = 2 bytes, 日 and 本 = 3 bytes: one token each byte, the last NORMAL.
        assert_eq!(waiting.iter().filter(|w| **w).count(), 1 + 2 + 2);
        assert!(!waiting.last().unwrap());
    }

    /// The texts of "é日" (one token per byte) under each convention.
    #[test]
    fn each_split_convention_delivers_its_texts() {
        let texts = |split| {
            let (pieces, _) = reply(&ReplySpec { scripted: Some("é日"), split, ..spec("x") });
            pieces.iter().map(|p| (p.text.as_deref().map(|t| t.to_bytes().to_vec()), p.waiting)).collect::<Vec<_>>()
        };
        let (e, r) = ("é".as_bytes(), "日".as_bytes());
        let some = |b: &[u8], waiting| (Some(b.to_vec()), waiting);
        assert_eq!(
            texts(SplitChars::Repeat),
            [some(&e[..1], true), some(e, false), some(&r[..1], true), some(&r[..2], true), some(r, false)]
        );
        assert_eq!(
            texts(SplitChars::Empty),
            [some(b"", true), some(e, false), some(b"", true), some(b"", true), some(r, false)]
        );
        assert_eq!(texts(SplitChars::Null), [(None, true), some(e, false), (None, true), (None, true), some(r, false)]);
        let raw = texts(SplitChars::Raw);
        assert!(raw.iter().all(|(_, waiting)| !waiting));
        assert_eq!(raw.iter().filter_map(|(t, _)| t.clone()).collect::<Vec<_>>().concat(), "é日".as_bytes());
    }

    #[test]
    fn limit_truncates_and_ignore_eos_fills() {
        let (pieces, cut) = reply(&ReplySpec { reply_tokens: Some(20), limit: 5, ..spec("x") });
        assert_eq!((pieces.len(), cut), (5, true));
        let (pieces, _) = reply(&ReplySpec { reply_tokens: Some(2), ignore_eos: true, limit: 30, ..spec("x") });
        assert_eq!(pieces.len(), 30);
    }

    #[test]
    fn a_sentence_adds_its_own_ids() {
        let before = OPENINGS.iter().chain(SENTENCES.iter()).copied().chain([""]);
        for text in before {
            for (sentence, ids) in SENTENCES.iter().zip(sentence_ids()) {
                let whole = token_ids(&format!("{text} {sentence}"));
                assert_eq!(whole, [token_ids(text), ids.clone()].concat(), "{text:?} then {sentence:?}");
            }
        }
    }

    #[test]
    fn grow_adds_the_fewest_sentences_that_reach_the_length() {
        for (seed, len) in [(1, 5), (2, 40), (3, 300), (4, 2000)] {
            let mut text = "Simulated reply:".to_owned();
            let ids = grow(&mut Rng::new(seed), &mut text, len);
            assert_eq!(ids, token_ids(&text), "the ids are the whole text's");
            assert!(ids.len() >= len, "{} < {len}", ids.len());
            // One sentence fewer would not have been enough.
            let last = SENTENCES.iter().filter(|s| text.ends_with(&format!(" {s}"))).map(|s| s.len() + 1).max();
            let without_last = &text[..text.len() - last.expect("the text ends with a sentence")];
            assert!(token_ids(without_last).len() < len, "seed {seed}: one sentence too many");
        }
    }
}
