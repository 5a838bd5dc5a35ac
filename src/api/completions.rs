//! `POST /v1/completions` (legacy text completions).

use super::error::{ApiError, ErrorEnvelope};
use super::extract::ApiJson;
use super::record::Counting;
use super::request::{prepare, session_key, CompletionRequest};
use super::respond::{respond, Meta, Shape};
use super::response::TextCompletion;
use super::state::AppState;
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
        (status = 500, description = "The runtime failed, or the model is larger than the memory budget", body = ErrorEnvelope),
        (status = 503, description = "Not run, retryable elsewhere (`Retry-After`): loading, shutting down, the model failed to load, the runtime unavailable", body = ErrorEnvelope),
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
    let meta = Meta::new("cmpl", &model);
    let id = meta.id.clone();
    // A ceiling, as on every front end (`ceiling.rs`).
    let limit = model.engine.limits().max_new_tokens;
    let clamped = req.common.max_tokens.and_then(|asked| {
        let (served, clamped) = super::ceiling::clamp(asked, limit);
        req.common.max_tokens = Some(served);
        clamped
    });
    let validated = prepare(&model, move |model| req.validate(&id, model)).await?;
    Ok(respond(&state, (model, place), validated, clamped, Shape::Text, meta, &counting).await)
}
