//! The OpenAI-compatible HTTP surface. Handlers validate, hand the engine a
//! job and shape its events into responses; they never touch FFI.

mod auth;
mod body;
mod ceiling;
mod chat;
mod completions;
mod cross_site;
mod doc_models;
mod docs;
mod embeddings;
pub mod error;
mod extract;
mod finish;
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
mod route;
mod runtime_info;
mod schema_rules;
mod state;
mod status;
mod structured;
mod submit;
mod system;
mod tokenize;

#[cfg(test)]
mod tests;

use crate::metrics::Kind;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use embeddings::EmbeddingRequest;
use error::{ApiError, Refuse};
use messages::wire::{CountTokens, CreateMessage};
use request::{ChatCompletionRequest, CompletionRequest};
use rerank::RerankRequest;
use responses::wire::CreateResponse;
use route::{Errors, Route, Routes};
pub use state::{mark_instance, unix_now, AppState, Settings};
use std::sync::Arc;
use tokenize::{DetokenizeRequest, TokenizeRequest};
use tower_http::cors::{AllowOrigin, CorsLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

#[derive(OpenApi)]
#[openapi(
    info(title = "rkllmd", description = "OpenAI-compatible API for LLMs on Rockchip NPUs"),
    tags((name = "completions"), (name = "embeddings"), (name = "models"), (name = "health"), (name = "observability"))
)]
struct ApiDoc;

/// The route table: the API's routes, each described in `table` where it
/// is registered (`route.rs`), and what their handlers' annotations say of them.
fn api_routes(table: &mut Routes) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(table.add(Route::GENERATION.takes::<ChatCompletionRequest>(), routes!(chat::create)))
        .routes(table.add(Route::GENERATION.takes::<CompletionRequest>(), routes!(completions::create)))
        .routes(table.add(Route::GENERATION.takes::<CreateResponse>(), routes!(responses::create)))
        .routes(table.add(Route::GENERATION.anthropic().takes::<CreateMessage>(), routes!(messages::create)))
        .routes(table.add(Route::JSON.anthropic().takes::<CountTokens>(), routes!(messages::count_tokens)))
        .routes(table.add(Route::counted(Kind::Embedding).takes::<EmbeddingRequest>(), routes!(embeddings::create)))
        .routes(table.add(Route::counted(Kind::Rerank).takes::<RerankRequest>(), routes!(rerank::create)))
        .routes(table.add(Route::counted(Kind::Rerank).takes::<RerankRequest>(), routes!(rerank::create_unversioned)))
        .routes(table.add(Route::JSON, routes!(models::list)))
        .routes(table.add(Route::JSON, routes!(models::get)))
        .routes(table.add(Route::JSON, routes!(models::load)))
        .routes(table.add(Route::JSON, routes!(models::unload)))
        .routes(table.add(Route::JSON, routes!(system::get)))
        .routes(table.add(Route::JSON.takes::<TokenizeRequest>(), routes!(tokenize::tokenize)))
        .routes(table.add(Route::JSON.takes::<DetokenizeRequest>(), routes!(tokenize::detokenize)))
        .merge(ollama::routes(table))
        .split_for_parts()
}

/// The main listener's routes, each described in the returned table: the
/// API's, health, the document and its UI, `/metrics`.
fn main_routes(state: &AppState) -> (Router<AppState>, Routes) {
    let mut table = Routes::default();
    let (api, mut openapi) = api_routes(&mut table);
    let (health, health_doc) = OpenApiRouter::new()
        .routes(table.add(Route::PUBLIC, routes!(health::live)))
        .routes(table.add(Route::PUBLIC, routes!(health::ready)))
        .split_for_parts();
    openapi.merge(health_doc);
    let doc_settings = docs::DocSettings { api_key: state.settings.api_key.is_some() };
    docs::complete(&mut openapi, &doc_settings, &table);
    let ui = docs::ui_dir(state.settings.docs_dir.as_deref());
    let docs = docs::routes(openapi, ui, state.clone(), &mut table);
    let metrics = metrics::main_routes(state, &mut table);
    (api.merge(health).merge(docs).merge(metrics), table)
}

