//! A prompt's size against the model's context, and what takes the room.
//!
//! With a tokenizer the count is exact. Without one the daemon knows only
//! the prompt's bytes, which bound its tokens on both sides:
//! * at most one token per byte (byte-level BPE and SentencePiece's byte
//!   fallback never produce more; a template's special tokens are several
//!   bytes each), so a prompt of fewer bytes than the context always fits;
//! * at least one token per [`MAX_BYTES_PER_TOKEN`] bytes. Chat-model
//!   vocabularies average 3–4.5 bytes per token on English and code and less
//!   on JSON and other scripts; 8 leaves a wide margin, so a prompt refused
//!   on this bound is clearly too long (only text made mostly of long runs
//!   of one character, which some vocabularies merge, could beat it).

use crate::api::error::{ApiError, Overflow};
use crate::engine::Job;
use serde_json::Value;

/// The most bytes one token of a prompt stands for, on average, in any
/// vocabulary the daemon is likely to serve (see the module docs).
pub const MAX_BYTES_PER_TOKEN: usize = 8;

/// The fewest tokens `bytes` of text can be, whatever the vocabulary.
pub fn fewest_tokens(bytes: usize) -> usize {
    bytes.div_ceil(MAX_BYTES_PER_TOKEN)
}

/// Text that is at least this many contexts long is refused by its bytes
/// alone, never rendered or tokenized. Tokenizing costs ~100 bytes of
/// memory per byte of text and seconds of CPU per MB (issue 22 measured
/// 919 MiB for an 8 MB message); a prompt only somewhat over is still
/// counted exactly, so its refusal can say what takes the room.
const TOKENIZED_CONTEXTS_AT_MOST: usize = 4;

/// Whether `bytes` of text are too long to be worth tokenizing for a
/// context of `context` tokens (see [`TOKENIZED_CONTEXTS_AT_MOST`]).
pub fn too_long_to_tokenize(bytes: usize, context: usize) -> bool {
    fewest_tokens(bytes) > context * TOKENIZED_CONTEXTS_AT_MOST
}

/// Refuses text too long to be worth tokenizing, by its bytes, before it
/// is rendered or tokenized.
pub fn refuse_unfittable(param: &str, bytes: usize, context: usize) -> Result<(), ApiError> {
    if !too_long_to_tokenize(bytes, context) {
        return Ok(());
    }
    let message = format!(
        "This model's maximum context length is {} tokens. However, your {param} came to {} bytes, at least {} tokens (counted at {MAX_BYTES_PER_TOKEN} bytes per token at most, before tokenizing). Please reduce the length of the {param}.",
        group(context),
        group(bytes),
        group(fewest_tokens(bytes)),
    );
    let mut e = ApiError::bad_request(Some(param), message);
    e.body.code = Some("context_length_exceeded");
    e.body.overflow = Some(Overflow::new(fewest_tokens(bytes), context));
    Err(e)
}

/// The most bytes of text tokenized for a context of `context` tokens:
/// more is refused by [`refuse_unfittable`].
pub fn most_tokenized_bytes(context: usize) -> usize {
    context * TOKENIZED_CONTEXTS_AT_MOST * MAX_BYTES_PER_TOKEN
}

/// The most token ids a request may have turned into text (`/detokenize`):
/// as many as a text short enough to tokenize can give, at most one a byte.
pub fn most_token_ids(context: usize) -> usize {
    most_tokenized_bytes(context)
}

/// The most tool definitions a request may offer (OpenAI's bound on `tools`).
pub const MAX_TOOLS: usize = 128;

/// OpenAI's limit on embedding inputs and rerank documents per request
/// (`embeddings::check_count`). They run one after the other in one turn of
/// the queue.
pub const MAX_INPUTS: usize = 2048;

