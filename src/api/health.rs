//! `GET /health` (liveness) and `GET /health/ready` (readiness); public.

use super::AppState;
use crate::engine::{QueueState, RuntimeInfo};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` once the model is loaded, `loading` before.
    pub status: &'static str,
    pub version: &'static str,
    pub backend: Option<&'static str>,
    pub runtime: Option<RuntimeInfo>,
    pub model: Option<String>,
    pub queue: Option<QueueState>,
}

/// Liveness: always 200 while the process serves HTTP.
#[utoipa::path(get, path = "/health", tag = "health", responses((status = 200, body = Health)))]
pub async fn live(State(state): State<AppState>) -> Json<Health> {
    let loaded = state.loaded().ok();
    Json(Health {
        status: if loaded.is_some() { "ok" } else { "loading" },
        version: env!("CARGO_PKG_VERSION"),
        backend: loaded.map(|l| l.engine.info().backend.as_str()),
        runtime: loaded.map(|l| l.engine.info().clone()),
        model: loaded.map(|l| l.model_id.clone()),
        queue: loaded.map(|l| l.engine.queue_state()),
    })
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    /// `ready`, `loading`, `queue_full` or `shutting_down`.
    pub status: &'static str,
}

/// Readiness: 200 when a request would be accepted now, else 503.
#[utoipa::path(get, path = "/health/ready", tag = "health", responses((status = 200, body = Ready), (status = 503, body = Ready)))]
pub async fn ready(State(state): State<AppState>) -> (StatusCode, Json<Ready>) {
    let status = match state.loaded() {
        _ if state.is_shutting_down() => "shutting_down",
        Err(_) => "loading",
        Ok(l) if l.engine.queue_full() => "queue_full",
        Ok(_) => "ready",
    };
    let code = if status == "ready" { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(Ready { status }))
}
