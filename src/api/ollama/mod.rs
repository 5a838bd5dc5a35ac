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
mod pull;
mod reply;
pub(super) mod wire;

use super::error::{ApiError, ErrorBody, Said};
use super::metrics::CountedRoutes;
use super::named::NamesModel;
use super::record::Counting;
use super::request::prepare;
use super::respond::{submit, HeadWait};
use super::AppState;
use crate::metrics::Kind;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use reply::{Frame, Shape};
use std::time::Instant;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wire::{ChatRequest, Chunk, Common, ErrorReply, GenerateRequest, StreamLine};

/// An error in Ollama's words: `{"error": "…"}`, its text what clients match on.
fn error_body(status: StatusCode, said: &ErrorBody) -> ErrorReply {
    let error = match (said.code, said.overflow) {
        (Some("model_not_found"), _) if status == StatusCode::NOT_FOUND => {
            format!("model '{}' not found", said.message.split('`').nth(1).unwrap_or_default())
        }
        // Ollama's words for a prompt that does not fit (its runner's, with
        // `truncate: false`), the numbers after them.
        (_, Some(o)) => {
            format!(
                "the input length exceeds the context length ({} tokens > {}). {}",
                o.tokens, o.context, said.message
            )
        }
        _ => said.message.clone(),
    };
    ErrorReply { error }
}

/// Every error on Ollama's routes in Ollama's shape: the handlers' and
/// those met before a handler (a missing key, a foreign origin, a body too
/// large), rewritten from what the response said ([`Said`]).
pub async fn error_shape(req: Request, next: Next) -> Response {
    let ollama = req.uri().path().starts_with("/api/");
    let response = next.run(req).await;
    let Some(Said(said)) = response.extensions().get::<Said>().filter(|_| ollama).cloned() else {
        return response;
    };
    let (mut parts, _) = response.into_parts();
    let body = serde_json::to_vec(&error_body(parts.status, &said)).unwrap_or_default();
    parts.headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

/// The error shape, which `api::docs` names for every refusal on these routes.
#[derive(utoipa::OpenApi)]
#[openapi(components(schemas(ErrorReply)))]
struct OllamaDoc;

/// The routes, with their part of the OpenAPI document (`api::docs` adds
/// the responses every route can give, in Ollama's error shape).
pub fn routes(counted: &mut CountedRoutes) -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(OllamaDoc::openapi())
        .routes(routes!(info::version))
        .routes(routes!(info::tags))
        .routes(routes!(info::ps))
        .routes(routes!(info::show))
        .routes(routes!(pull::pull))
        .routes(counted.openapi(Kind::Completion, routes!(chat)))
        .routes(counted.openapi(Kind::Completion, routes!(generate)))
        .routes(counted.openapi(Kind::Embedding, routes!(embed::embed)))
        .routes(counted.openapi(Kind::Embedding, routes!(embed::legacy)))
}

/// A counted request's body as JSON, whatever its content type (as
/// Ollama's server reads it); the model it names is told to its counting.
fn parse_counted<T: serde::de::DeserializeOwned + utoipa::ToSchema + NamesModel>(
    body: &Bytes,
    counting: &Counting,
) -> Result<T, ApiError> {
    super::extract::parse_named(body, Some(counting))
}

/// Ollama's chat: NDJSON objects as tokens come (`stream`, the default), or one.
#[utoipa::path(
    post,
    path = "/api/chat",
    operation_id = "ollama_chat",
    tag = "ollama",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The reply: one object, or with `stream` (the default) one per piece and a last with `done: true`",
            content((Chunk = "application/json"), (StreamLine = "application/x-ndjson"))),
    )
)]
async fn chat(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let req: ChatRequest = parse_counted(&body, &counting)?;
    let common = req.common.clone();
    let tools_overflow = state.settings.tools_overflow;
    let validate = move |id: &str, model: &super::Loaded| convert::chat(&req, id, model, tools_overflow);
    answer(&state, &common, Shape::Chat, received, &counting, validate).await
}

/// Ollama's generate: a completion of `prompt` (with the model's template unless `raw`).
#[utoipa::path(
    post,
    path = "/api/generate",
    operation_id = "ollama_generate",
    tag = "ollama",
    request_body = GenerateRequest,
    responses(
        (status = 200, description = "The reply: one object, or with `stream` (the default) one per piece and a last with `done: true`",
            content((Chunk = "application/json"), (StreamLine = "application/x-ndjson"))),
    )
)]
async fn generate(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    body: Bytes,
) -> Result<Response, ApiError> {
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
) -> Result<Response, ApiError> {
    if common.model.is_empty() {
        return Err(ApiError::invalid_value("model", "model is required"));
    }
    let keep_alive = convert::keep_alive(common.keep_alive.as_ref())?;
    convert::check_options(common.options.as_ref())?;
    // Checked here too, so that a request that only loads the model refuses a bad one as well.
    convert::think(common.think.as_ref())?;
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
