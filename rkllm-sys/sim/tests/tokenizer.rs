//! The sim tokenizer and the token counts the crate docs promise.

use rkllm_sim::{tokenize, DEFAULT_POSTFIX, DEFAULT_PREFIX, DEFAULT_SYSTEM};

#[test]
fn documented_examples() {
    assert_eq!(tokenize("Hello, world!"), ["Hell", "o", ",", " ", "worl", "d", "!"]);
    assert_eq!(tokenize("café 日本"), ["caf", "é", " ", "日", "本"]);
    assert_eq!(tokenize("12345678 ok"), ["1234", "5678", " ", "ok"]);
    assert_eq!(tokenize("🚀👍🏽"), ["🚀", "👍", "🏽"]);
    assert_eq!(tokenize("<|im_end|>\n"), ["<", "|", "im", "_", "end", "|", ">", "\n"]);
    assert!(tokenize("").is_empty());
}

#[test]
fn tokens_concatenate_back_to_the_text() {
    for text in ["", "a", "abcde fghij", "Grüße, 世界! 🎉\n\tx_y-z", "👍🏽👍🏽 ok?"] {
        assert_eq!(tokenize(text).concat(), text);
    }
}

#[test]
fn built_in_template_sizes_match_the_docs() {
    assert_eq!(tokenize(DEFAULT_SYSTEM).len(), 32);
    assert_eq!(tokenize(DEFAULT_PREFIX).len(), 10);
    assert_eq!(tokenize(DEFAULT_POSTFIX).len(), 20);
    // The prefix ends and the postfix starts with punctuation, so a prompt's
    // tokens never merge with the template's: 62 + tokens(p) for a first
    // turn, 30 + tokens(p) for a follow-up.
    let prompt = "Why is the sky blue?";
    let turn = format!("{DEFAULT_PREFIX}{prompt}{DEFAULT_POSTFIX}");
    assert_eq!(tokenize(&turn).len(), 30 + tokenize(prompt).len());
}
