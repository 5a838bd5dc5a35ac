//! A reply's token limit as Anthropic and OpenAI read it: a ceiling, not a
//! demand. Agents ask for their own maximum whatever the model (Claude Code
//! 32,000, opencode 32,000, Codex's `max_output_tokens`); above what the
//! server can produce (`max_new_tokens`) the request is served with that,
//! and the reply says so: the header `x-rkllmd-max-tokens-clamped:
//! 32000->2048` on every front end, and on the Messages API
//! `timings.max_tokens_clamped` too. 0 is still refused.

use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use serde_json::{json, Value};

const CLAMPED: HeaderName = HeaderName::from_static("x-rkllmd-max-tokens-clamped");

/// A `max_tokens` that was lowered to the server's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clamped {
    pub requested: u32,
    pub limit: u32,
}

/// The `max_tokens` to run with, and the clamp when one was made.
pub fn clamp(requested: u32, limit: u32) -> (u32, Option<Clamped>) {
    if requested > limit {
        (limit, Some(Clamped { requested, limit }))
    } else {
        (requested, None)
    }
}

impl Clamped {
    pub fn header(self, response: &mut Response) {
        let value = format!("{}->{}", self.requested, self.limit);
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(CLAMPED, value);
        }
    }

    /// Adds `max_tokens_clamped: {requested, limit}` to a reply's `timings`.
    pub fn add_to_timings(self, timings: &mut Value) {
        if let Some(t) = timings.as_object_mut() {
            t.insert("max_tokens_clamped".into(), json!({"requested": self.requested, "limit": self.limit}));
        }
    }
}
