//! `max_tokens` as Anthropic reads it: a ceiling, not a demand. Claude Code
//! asks for 32,000 whatever the model; above what the server can produce
//! (`max_new_tokens`) the request is served with that, and the reply says so
//! (the header `x-rkllmd-max-tokens-clamped: 32000->2048` and
//! `timings.max_tokens_clamped`). 0 is still refused, as on chat.
//! `/v1/chat/completions` reads its `max_tokens` the same way (the header
//! only): opencode asks for 32,000 too.

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
