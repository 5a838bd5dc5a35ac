//! Optional bearer-key authentication for `/v1/*`.

use super::error::ApiError;
use super::AppState;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    if let Some(key) = &state.settings.api_key {
        let given = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        // Constant-time so the comparison leaks nothing about the key's content.
        if !bool::from(given.as_bytes().ct_eq(key.as_bytes())) {
            return Err(ApiError::unauthorized());
        }
    }
    Ok(next.run(req).await)
}
