//! The simulated tokenizer: what the crate docs promise, and that the
//! `tokenizer.json` it hands the daemon counts and decodes exactly alike.

use rkllm_sim::{token_bytes, token_ids, tokenize, tokenizer_json, DEFAULT_POSTFIX, DEFAULT_PREFIX, DEFAULT_SYSTEM};
use tokenizers::Tokenizer;

const TEXTS: [&str; 8] = [
    "",
    "Hello!",
    "Why is the sky blue?",
    "Grüße, 世界! 🎉\n\tx_y-z 👍🏽👍🏽 ok?",
    "<|im_start|>user\nThe quick brown fox jumps over the lazy dog.<|im_end|>\n",
    "{\"city\": \"Paris\", \"unit\": \"celsius\"}\n\n    indented   spaces",
    "In 1905, Albert Einstein published four groundbreaking papers on physics.",
    "\u{0}nul\u{7f}del and \r\n line ends",
];

fn daemon_tokenizer() -> Tokenizer {
    tokenizer_json().parse().expect("the daemon loads the tokenizer.json")
}

#[test]
fn the_daemon_counts_every_text_like_the_simulator_and_decodes_its_ids() {
    let daemon = daemon_tokenizer();
    for text in TEXTS {
        let encoding = daemon.encode(text, false).expect("encodes");
        assert_eq!(encoding.get_ids(), token_ids(text), "{text:?}");
        assert_eq!(encoding.len(), tokenize(text).len(), "{text:?}");
        assert_eq!(daemon.decode(encoding.get_ids(), false).unwrap(), text, "{text:?}");
    }
}

#[test]
fn tokens_concatenate_back_to_the_text() {
    for text in TEXTS {
        assert_eq!(tokenize(text).concat(), text.as_bytes());
        let ids = token_ids(text);
        let bytes: Vec<u8> = ids.iter().flat_map(|id| token_bytes(*id).expect("a known id")).copied().collect();
        assert_eq!(bytes, text.as_bytes());
    }
    assert_eq!(token_bytes(rkllm_sim::vocab_size() as u32), None);
}

#[test]
fn common_english_averages_about_four_characters_per_token() {
    let prose = "The weather is warm today, so we will walk to the river after lunch. \
                 Please tell me why the sky is blue and how light is scattered by the air. \
                 My friend said that the new model answers questions very quickly.";
    let ratio = prose.chars().count() as f64 / tokenize(prose).len() as f64;
    assert!((3.5..=5.5).contains(&ratio), "{ratio:.2} characters per token");
    assert_eq!(tokenize("Hello!").len(), 2);
    assert_eq!(
        tokenize("Why is the sky blue?"),
        [&b"Why"[..], b" is", b" the", b" sky", b" blue", b"?"],
        "a common word is one token with its leading space"
    );
}

#[test]
fn characters_outside_the_vocabulary_are_one_token_per_byte() {
    assert_eq!(tokenize("日").len(), 3);
    assert_eq!(tokenize("👍🏽").len(), 8);
    assert!(tokenize("é").iter().all(|t| std::str::from_utf8(t).is_err()));
}

#[test]
fn the_chat_markers_are_single_special_tokens_and_never_merge_with_a_prompt() {
    assert_eq!(tokenize("<|im_start|>").len(), 1);
    assert_eq!(tokenize("<|im_end|>").len(), 1);
    assert_eq!(rkllm_sim::eos_token_id(), token_ids("<|im_end|>")[0]);
    // The prefix ends and the postfix starts with a marker or a newline, so a
    // prompt's tokens never merge with the template's.
    for prompt in ["Why is the sky blue?", "Hello!", "é"] {
        let turn = format!("{DEFAULT_PREFIX}{prompt}{DEFAULT_POSTFIX}");
        let parts = tokenize(DEFAULT_PREFIX).len() + tokenize(prompt).len() + tokenize(DEFAULT_POSTFIX).len();
        assert_eq!(tokenize(&turn).len(), parts, "{prompt:?}");
    }
    // The sizes lib.rs documents.
    assert_eq!([DEFAULT_SYSTEM, DEFAULT_PREFIX, DEFAULT_POSTFIX].map(|t| tokenize(t).len()), [11, 3, 5]);
}
