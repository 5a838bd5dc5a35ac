//! Anthropic's error shape, `{"type": "error", "error": {"type", "message"}}`,
//! for the Messages API's handlers and its stream's `error` event; the route
//! table writes the refusals met before a handler on these routes with
//! [`refusal`] (`route::Errors::Anthropic`). The status is the daemon's one
//! table's (`status.rs`).

use super::wire::{ErrorDetail, ErrorResponse};
use crate::api::error::ApiError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error as Anthropic sends it: `{"type": "error", "error": {"type", "message"}}`.
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        AnthropicError(e)
    }
}

impl AnthropicError {
    pub fn body(&self) -> ErrorResponse {
        let kind = match self.0.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::FORBIDDEN => "permission_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
            s if s.is_client_error() => "invalid_request_error",
            _ => "api_error",
        };
        // Anthropic's own words for a prompt that does not fit, which agents
        // (Claude Code) read to compact the conversation once, numbers first.
        let message = match self.0.body.overflow {
            Some(o) => {
                format!("prompt is too long: {} tokens > {} maximum. {}", o.tokens, o.context, self.0.body.message)
            }
            None => self.0.body.message.clone(),
        };
        ErrorResponse { kind: "error", error: ErrorDetail { kind, message } }
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        // The same headers as every error (Retry-After, x-should-retry), in Anthropic's shape.
        let body = self.body();
        self.0.respond_with(&body)
    }
}

/// A refusal met before a handler (a missing key, a foreign origin, a body
/// too large, a method the route does not take), in Anthropic's shape.
pub fn refusal(e: ApiError) -> Response {
    AnthropicError(e).into_response()
}
