//! The OpenAI-compatible HTTP surface. Handlers validate, hand the engine a
//! job and shape its events into responses; they never touch FFI.

mod auth;
mod ceiling;
mod chat;
mod completions;
mod cross_site;
mod doc_models;
mod docs;
mod embeddings;
pub mod error;
mod extract;
mod forward;
mod health;
mod messages;
mod metrics;
mod models;
mod named;
mod nul;
mod ollama;
mod outbox;
mod record;
mod reply;
pub mod request;
mod rerank;
mod respond;
pub mod response;
mod responses;
mod runtime_info;
mod schema_rules;
mod status;
mod structured;
mod system;
mod tokenize;

use crate::conversation::{ReasoningMode, ToolsOverflow};
use crate::engine::Place;
use crate::metrics::Kind;
use crate::registry::{KeepAlive, Lease, Registry, RegistryError};
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, Method, Uri};
use axum::Router;
use error::ApiError;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tower_http::cors::{AllowOrigin, CorsLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

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
    /// Require this key (`Authorization: Bearer`); health checks stay public.
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

pub use crate::embed::EmbedSettings;

impl Settings {
    pub fn chat_policy(&self) -> request::ChatPolicy {
        request::ChatPolicy { reasoning: self.reasoning, tools_overflow: self.tools_overflow }
    }
}
pub use crate::registry::Loaded;

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

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// What every chunk of a reply by this model (or adapter) repeats.
    fn meta(prefix: &str, model: &Lease) -> respond::Meta {
        respond::Meta {
            id: format!("{prefix}-{}", uuid::Uuid::new_v4().simple()),
            created: unix_now(),
            model: model.served_id(),
            fingerprint: fingerprint(model),
        }
    }
}

/// What a failed look-up or load is on the wire.
pub fn registry_error(e: &RegistryError) -> ApiError {
    match e {
        RegistryError::NotFound(id) => ApiError::model_not_found(id),
        RegistryError::Load { .. } | RegistryError::Interrupted(_) => ApiError::model_load_failed(e.to_string()),
        RegistryError::TooLarge { .. } => ApiError::model_too_large(e.to_string()),
        RegistryError::QueueFull(_) => status::refused(&crate::engine::EngineError::QueueFull),
        RegistryError::Unresponsive(_) => status::refused(&crate::engine::EngineError::Unresponsive),
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[derive(OpenApi)]
#[openapi(
    info(title = "rkllmd", description = "OpenAI-compatible API for LLMs on Rockchip NPUs"),
    tags((name = "completions"), (name = "embeddings"), (name = "models"), (name = "health"), (name = "observability"))
)]
struct ApiDoc;

/// The API's routes (authenticated) and what their handlers' annotations
/// say of them; each counted route registered in `counted` with its kind
/// (`rkllmd_requests_total`).
fn api_routes(counted: &mut metrics::CountedRoutes) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(counted.openapi(Kind::Completion, routes!(chat::create)))
        .routes(counted.openapi(Kind::Completion, routes!(completions::create)))
        .routes(counted.openapi(Kind::Completion, routes!(responses::create)))
        .routes(counted.openapi(Kind::Completion, routes!(messages::create)))
        .routes(routes!(messages::count_tokens))
        .routes(counted.openapi(Kind::Embedding, routes!(embeddings::create)))
        .routes(counted.openapi(Kind::Rerank, routes!(rerank::create)))
        .routes(counted.openapi(Kind::Rerank, routes!(rerank::create_unversioned)))
        .routes(routes!(models::list))
        .routes(routes!(models::get))
        .routes(routes!(models::load))
        .routes(routes!(models::unload))
        .routes(routes!(system::get))
        .routes(routes!(tokenize::tokenize))
        .routes(routes!(tokenize::detokenize))
        .merge(ollama::routes(counted))
        .split_for_parts()
}

