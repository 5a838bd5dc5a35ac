//! The Ollama API: `GET /api/version`, `GET /api/tags`, `GET /api/ps`,
//! `POST /api/show`, `POST /api/chat`, `POST /api/generate`, `POST
//! /api/embed` (and the legacy `/api/embeddings`), with Ollama's field
//! names, units and `{"error": "…"}` bodies. A request is converted into
//! the OpenAI request types and validated there (`convert`); its reply is
//! the same piece stream the OpenAI endpoints read (`reply`); embeddings
//! take the path of `/v1/embeddings` (`embed`).

mod convert;
mod embed;
mod info;
mod reply;
mod wire;

use super::error::ApiError;
use super::metrics::CountedRoutes;
use super::named::NamesModel;
use super::record::Counting;
use super::request::prepare;
use super::respond::{submit, HeadWait};
use super::AppState;
use crate::metrics::Kind;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use reply::{Frame, Shape};
use std::time::Instant;
use wire::{ChatRequest, Common, GenerateRequest};

/// An error as Ollama sends it: `{"error": "…"}` with the status of the
/// daemon's one status table.
pub struct OllamaError(pub ApiError);

impl From<ApiError> for OllamaError {
    fn from(e: ApiError) -> Self {
        OllamaError(e)
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        let e = self.0;
        let message = match e.body.code {
            // Ollama's own wording, which clients match on.
            Some("model_not_found") if e.status == StatusCode::NOT_FOUND => {
                format!("model '{}' not found", e.body.message.split('`').nth(1).unwrap_or_default())
            }
            _ => e.body.message.clone(),
        };
        let mut response = (e.status, axum::Json(serde_json::json!({ "error": message }))).into_response();
        response.extensions_mut().insert(super::error::Said(e.body));
        response
    }
}

pub fn routes(counted: &mut CountedRoutes) -> Router<AppState> {
    let router = Router::new()
        .route("/api/version", get(info::version))
        .route("/api/tags", get(info::tags))
        .route("/api/ps", get(info::ps))
        .route("/api/show", post(info::show));
    let router = counted.route(router, Kind::Completion, "/api/chat", post(chat));
    let router = counted.route(router, Kind::Completion, "/api/generate", post(generate));
    let router = counted.route(router, Kind::Embedding, "/api/embed", post(embed::embed));
    counted.route(router, Kind::Embedding, "/api/embeddings", post(embed::legacy))
}

/// Ollama's server takes any content type: the body is parsed as JSON.
pub fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, OllamaError> {
    super::extract::parse(body).map_err(OllamaError)
}

/// A counted request's body, parsed as [`parse`] does; the model it names is told to its counting.
pub fn parse_counted<T: serde::de::DeserializeOwned + NamesModel>(
    body: &Bytes,
    counting: &Counting,
) -> Result<T, OllamaError> {
    super::extract::parse_named(body, Some(counting)).map_err(OllamaError)
}

async fn chat(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    body: Bytes,
) -> Result<Response, OllamaError> {
    let received = Instant::now();
    let req: ChatRequest = parse_counted(&body, &counting)?;
    let common = req.common.clone();
    let tools_overflow = state.settings.tools_overflow;
    let validate = move |id: &str, model: &super::Loaded| convert::chat(&req, id, model, tools_overflow);
    answer(&state, &common, Shape::Chat, received, &counting, validate).await
}

async fn generate(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    body: Bytes,
) -> Result<Response, OllamaError> {
    let received = Instant::now();
    let req: GenerateRequest = parse_counted(&body, &counting)?;
    let common = req.common.clone();
    let validate = move |id: &str, model: &super::Loaded| convert::generate(&req, id, model);
    answer(&state, &common, Shape::Generate, received, &counting, validate).await
}

/// Loads the model, converts the request, and answers with NDJSON or one
/// object. A request with nothing to generate only loads the model (or
/// with `keep_alive: 0` unloads it), as Ollama's does.
async fn answer(
    state: &AppState,
    common: &Common,
    shape: Shape,
    received: Instant,
    counting: &Counting,
    validate: impl FnOnce(&str, &super::Loaded) -> Result<Option<super::request::Validated>, ApiError> + Send + 'static,
) -> Result<Response, OllamaError> {
    if common.model.is_empty() {
        return Err(ApiError::invalid_value("model", "model is required").into());
    }
    let keep_alive = convert::keep_alive(common.keep_alive.as_ref())?;
    let (model, place) = state.lease_queued(&common.model, keep_alive).await?;
    let frame = Frame { shape, model: model.served_id(), load: model.load_duration };
    let id = format!("ollama-{}", uuid::Uuid::new_v4().simple());
    let for_job = id.clone();
    let Some(v) = prepare(&model, move |model| validate(&for_job, model)).await? else {
        let unload = keep_alive.is_some_and(|k| k.is_zero());
        drop(model);
        if unload {
            state.models()?.unload(&frame.model).await.map_err(|e| super::registry_error(&e))?;
        }
        let empty = frame.chunk(String::new(), String::new(), Vec::new());
        let stats = wire::Stats {
            total_duration: received.elapsed().as_nanos() as u64,
            load_duration: frame.load.as_nanos() as u64,
            ..Default::default()
        };
        let done = frame.done(empty, if unload { "unload" } else { "load" }, Some(stats));
        return Ok(axum::Json(done).into_response());
    };
    let wait = HeadWait::RunStart(state.settings.head_wait);
    let s = submit(state, model, place, v, &id, counting, wait).await;
    let mut response =
        if s.streamed { reply::stream(s.pieces?, frame) } else { reply::collect(s.pieces?, frame).await };
    super::respond::tools_dropped_header(&mut response, s.tools_dropped);
    Ok(response)
}