/// The whole application: the routes (the key on those described as
/// guarded), OpenAI-style fallbacks, body limit and CORS.
pub fn router(state: AppState) -> Router {
    let (routes, table) = main_routes(&state);
    let key = auth::Key::new(state.settings.api_key.as_deref());
    guarded(routes, table, key, state)
}

/// The Ollama clients' listener (`ollama_listen`): the Ollama routes and
/// the two OpenAI ones Ollama serves and VS Code Copilot calls there
/// (`/v1/chat/completions`, `/v1/models`), under that listener's own key
/// (`ollama_api_key`; `None`: no key), for clients that cannot send one.
/// `GET /` answers as Ollama's does, for clients that probe it.
pub fn ollama_router(state: AppState, key: Option<&str>) -> Router {
    let mut table = Routes::default();
    let (api, _) = ollama::routes(&mut table)
        .routes(table.add(Route::GENERATION.takes::<ChatCompletionRequest>(), routes!(chat::create)))
        .routes(table.add(Route::JSON, routes!(models::list)))
        .split_for_parts();
    let routes = table.public(api, "/", axum::routing::get(|| async { "Ollama is running" }));
    guarded(routes, table, auth::Key::new(key), state)
}

/// A listener's routes behind what guards every one: `key` on the routes
/// `table` describes as guarded, request counting, the body limit, CORS,
/// the Host and Origin checks, each refusal in its route's error shape,
/// and the instance header.
fn guarded(routes: Router<AppState>, table: Routes, key: auth::Key, state: AppState) -> Router {
    let table = Arc::new(table);
    let lock = auth::Lock { key: key.clone(), routes: table.clone() };
    let counter = metrics::Counter::new(table.clone(), state.clone());
    // Layered before the fallbacks are set: they wrap the routes only.
    let routes = routes
        .layer(axum::middleware::from_fn_with_state(lock, auth::require_key))
        .layer(axum::middleware::from_fn_with_state(counter, metrics::count_requests));
    let mut app = routes
        .fallback(|req: Request| async move { Refuse::of(&req).with(ApiError::route_not_found(req.uri().path())) })
        .method_not_allowed_fallback(
            |req: Request| async move { Refuse::of(&req).with(ApiError::method_not_allowed()) },
        )
        .layer(DefaultBodyLimit::max(state.settings.body_limit_bytes))
        .layer(axum::middleware::from_fn_with_state(state.clone(), refuse_announced_oversize));
    if let Some(cors) = cors(&state.settings.cors_origins) {
        app = app.layer(cors);
    }
    // A foreign origin's preflight is refused too (outside CORS); the
    // instance header is on every response, the refusals included.
    let guard = cross_site::Guard { state: state.clone(), key };
    app.layer(axum::middleware::from_fn_with_state(guard, cross_site::check))
        .layer(axum::middleware::from_fn_with_state(table, refusals))
        .layer(axum::middleware::from_fn(instance_header))
        .with_state(state)
}

/// Puts on each request how its refusals are written (`Refuse`): in its
/// route's error shape (`route.rs`), before any guard can refuse it; and
/// on its response, for the listener's 408 when the body came too slowly.
async fn refusals(State(table): State<Arc<Routes>>, mut req: Request, next: Next) -> Response {
    let refuse = match table.errors_for(req.uri().path()) {
        Errors::OpenAi => Refuse(IntoResponse::into_response),
        Errors::Ollama => Refuse(ollama::error::refusal),
        Errors::Anthropic => Refuse(messages::error::refusal),
    };
    req.extensions_mut().insert(refuse);
    let mut response = next.run(req).await;
    response.extensions_mut().insert(refuse);
    response
}

/// Names the board on every response (`state::mark_instance`).
async fn instance_header(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    mark_instance(&mut response);
    response
}

/// A body whose `Content-Length` is over the limit is refused before any of
/// it is read (the body limit alone would wait for the bytes to arrive).
async fn refuse_announced_oversize(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let limit = state.settings.body_limit_bytes;
    let announced = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Refuse::of(&req).with(ApiError::payload_too_large(limit));
    }
    next.run(req).await
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
