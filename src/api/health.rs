//! `GET /health` (liveness) and `GET /health/ready` (readiness); public.

use super::runtime_info::{Queue, Runtime};
use super::state::AppState;
use crate::conn_cap::Pressure;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use std::time::Duration;
use utoipa::ToSchema;

/// How long `/health` waits for an idle runtime thread to answer its ping.
/// An idle thread answers at once; a thread inside a run is not pinged but
/// judged by its signs of life, so the probe never waits for a generation.
const PING_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` once the model is loaded, `loading` before, `stalled` (503) when
    /// the runtime thread fails the liveness check.
    pub status: &'static str,
    /// Why the runtime counts as stalled (only with `stalled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub version: &'static str,
    pub backend: Option<&'static str>,
    pub runtime: Option<Runtime>,
    /// The most recently used loaded model (`null` when none is loaded);
    /// `backend` and `runtime` are its.
    pub model: Option<String>,
    /// Every loaded model, most recently used first.
    pub loaded_models: Vec<String>,
    /// The queues of every loaded model, added up (`capacity` is per model).
    pub queue: Option<Queue>,
}

/// Liveness: 200 while the process serves HTTP and the runtime thread is
/// alive (the systemd watchdog's check, `Engine::check_alive`); 503
/// `stalled` when the runtime hangs.
#[utoipa::path(get, path = "/health", tag = "health", responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn live(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    let registry = state.models().ok();
    let models = registry.map(|r| r.loaded()).unwrap_or_default();
    let mut stalled = None;
    for m in &models {
        if let Err(why) = m.engine.check_alive(PING_TIMEOUT).await {
            stalled = Some(format!("{}: {why}", m.model_id));
            break;
        }
    }
    let status = if stalled.is_some() {
        "stalled"
    } else if registry.is_some() {
        "ok"
    } else {
        "loading"
    };
    let loaded = models.first();
    let queue = registry.map(|r| Queue::sum(r.queue_depth(), models.iter().map(|m| m.engine.queue_state())));
    let code = if stalled.is_some() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    let body = Json(Health {
        status,
        reason: stalled,
        version: env!("CARGO_PKG_VERSION"),
        backend: loaded.map(|l| l.engine.info().backend.as_str()),
        runtime: loaded.map(|l| {
            let runtime = Runtime::from(&*l.engine);
            if state.settings.api_key.is_some() {
                runtime.without_paths()
            } else {
                runtime
            }
        }),
        model: loaded.map(|l| l.model_id.clone()),
        loaded_models: models.iter().map(|m| m.model_id.clone()).collect(),
        queue,
    });
    (code, body)
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    /// `ready`, `loading`, `stalled`, `connections_full`, `connections_refused`, `queue_full` or
    /// `shutting_down`.
    pub status: &'static str,
}

/// Readiness: 200 when a request would be accepted now and served, else
/// 503. A stalled runtime (the `/health` check) is not ready: a request
/// would be queued behind a run that never ends.
#[utoipa::path(get, path = "/health/ready", tag = "health", responses((status = 200, body = Ready), (status = 503, body = Ready)))]
pub async fn ready(State(state): State<AppState>) -> (StatusCode, Json<Ready>) {
    let status = match state.models() {
        _ if state.is_shutting_down() => "shutting_down",
        Err(_) => "loading",
        Ok(r) => {
            let loaded = r.loaded();
            // A runtime stuck in an aborted run refuses every request already.
            let mut stalled = loaded.iter().any(|m| m.engine.is_unresponsive());
            for m in &loaded {
                stalled |= m.engine.check_alive(PING_TIMEOUT).await.is_err();
            }
            if stalled {
                "stalled"
            } else if let Some(pressure) = crate::conn_cap::serving_pressure() {
                // New connections get (or just got) 503 `too_many_connections`.
                match pressure {
                    Pressure::Full => "connections_full",
                    Pressure::Refusing => "connections_refused",
                }
            } else if loaded.iter().any(|m| m.engine.queue_full()) {
                "queue_full"
            } else {
                "ready"
            }
        }
    };
    let code = if status == "ready" { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(Ready { status }))
}