/// Refuses a tool list by its count and bytes, before anything is rendered:
/// more than [`MAX_TOOLS`] definitions, or one that alone is too long to
/// tokenize; and when every tool goes into the prompt (`all_sent`: no
/// selection may drop some), the tools with the messages' `verbatim` bytes.
pub fn refuse_oversized_tools(
    tools: &[Value],
    verbatim: usize,
    context: usize,
    all_sent: bool,
) -> Result<(), ApiError> {
    refuse_tool_count(tools.len())?;
    refuse_tool_bytes(tools.iter().map(json_bytes), verbatim, context, all_sent)
}

/// Refuses more than [`MAX_TOOLS`] tool definitions.
pub fn refuse_tool_count(tools: usize) -> Result<(), ApiError> {
    if tools > MAX_TOOLS {
        return Err(ApiError::invalid_value(
            "tools",
            format!("`tools` has {} definitions; at most {MAX_TOOLS} are allowed.", group(tools)),
        ));
    }
    Ok(())
}

/// Refuses a tool too long to tokenize by its `bytes`, and with `all_sent`
/// the tools with the messages' `verbatim` bytes (see [`refuse_oversized_tools`]).
pub fn refuse_tool_bytes(
    bytes: impl Iterator<Item = usize>,
    verbatim: usize,
    context: usize,
    all_sent: bool,
) -> Result<(), ApiError> {
    let mut total = verbatim;
    for (i, bytes) in bytes.enumerate() {
        refuse_unfittable(&format!("tools[{i}]"), bytes, context)?;
        total += bytes;
    }
    if all_sent {
        refuse_unfittable("tools", total, context)?;
    }
    Ok(())
}

