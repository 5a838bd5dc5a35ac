//! The simulator's tokenizer: simple enough to count tokens by hand.

/// Longest run of ASCII letters and digits that forms one token.
const MAX_WORD_PIECE: usize = 4;

/// Splits text into the simulator's tokens. A token is either
/// * a run of 1 to 4 ASCII letters or digits (a longer run is cut every 4), or
/// * one other character: a space, a punctuation mark, a newline, or one
///   non-ASCII character (whatever its UTF-8 length).
///
/// Concatenating the tokens gives back the text.
///
/// ```
/// use rkllm_sim::tokenize;
/// assert_eq!(tokenize("Hello, world!"), ["Hell", "o", ",", " ", "worl", "d", "!"]);
/// assert_eq!(tokenize("café 日本"), ["caf", "é", " ", "日", "本"]);
/// assert_eq!(tokenize("12345678 ok"), ["1234", "5678", " ", "ok"]);
/// // 👍🏽 is two characters (thumbs up, skin tone).
/// assert_eq!(tokenize("🚀👍🏽"), ["🚀", "👍", "🏽"]);
/// assert_eq!(tokenize("<|im_end|>\n"), ["<", "|", "im", "_", "end", "|", ">", "\n"]);
/// assert!(tokenize("").is_empty());
/// ```
pub fn tokenize(text: &str) -> Vec<&str> {
    let mut tokens = Vec::new();
    let mut rest = text;
    while let Some(first) = rest.chars().next() {
        let len = if first.is_ascii_alphanumeric() {
            rest.bytes().take(MAX_WORD_PIECE).take_while(u8::is_ascii_alphanumeric).count()
        } else {
            first.len_utf8()
        };
        let (token, tail) = rest.split_at(len);
        tokens.push(token);
        rest = tail;
    }
    tokens
}