/// The whole application: API routes (authenticated), health and docs
/// (public), OpenAI-style fallbacks, body limit and CORS.
pub fn router(state: AppState) -> Router {
    let mut counted = metrics::CountedRoutes::default();
    let (api, openapi) = api_routes(&mut counted);
    let (public, health_doc) =
        OpenApiRouter::new().routes(routes!(health::live)).routes(routes!(health::ready)).split_for_parts();
    let mut openapi = openapi;
    openapi.merge(health_doc);
    let doc_settings = docs::DocSettings { api_key: state.settings.api_key.is_some() };
    docs::complete(&mut openapi, &doc_settings);
    let public = public
        .merge(docs::routes(openapi, docs::ui_dir(state.settings.docs_dir.as_deref()), state.clone()))
        .merge(metrics::main_routes(&state));
    let key = auth::Key::new(state.settings.api_key.as_deref());
    guarded(api, public, counted, key, state)
}

/// The Ollama clients' listener (`ollama_listen`): the Ollama routes and
/// the two OpenAI ones Ollama serves and VS Code Copilot calls there
/// (`/v1/chat/completions`, `/v1/models`), under that listener's own key
/// (`ollama_api_key`; `None`: no key), for clients that cannot send one.
/// `GET /` answers as Ollama's does, for clients that probe it.
pub fn ollama_router(state: AppState, key: Option<&str>) -> Router {
    let mut counted = metrics::CountedRoutes::default();
    let (api, _) = ollama::routes(&mut counted)
        .routes(counted.openapi(Kind::Completion, routes!(chat::create)))
        .routes(routes!(models::list))
        .split_for_parts();
    let public = Router::new().route("/", axum::routing::get(|| async { "Ollama is running" }));
    guarded(api, public, counted, auth::Key::new(key), state)
}

/// A listener's routes behind what guards every one: `key` on the API
/// routes (not on `public`), request counting, the body limit, CORS, the
/// Host and Origin checks, Ollama's error shape and the instance header.
fn guarded(
    api: Router<AppState>,
    public: Router<AppState>,
    counted: metrics::CountedRoutes,
    key: auth::Key,
    state: AppState,
) -> Router {
    let api = api.layer(axum::middleware::from_fn_with_state(key.clone(), auth::require_key));
    let counter = metrics::Counter::new(counted, state.clone());
    let api = api.layer(axum::middleware::from_fn_with_state(counter, metrics::count_requests));
    let mut app = Router::new()
        .merge(api)
        .merge(public)
        .fallback(|uri: Uri| async move { ApiError::route_not_found(uri.path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(state.settings.body_limit_bytes))
        .layer(axum::middleware::from_fn_with_state(state.clone(), refuse_announced_oversize));
    if let Some(cors) = cors(&state.settings.cors_origins) {
        app = app.layer(cors);
    }
    // A foreign origin's preflight is refused too (outside CORS); the
    // instance header is on every response, the refusals included.
    let guard = cross_site::Guard { state: state.clone(), key };
    app.layer(axum::middleware::from_fn_with_state(guard, cross_site::check))
        .layer(axum::middleware::from_fn(ollama::error_shape))
        .layer(axum::middleware::from_fn(instance_header))
        .with_state(state)
}

/// Which board answered: on every response, errors and refusals included,
/// so that behind a balancer a client (or its logs) can tell the boards apart.
const INSTANCE: HeaderName = HeaderName::from_static("x-rkllmd-instance");

async fn instance_header(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let mut response = next.run(req).await;
    mark_instance(&mut response);
    response
}

/// Names the board on a response (also one the listener answers itself).
pub fn mark_instance(response: &mut axum::response::Response) {
    // Config validation and `app::host_name` keep the name to visible ASCII.
    if let Ok(value) = HeaderValue::from_str(crate::metrics::observer().instance()) {
        response.headers_mut().insert(INSTANCE, value);
    }
}

/// A body whose `Content-Length` is over the limit is refused before any of
/// it is read (the body limit alone would wait for the bytes to arrive).
async fn refuse_announced_oversize(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Result<axum::response::Response, ApiError> {
    let limit = state.settings.body_limit_bytes;
    let announced = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::payload_too_large(limit));
    }
    Ok(next.run(req).await)
}

fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let origin = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    // Browsers do not let `*` cover `Authorization`: it is named; `*` covers
    // the rest (e.g. the SDKs' x-stainless-* headers).
    let headers =
        [AUTHORIZATION, CONTENT_TYPE, HeaderName::from_static(auth::API_KEY_HEADER), HeaderName::from_static("*")];
    Some(
        CorsLayer::new()
            .allow_origin(origin)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers(headers),
    )
}

pub use metrics::serve_separately as serve_metrics_separately;
