//! The OpenAI-compatible HTTP surface. Handlers validate, hand the engine a
//! job and shape its events into responses; they never touch FFI.

mod auth;
mod chat;
mod completions;
mod docs;
pub mod error;
mod extract;
mod health;
mod metrics;
mod models;
mod reply;
pub mod request;
mod respond;
pub mod response;
mod system;

use crate::config::Config;
use crate::engine::Engine;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method, Uri};
use axum::Router;
use error::ApiError;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

pub struct Inner {
    pub config: Config,
    loaded: OnceLock<Loaded>,
    shutting_down: AtomicBool,
}

/// The model once it is loaded.
pub struct Loaded {
    pub engine: Arc<Engine>,
    pub model_id: String,
    /// Unix seconds: the model file's mtime, or the load time for the simulator.
    pub created: u64,
}

impl Loaded {
    pub fn fingerprint(&self) -> String {
        let info = self.engine.info();
        format!(
            "rkllmd-{}-{}-{}",
            env!("CARGO_PKG_VERSION"),
            info.backend.as_str(),
            info.version.as_deref().unwrap_or("unknown")
        )
    }

    fn card(&self) -> models::ModelCard {
        let info = self.engine.info();
        models::ModelCard {
            id: self.model_id.clone(),
            object: "model",
            created: self.created,
            owned_by: format!("rkllmd-{}-{}", info.backend.as_str(), info.version.as_deref().unwrap_or("unknown")),
            template: {
                let t = self.engine.prompter().describe();
                models::TemplateCard { mode: t.mode.as_str(), family: t.family, reason: t.reason }
            },
        }
    }
}

impl Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(config: Config) -> Self {
        AppState(Arc::new(Inner { config, loaded: OnceLock::new(), shutting_down: AtomicBool::new(false) }))
    }

    /// Makes the model available to requests (once).
    pub fn set_loaded(&self, loaded: Loaded) {
        crate::metrics::observer().set_model(&loaded.model_id);
        let _ = self.loaded.set(loaded);
    }

    pub fn loaded(&self) -> Result<&Loaded, ApiError> {
        self.loaded.get().ok_or_else(ApiError::loading)
    }

    /// The engine, if requests are being accepted.
    pub fn engine(&self) -> Result<&Arc<Engine>, ApiError> {
        if self.is_shutting_down() {
            return Err(ApiError::shutting_down());
        }
        Ok(&self.loaded()?.engine)
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Checks the requested model and fixes what every chunk repeats.
    fn meta(&self, prefix: &str, model: &str) -> Result<respond::Meta, ApiError> {
        let loaded = self.loaded()?;
        if model != loaded.model_id {
            return Err(ApiError::model_not_found(model));
        }
        Ok(respond::Meta {
            id: format!("{prefix}-{}", uuid::Uuid::new_v4().simple()),
            created: unix_now(),
            model: loaded.model_id.clone(),
            fingerprint: loaded.fingerprint(),
        })
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[derive(OpenApi)]
#[openapi(
    info(title = "rkllmd", description = "OpenAI-compatible API for LLMs on Rockchip NPUs"),
    modifiers(&BearerAuth),
    tags((name = "completions"), (name = "models"), (name = "health"), (name = "observability"))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

/// The whole application: API routes (authenticated), health and docs
/// (public), OpenAI-style fallbacks, body limit and CORS.
pub fn router(state: AppState) -> Router {
    let (api, openapi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(chat::create))
        .routes(routes!(completions::create))
        .routes(routes!(models::list))
        .routes(routes!(models::get))
        .routes(routes!(system::get))
        .split_for_parts();
    let (public, health_doc) =
        OpenApiRouter::new().routes(routes!(health::live)).routes(routes!(health::ready)).split_for_parts();
    let mut openapi = openapi;
    openapi.merge(health_doc);

    let api = api.layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_key));
    let api = api.layer(axum::middleware::from_fn(metrics::count_requests));
    let mut app = Router::new()
        .merge(api)
        .merge(public)
        .merge(docs::routes(openapi))
        .merge(metrics::main_routes(&state))
        .fallback(|uri: Uri| async move { ApiError::route_not_found(uri.path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(state.config.body_limit_bytes));
    if let Some(cors) = cors(&state.config) {
        app = app.layer(cors);
    }
    app.with_state(state)
}

fn cors(config: &Config) -> Option<CorsLayer> {
    if config.cors_origins.is_empty() {
        return None;
    }
    let origin = if config.cors_origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(config.cors_origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(origin)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers(Any),
    )
}

pub use metrics::serve_separately as serve_metrics_separately;
