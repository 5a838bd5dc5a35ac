//! Optional API-key authentication for every API route (`api_routes` in
//! `api/mod.rs`: `/v1/*`, Ollama's `/api/*`, `/tokenize`, `/detokenize`,
//! `/rerank`): `Authorization: Bearer KEY` (the OpenAI SDKs) or
//! `x-api-key: KEY` (Anthropic-style clients, proxies). `/`, `/health`,
//! `/health/ready`, `/metrics`, `/openapi.json` and `/docs` stay public.

use super::error::ApiError;
use super::AppState;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

/// The second header a key may come in.
pub const API_KEY_HEADER: &str = "x-api-key";

pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    if let Some(key) = &state.settings.api_key {
        if !given_keys(req.headers()).any(|given| matches(given, key)) {
            return Err(ApiError::unauthorized());
        }
    }
    Ok(next.run(req).await)
}

fn given_keys(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    let bearer = headers.get_all(AUTHORIZATION).iter().filter_map(|v| v.to_str().ok()?.strip_prefix("Bearer "));
    let plain = headers.get_all(API_KEY_HEADER).iter().filter_map(|v| v.to_str().ok());
    bearer.chain(plain)
}

/// Constant-time, so the comparison leaks nothing about the key's content.
fn matches(given: &str, key: &str) -> bool {
    bool::from(given.as_bytes().ct_eq(key.as_bytes()))
}