/// The bytes of `value` written as compact JSON, counted without writing it
/// out: what a tool definition adds to a prompt (most templates write each
/// whole, as JSON, often with spaces besides).
fn json_bytes(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// What the request's prompt weighs, kept with the job: the api reads it
/// again if the runtime refuses the prompt.
#[derive(Debug, Clone, Default)]
pub struct PromptSize {
    /// `messages` or `prompt`.
    pub param: &'static str,
    pub bytes: usize,
    /// By the model's tokenizer (exact), when one is configured.
    pub tokens: Option<usize>,
    /// The tokenizer was not run: the prompt clearly cannot fit ([`too_long_to_tokenize`]).
    pub not_tokenized: bool,
    /// The model's context (`max_context_len`).
    pub context: usize,
    /// The same request without its tools, when tools were offered and the
    /// prompt may not fit (measured only then).
    pub without_tools: Option<WithoutTools>,
    /// The request's images and the prompt tokens they take (beyond `tokens`
    /// and `bytes`, which count the text).
    pub images: Option<(usize, usize)>,
}

#[derive(Debug, Clone)]
pub struct WithoutTools {
    pub tools: usize,
    pub bytes: usize,
    pub tokens: Option<usize>,
}

impl PromptSize {
    /// Whether the prompt may be longer than the context: exactly with a
    /// tokenizer, else by the one-token-per-byte bound.
    pub fn may_overflow(&self) -> bool {
        self.tokens.unwrap_or(self.bytes) + self.image_tokens() >= self.context
    }

    fn image_tokens(&self) -> usize {
        self.images.map_or(0, |(_, tokens)| tokens)
    }

    /// The prompt's tokens as far as they are known: exact, or the least it can be.
    fn known_tokens(&self) -> usize {
        self.tokens.unwrap_or_else(|| fewest_tokens(self.bytes)) + self.image_tokens()
    }

    /// Refuses a prompt that leaves no room for the reply (`max_tokens` if
    /// the client set it, else one token): by the exact count, or without a
    /// tokenizer when even the least it can be does not fit.
    pub fn check(&self, job: &Job) -> Result<(), ApiError> {
        let completion = job.max_new_tokens.map_or(1, |m| m as usize);
        if self.known_tokens() + completion <= self.context {
            return Ok(());
        }
        let (param, context, n) = (self.param, group(self.context), group(self.known_tokens()));
        // Without a tokenizer the count is a lower bound, and says so.
        let (at_least, basis) = match self.tokens {
            Some(_) => ("", String::new()),
            None => (
                "at least ",
                format!(
                    " ({} bytes, counted at {MAX_BYTES_PER_TOKEN} bytes per token at most: {})",
                    group(self.bytes),
                    if self.not_tokenized { "too long to tokenize" } else { "no tokenizer is configured" }
                ),
            ),
        };
        let message = match job.max_new_tokens {
            Some(m) => format!(
                "This model's maximum context length is {context} tokens. However, you requested {at_least}{} tokens ({at_least}{n} in the {param}{basis}, {m} in the completion). Please reduce the length of the {param} or completion.",
                group(self.known_tokens() + m as usize),
            ),
            None => format!(
                "This model's maximum context length is {context} tokens. However, your {param} resulted in {at_least}{n} tokens{basis}, leaving no room for a reply. Please reduce the length of the {param}."
            ),
        };
        Err(self.error(message, self.known_tokens() + completion))
    }

    /// The runtime refused the prompt before its first token, and the
    /// prompt may be longer than the context: the usual cause.
    pub fn refused_by_runtime(&self) -> ApiError {
        let estimate = match self.tokens {
            Some(n) => format!("{} tokens", group(n)),
            None => format!(
                "{} bytes, an estimated {}–{} tokens (no tokenizer is configured)",
                group(self.bytes),
                group(fewest_tokens(self.bytes)),
                group(self.bytes)
            ),
        };
        self.error(format!(
            "The runtime refused the prompt before generating anything, as it does with a prompt longer than the model's maximum context length of {} tokens: your {} came to {estimate}. Please reduce the length of the {}.",
            group(self.context),
            self.param,
            self.param
        ), self.known_tokens())
    }

    /// The refusal, `tokens` what the request came to against the context.
    fn error(&self, message: String, tokens: usize) -> ApiError {
        let mut e =
            ApiError::bad_request(Some(self.param), format!("{message}{}{}", self.images_share(), self.tools_share()));
        e.body.code = Some("context_length_exceeded");
        e.body.overflow = Some(Overflow::new(tokens, self.context));
        e
    }

    /// " 2 images take 396 of those tokens (198 each); …" for a request with images.
    fn images_share(&self) -> String {
        match self.images {
            Some((n, tokens)) if n > 0 => format!(
                " {n} image{} take{} {} of those tokens ({} each on this model): send fewer images.",
                if n == 1 { "" } else { "s" },
                if n == 1 { "s" } else { "" },
                group(tokens),
                group(tokens / n)
            ),
            _ => String::new(),
        }
    }

    /// " 36 tool definitions take ~11k of 13.9k tokens; …" when tools were offered.
    fn tools_share(&self) -> String {
        let Some(w) = &self.without_tools else { return String::new() };
        let (taken, total, unit) = match (self.tokens, w.tokens) {
            (Some(all), Some(without)) => (all.saturating_sub(without), all, "tokens"),
            _ => (self.bytes.saturating_sub(w.bytes), self.bytes, "bytes of the prompt"),
        };
        let definitions =
            if w.tools == 1 { "1 tool definition takes" } else { &format!("{} tool definitions take", w.tools) };
        format!(
            " {definitions} ~{} of the {} {unit}; the model's context is {} tokens: send fewer tools (or none, e.g. turn off native function calling in the client) or use a model converted with a larger context.",
            short(taken),
            group(total),
            group(self.context)
        )
    }
}

/// 13950 → "13,950".
fn group(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// 11020 → "11k", 13950 → "13.9k", 950 → "950" (rounded down).
fn short(n: usize) -> String {
    if n < 1000 {
        return n.to_string();
    }
    match n % 1000 / 100 {
        0 => format!("{}k", n / 1000),
        tenths => format!("{}.{tenths}k", n / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(max_new_tokens: Option<u32>) -> Job {
        Job { max_new_tokens, ..Job::new("x", "") }
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(
            (group(13950), group(4096), group(999), group(1_000_000)),
            ("13,950".into(), "4,096".into(), "999".into(), "1,000,000".into())
        );
        assert_eq!(
            (short(11020), short(13950), short(4096), short(950)),
            ("11k".into(), "13.9k".into(), "4k".into(), "950".into())
        );
    }

    #[test]
    fn without_a_tokenizer_only_a_clear_overflow_is_refused() {
        let size = |bytes| PromptSize { param: "messages", bytes, context: 4096, ..PromptSize::default() };
        // 8 bytes per token at most: 32,768 bytes are at least 4,096 tokens.
        assert!(size(32_760).check(&job(None)).is_ok());
        let e = size(32_768).check(&job(None)).unwrap_err();
        assert_eq!(e.body.code, Some("context_length_exceeded"));
        assert!(
            e.body.message.contains("resulted in at least 4,096 tokens (32,768 bytes, counted at 8"),
            "{}",
            e.body.message
        );
        let e = size(24_000).check(&job(Some(1200))).unwrap_err();
        assert!(
            e.body.message.contains("requested at least 4,200 tokens (at least 3,000 in the messages (24,000 bytes"),
            "{}",
            e.body.message
        );
        // max_tokens needs room too.
        assert!(size(24_000).check(&job(Some(1200))).is_err());
        assert!(size(24_000).check(&job(Some(1000))).is_ok());
        // One token per byte at most: a short prompt cannot overflow.
        assert!(!size(4095).may_overflow());
        assert!(size(4096).may_overflow());
    }

    #[test]
    fn tool_lists_are_held_to_their_count_and_bytes() {
        let tool = |description: &str| serde_json::json!({"type": "function", "function": {"name": "f", "description": description}});
        let bytes = json_bytes(&tool(""));
        assert_eq!(bytes, r#"{"type":"function","function":{"name":"f","description":""}}"#.len());
        let many = vec![tool(""); MAX_TOOLS + 1];
        let e = refuse_oversized_tools(&many, 0, 4096, false).unwrap_err();
        assert_eq!(e.body.param.as_deref(), Some("tools"), "{}", e.body.message);
        assert!(refuse_oversized_tools(&many[1..], 0, 4096, true).is_ok());
        // One definition too long to tokenize (4 contexts of 8 bytes a token) is refused by name.
        let long = vec![tool(""), tool(&"x".repeat(4 * 100 * 8))];
        let e = refuse_oversized_tools(&long, 0, 100, false).unwrap_err();
        assert_eq!((e.body.param.as_deref(), e.body.code), (Some("tools[1]"), Some("context_length_exceeded")));
        // Together with the messages only when every tool is sent.
        let half = vec![tool(&"x".repeat(2 * 100 * 8)); 2];
        assert!(refuse_oversized_tools(&half, 0, 100, false).is_ok());
        let e = refuse_oversized_tools(&half, 0, 100, true).unwrap_err();
        assert_eq!(e.body.param.as_deref(), Some("tools"), "{}", e.body.message);
    }

    #[test]
    fn the_tools_share_is_named() {
        let size = PromptSize {
            param: "messages",
            bytes: 40_000,
            tokens: Some(13_950),
            not_tokenized: false,
            context: 4096,
            without_tools: Some(WithoutTools { tools: 36, bytes: 9_000, tokens: Some(2_930) }),
            images: None,
        };
        let e = size.check(&job(None)).unwrap_err();
        assert!(e.body.message.contains("resulted in 13,950 tokens"), "{}", e.body.message);
        assert!(
            e.body
                .message
                .contains("36 tool definitions take ~11k of the 13,950 tokens; the model's context is 4,096 tokens"),
            "{}",
            e.body.message
        );
        assert!(!size.may_overflow() || size.refused_by_runtime().body.message.contains("13,950 tokens"));
    }
}
