//! `POST /v1/chat/completions`.

use super::error::{ApiError, ErrorEnvelope};
use super::extract::ApiJson;
use super::record::Counting;
use super::request::{prepare, session_key, ChatCompletionRequest};
use super::respond::{respond, Meta, Shape};
use super::response::ChatCompletion;
use super::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;

/// Creates a chat completion (`stream: true` for server-sent events).
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "completions",
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "A chat.completion, or with `stream: true` a text/event-stream of chat.completion.chunk", body = ChatCompletion),
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
    ApiJson(mut req): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    session_key(&mut req.common, &headers)?;
    let (model, place) = state.lease_queued(&req.common.model, None).await?;
    let meta = Meta::new("chatcmpl", &model);
    let (id, policy) = (meta.id.clone(), state.settings.chat_policy());
    let clamped = req.clamp_max_tokens(model.engine.limits().max_new_tokens);
    let validated = prepare(&model, move |model| req.validate(&id, model, policy)).await?;
    Ok(respond(&state, (model, place), validated, clamped, Shape::Chat, meta, &counting).await)
}
