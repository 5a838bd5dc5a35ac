//! What every handler shares: the settings the HTTP surface is built from,
//! the registry once the models are registered, whether the daemon is
//! stopping, and what each reply names (the board, the build). Below the
//! handlers and the route table, so that they read it and it reads neither.

use super::error::ApiError;
use super::request::ChatPolicy;
use super::status;
use crate::conversation::{ReasoningMode, ToolsOverflow};
use crate::engine::{EngineError, Place};
use crate::registry::{KeepAlive, Lease, Loaded, Registry, RegistryError};
use axum::http::{HeaderName, HeaderValue};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

pub struct Inner {
    pub settings: Settings,
    /// Set once the models are registered (and the primary one loaded).
    models: OnceLock<Arc<Registry>>,
    shutting_down: AtomicBool,
}

/// What the HTTP surface is built from.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Require this key (`Authorization: Bearer` or `x-api-key`) on the API
    /// routes; health checks, `/metrics` and the docs stay public.
    pub api_key: Option<String>,
    /// Origins allowed by CORS ("*" for any); empty: CORS off.
    pub cors_origins: Vec<String>,
    /// Host names besides addresses and local names (`cross_site.rs`); `*`: any.
    pub allowed_hosts: Vec<String>,
    pub body_limit_bytes: usize,
    /// Between keep-alive comments on a quiet stream.
    pub keepalive: std::time::Duration,
    /// How long a queued stream's response head waits for its run to start.
    pub head_wait: std::time::Duration,
    /// How long a response may wait for its client to read (`outbox.rs`).
    pub write_timeout: std::time::Duration,
    /// What becomes of `<think>…</think>` text in chat replies.
    pub reasoning: ReasoningMode,
    /// What happens to a chat whose tools do not fit the context.
    pub tools_overflow: ToolsOverflow,
    /// `/metrics` is served here (not on a listener of its own).
    pub metrics_on_main_listener: bool,
    /// `/api/pull` may download models into `models_dir`.
    pub allow_pull: bool,
    /// Where `/docs` serves Swagger UI's files from (`docs::ui_dir`).
    pub docs_dir: Option<std::path::PathBuf>,
}

impl Settings {
    pub fn chat_policy(&self) -> ChatPolicy {
        ChatPolicy { reasoning: self.reasoning, tools_overflow: self.tools_overflow }
    }
}

#[cfg(test)]
impl Settings {
    /// The defaults' settings, for the api's own tests.
    pub fn example() -> Settings {
        Settings {
            api_key: None,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            body_limit_bytes: 1 << 20,
            keepalive: std::time::Duration::from_secs(15),
            head_wait: std::time::Duration::from_secs(30),
            write_timeout: std::time::Duration::from_secs(30),
            reasoning: ReasoningMode::Split,
            tools_overflow: ToolsOverflow::Select,
            metrics_on_main_listener: true,
            allow_pull: false,
            docs_dir: None,
        }
    }
}

/// `rkllmd-<version>-<backend>-<runtime version>`: what produced a reply.
pub fn fingerprint(model: &Loaded) -> String {
    let info = model.engine.info();
    format!(
        "rkllmd-{}-{}-{}",
        env!("CARGO_PKG_VERSION"),
        info.backend.as_str(),
        info.version.as_deref().unwrap_or("unknown")
    )
}

impl Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(settings: Settings) -> Self {
        AppState(Arc::new(Inner { settings, models: OnceLock::new(), shutting_down: AtomicBool::new(false) }))
    }

    /// Makes the models available to requests (once).
    pub fn set_models(&self, registry: Arc<Registry>) {
        let _ = self.models.set(registry);
    }

    /// The registry, once the daemon has started serving.
    pub fn models(&self) -> Result<&Arc<Registry>, ApiError> {
        self.models.get().ok_or_else(ApiError::loading)
    }

    /// The context of the model `name` names, when known without loading
    /// it (`registry::Status::context`): what a body is held to before the
    /// model is leased.
    pub fn known_context(&self, name: &str) -> Option<usize> {
        let models = self.models.get()?;
        let (spec, _) = models.resolve(name)?;
        models.statuses().into_iter().find(|s| s.spec.id == spec.id)?.context()
    }

    /// The model a request names, loaded if it is not (if requests are being accepted).
    pub async fn lease(&self, model: &str, keep_alive: Option<KeepAlive>) -> Result<Lease, ApiError> {
        if self.is_shutting_down() {
            return Err(ApiError::shutting_down());
        }
        self.models()?.acquire(model, keep_alive).await.map_err(|e| registry_error(&e))
    }

    /// The model and a place in its queue, for a job: a full queue is a 429
    /// before anything of the request is prepared (`Registry::acquire_queued`).
    pub async fn lease_queued(&self, model: &str, keep_alive: Option<KeepAlive>) -> Result<(Lease, Place), ApiError> {
        if self.is_shutting_down() {
            return Err(ApiError::shutting_down());
        }
        self.models()?.acquire_queued(model, keep_alive).await.map_err(|e| registry_error(&e))
    }

    /// Unloads a model now (`keep_alive: 0`, `POST /v1/models/{id}/unload`).
    pub async fn unload(&self, model: &str) -> Result<(), ApiError> {
        self.models()?.unload(model).await.map(drop).map_err(|e| registry_error(&e))
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
}

/// What a failed look-up or load is on the wire.
fn registry_error(e: &RegistryError) -> ApiError {
    match e {
        RegistryError::NotFound(id) => ApiError::model_not_found(id),
        RegistryError::Load { .. } | RegistryError::Interrupted(_) => ApiError::model_load_failed(e.to_string()),
        RegistryError::TooLarge { .. } => ApiError::model_too_large(e.to_string()),
        RegistryError::QueueFull(_) => status::refused(&EngineError::QueueFull),
        RegistryError::Unresponsive(_) => status::refused(&EngineError::Unresponsive),
        RegistryError::Wedged { .. } => ApiError::model_wedged(e.to_string()),
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Which board answered: on every response, errors and refusals included,
/// so that behind a balancer a client (or its logs) can tell the boards apart.
const INSTANCE: HeaderName = HeaderName::from_static("x-rkllmd-instance");

/// Names the board on a response (also one the listener answers itself).
pub fn mark_instance(response: &mut axum::response::Response) {
    // Config validation and `app::host_name` keep the name to visible ASCII.
    if let Ok(value) = HeaderValue::from_str(crate::metrics::observer().instance()) {
        response.headers_mut().insert(INSTANCE, value);
    }
}
