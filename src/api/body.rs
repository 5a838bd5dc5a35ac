//! A request body read whole, for the handlers that parse it themselves
//! (Ollama's and the Messages API's, which take it whatever its content
//! type says): a body over `body_limit_bytes` (one sent without a
//! `Content-Length`, which `api::refuse_announced_oversize` cannot see
//! coming) is refused in the route's error shape (`Refuse`), as every other
//! refusal before a handler is, not in the web framework's plain text.

use super::error::{ApiError, Refuse};
use super::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::Response;

pub struct Body(pub Bytes);

impl FromRequest<AppState> for Body {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Response> {
        let refuse = Refuse::of(&req);
        Bytes::from_request(req, state).await.map(Body).map_err(|rejection| {
            let e = match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => ApiError::payload_too_large(state.settings.body_limit_bytes),
                _ => ApiError::bad_request(None, format!("Cannot read the request body: {rejection}")),
            };
            refuse.with(e)
        })
    }
}
