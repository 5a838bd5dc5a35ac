//! Ollama's error shape, `{"error": "…"}`, its text what clients match on:
//! the handlers' errors are this type, and the route table writes the
//! refusals met before a handler on these routes with [`refusal`]
//! (`route::Errors::Ollama`).

use super::wire::ErrorReply;
use crate::api::error::{ApiError, ErrorBody};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error on Ollama's routes, written in Ollama's shape.
pub struct OllamaError(pub ApiError);

impl From<ApiError> for OllamaError {
    fn from(e: ApiError) -> Self {
        OllamaError(e)
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        let body = body(self.0.status, &self.0.body);
        self.0.respond_with(&body)
    }
}

/// A refusal met before a handler, in Ollama's shape.
pub fn refusal(e: ApiError) -> Response {
    OllamaError(e).into_response()
}

/// An error in Ollama's words (also a stream's last line).
pub fn body(status: StatusCode, said: &ErrorBody) -> ErrorReply {
    let error = match (said.code, said.overflow) {
        (Some("model_not_found"), _) if status == StatusCode::NOT_FOUND => {
            format!("model '{}' not found", said.message.split('`').nth(1).unwrap_or_default())
        }
        // Ollama's words for a prompt that does not fit (its runner's, with
        // `truncate: false`), the numbers after them.
        (_, Some(o)) => {
            format!(
                "the input length exceeds the context length ({} tokens > {}). {}",
                o.tokens, o.context, said.message
            )
        }
        _ => said.message.clone(),
    };
    ErrorReply { error }
}
