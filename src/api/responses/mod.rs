//! `POST /v1/responses`: OpenAI's Responses API (create; stateless),
//! converted into a chat request and validated, run and timed exactly as
//! `/v1/chat/completions` is; the reply is the same piece stream, written
//! as a response object or as the Responses API's events.

mod convert;
mod reply;
pub(super) mod wire;

use super::error::{ApiError, ErrorEnvelope};
use super::extract::ApiJson;
use super::record::Counting;
use super::request::prepare;
use super::respond::{head_wait, submit, tools_dropped_header};
use super::AppState;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use serde_json::json;
pub use wire::CreateResponse;

/// Creates a model response (`stream: true` for the Responses API's server-sent events).
#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "completions",
    request_body = CreateResponse,
    responses(
        (status = 200, description = "A response object, or with `stream: true` a text/event-stream of response.* events", body = Object),
        (status = 400, description = "Invalid request (`previous_response_id`: responses are not stored)", body = ErrorEnvelope),
        (status = 404, description = "Unknown model", body = ErrorEnvelope),
        (status = 429, description = "Queue full", body = ErrorEnvelope),
        (status = 500, description = "The model failed to load or the runtime failed", body = ErrorEnvelope),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    ApiJson(req): ApiJson<CreateResponse>,
) -> Result<Response, ApiError> {
    let chat = convert::chat_request(&req)?;
    let (model, place) = state.lease_queued(&req.model, None).await?;
    let id = format!("resp_{}", uuid::Uuid::new_v4().simple());
    let policy = state.settings.chat_policy();
    let job_id = id.clone();
    let v = prepare(&model, move |model| chat.validate(&job_id, model, policy)).await?;
    let mut echo = serde_json::Map::new();
    echo.insert("instructions".into(), json!(req.instructions));
    echo.insert("max_output_tokens".into(), json!(req.max_output_tokens));
    echo.insert("tools".into(), json!(req.tools.clone().unwrap_or_default()));
    echo.insert("tool_choice".into(), req.tool_choice.clone().unwrap_or(json!("auto")));
    echo.insert("temperature".into(), json!(req.sampling.temperature));
    echo.insert("top_p".into(), json!(req.sampling.top_p));
    let head = reply::Head { id: id.clone(), created_at: super::unix_now(), model: model.served_id(), echo };
    let wait = head_wait(&v, state.settings.head_wait);
    let s = submit(&state, model, place, v, &id, &counting, wait).await;
    let mut response = if s.streamed {
        reply::stream(s.pieces?, head, state.settings.keepalive)
    } else {
        reply::collect(s.pieces?, head).await?
    };
    tools_dropped_header(&mut response, s.tools_dropped);
    Ok(response)
}
