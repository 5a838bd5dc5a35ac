//! The Ollama API: `GET /api/version`, `GET /api/tags`, `GET /api/ps`,
//! `POST /api/show`, `POST /api/chat`, `POST /api/generate`, `POST
//! /api/embed` (and the legacy `/api/embeddings`), with Ollama's field
//! names, units and `{"error": "…"}` bodies. A request is converted into
//! the OpenAI request types and validated there (`convert`); its reply is
//! the same piece stream the OpenAI endpoints read (`reply`); embeddings
//! take the path of `/v1/embeddings` (`embed`).

mod convert;
mod embed;
pub(super) mod error;
mod info;
mod pull;
mod reply;
pub(super) mod wire;

use super::error::ApiError;
use super::record::Counting;
use super::request::prepare;
use super::route::{Route, Routes};
use super::state::AppState;
use super::submit::{submit, HeadWait};
use crate::api::body::Body;
use crate::conversation::ToolsOverflow;
use crate::metrics::Kind;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use error::OllamaError;
use reply::{Frame, Shape};
use std::time::Instant;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wire::{
    ChatRequest, Chunk, Common, EmbedRequest, ErrorReply, GenerateRequest, LegacyEmbedRequest, ShowRequest, StreamLine,
};

/// The error shape, which `api::docs` names for every refusal on these routes.
#[derive(utoipa::OpenApi)]
#[openapi(components(schemas(ErrorReply)))]
struct OllamaDoc;

/// The routes, with their part of the OpenAPI document (`api::docs` adds
/// the responses every route can give, in Ollama's error shape).
pub fn routes(table: &mut Routes) -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(OllamaDoc::openapi())
        .routes(table.add(Route::JSON.ollama(), routes!(info::version)))
        .routes(table.add(Route::JSON.ollama(), routes!(info::tags)))
        .routes(table.add(Route::JSON.ollama(), routes!(info::ps)))
        .routes(table.add(Route::JSON.ollama().takes::<ShowRequest>(), routes!(info::show)))
        .routes(table.add(Route::JSON.ollama().takes::<pull::PullRequest>(), routes!(pull::pull)))
        .routes(table.add(Route::GENERATION.ollama().takes::<ChatRequest>(), routes!(chat)))
        .routes(table.add(Route::GENERATION.ollama().takes::<GenerateRequest>(), routes!(generate)))
        .routes(table.add(Route::counted(Kind::Embedding).ollama().takes::<EmbedRequest>(), routes!(embed::embed)))
        .routes(
            table.add(Route::counted(Kind::Embedding).ollama().takes::<LegacyEmbedRequest>(), routes!(embed::legacy)),
        )
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
    Body(body): Body,
) -> Result<Response, OllamaError> {
    let received = Instant::now();
    let tools_overflow = state.settings.tools_overflow;
    let all_tools_sent = tools_overflow == ToolsOverflow::Refuse;
    super::extract::refuse_oversized(&body, &state, Some(&counting), all_tools_sent)?;
    let req: ChatRequest = convert::parse_counted(&body, &counting)?;
    let common = req.common.clone();
    let validate = move |id: &str, model: &crate::registry::Loaded| convert::chat(&req, id, model, tools_overflow);
    Ok(answer(&state, &common, Shape::Chat, received, &counting, validate).await?)
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
    Body(body): Body,
) -> Result<Response, OllamaError> {
    let received = Instant::now();
    let req: GenerateRequest = convert::parse_counted(&body, &counting)?;
    let common = req.common.clone();
    let validate = move |id: &str, model: &crate::registry::Loaded| convert::generate(&req, id, model);
    Ok(answer(&state, &common, Shape::Generate, received, &counting, validate).await?)
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
    validate: impl FnOnce(&str, &crate::registry::Loaded) -> Result<Option<super::request::Validated>, ApiError>
        + Send
        + 'static,
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
    // `num_predict` above the server's limit is served as a ceiling (`convert::common`), and said.
    let limit = model.engine.limits().max_new_tokens;
    let asked = common.options.as_ref().and_then(|o| o.num_predict).filter(|&n| n > 0);
    let clamped = asked.and_then(|n| super::ceiling::clamp(u32::try_from(n).unwrap_or(u32::MAX), limit).1);
    let Some(v) = prepare(&model, move |model| validate(&for_job, model)).await? else {
        let unload = keep_alive.is_some_and(|k| k.is_zero());
        drop(model);
        if unload {
            state.unload(&frame.model).await?;
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
    let s = submit(state, (model, place), v, clamped, &id, counting, wait).await;
    let response = match s.pieces {
        Ok(pieces) if s.streamed => reply::stream(pieces, frame),
        Ok(pieces) => reply::collect(pieces, frame).await,
        Err(e) => OllamaError(e).into_response(),
    };
    Ok(s.served.finish(response))
}
