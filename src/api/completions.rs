//! `POST /v1/completions` (legacy text completions).

use super::error::{ApiError, ErrorEnvelope};
use super::extract::ApiJson;
use super::record::Counting;
use super::request::{prepare, session_key, CompletionRequest};
use super::respond::{respond, Shape};
use super::response::TextCompletion;
use super::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;

/// Creates a text completion of a raw prompt (no chat template);
/// `max_tokens` defaults to 16 as in OpenAI's API.
#[utoipa::path(
    post,
    path = "/v1/completions",
    tag = "completions",
    request_body = CompletionRequest,
    responses(
        (status = 200, description = "A text_completion, or with `stream: true` a text/event-stream of them", body = TextCompletion),
        (status = 400, description = "Invalid request", body = ErrorEnvelope),
        (status = 404, description = "Unknown model", body = ErrorEnvelope),
        (status = 429, description = "Queue full", body = ErrorEnvelope),
        (status = 500, description = "The model failed to load (`model_load_failed`) or the runtime failed", body = ErrorEnvelope),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    headers: HeaderMap,
    ApiJson(mut req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    session_key(&mut req.common, &headers)?;
    let (model, place) = state.lease_queued(&req.common.model, None).await?;
    let meta = AppState::meta("cmpl", &model);
    let id = meta.id.clone();
    let validated = prepare(&model, move |model| req.validate(&id, model)).await?;
    respond(&state, model, place, validated, Shape::Text, meta, &counting).await
}
