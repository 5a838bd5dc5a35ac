//! Optional API-key authentication for exactly the routes the route table
//! describes as guarded (`route.rs`: `/v1/*`, Ollama's `/api/*`,
//! `/tokenize`, `/detokenize`, `/rerank`): `Authorization: Bearer KEY` (the OpenAI SDKs) or
//! `x-api-key: KEY` (Anthropic-style clients, proxies). `/`, `/health`,
//! `/health/ready`, `/metrics`, `/openapi.json` and `/docs` are described
//! as public and stay so, as does the 404 of a path that is no route.
//! Each listener has its own key: the main one `api_key`, the Ollama
//! clients' one `ollama_api_key`.

use super::error::{ApiError, Refuse};
use super::route::Routes;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The second header a key may come in.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The key one listener requires; `None`: none.
#[derive(Debug, Clone, Default)]
pub struct Key(Option<Arc<str>>);

impl Key {
    pub fn new(key: Option<&str>) -> Key {
        Key(key.map(Arc::from))
    }

    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Whether a request with these headers carries the key (it is set and one of them matches).
    pub fn carried_by(&self, headers: &HeaderMap) -> bool {
        self.0.as_deref().is_some_and(|key| given_keys(headers).any(|given| matches(given, key)))
    }
}

/// What the check reads on one listener: its key and its route table.
#[derive(Debug, Clone)]
pub struct Lock {
    pub key: Key,
    pub routes: Arc<Routes>,
}

/// Refuses a request to a route its description says is guarded, unless it
/// carries the key. It wraps the routes only (`api::guarded`), so a request
/// always matched one; without the matched path it is held guarded too.
pub async fn require_key(State(lock): State<Lock>, req: Request, next: Next) -> Response {
    let guarded = req.extensions().get::<MatchedPath>().is_none_or(|path| lock.routes.guards(path.as_str()));
    if guarded && lock.key.is_set() && !lock.key.carried_by(req.headers()) {
        return Refuse::of(&req).with(ApiError::unauthorized());
    }
    next.run(req).await
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
