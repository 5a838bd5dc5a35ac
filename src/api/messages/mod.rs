//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's
//! Messages API, converted into a chat request and validated, run and timed
//! exactly as `/v1/chat/completions` is; the reply is the same piece
//! stream, written as a message or as the Messages API's events. Errors
//! have Anthropic's shape and the daemon's one status table.

mod convert;
pub(super) mod error;
mod reply;
mod system;
pub(super) mod wire;

use super::body::Body;
use super::error::ApiError;
use super::record::Counting;
use super::request::prepare;
use super::state::AppState;
use super::submit::{head_wait, submit};
use crate::conversation::ToolsOverflow;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use error::AnthropicError;
use wire::{CountTokens, CreateMessage, ErrorResponse, TokenCount};

fn parse<T: serde::de::DeserializeOwned + utoipa::ToSchema>(body: &[u8]) -> Result<T, AnthropicError> {
    super::extract::parse(body).map_err(AnthropicError)
}

/// Creates a message (`stream: true` for the Messages API's server-sent events).
#[utoipa::path(
    post,
    path = "/v1/messages",
    tag = "completions",
    request_body = CreateMessage,
    responses(
        (status = 200, description = "A message, or with `stream: true` a text/event-stream of message_start … message_stop", body = Object),
        (status = 400, description = "Invalid request", body = ErrorResponse),
        (status = 404, description = "Unknown model", body = ErrorResponse),
        (status = 429, description = "Queue full", body = ErrorResponse),
        (status = 500, description = "The model failed to load or the runtime failed", body = ErrorResponse),
        (status = 503, description = "The model is loading or the server is shutting down", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    Body(body): Body,
) -> Result<Response, AnthropicError> {
    let all_tools_sent = state.settings.tools_overflow == ToolsOverflow::Refuse;
    super::extract::refuse_oversized(&body, &state, Some(&counting), all_tools_sent)?;
    let req: CreateMessage = super::extract::parse_named(&body, Some(&counting)).map_err(AnthropicError)?;
    let mut chat = convert::chat_request(&req)?;
    let (model, place) = state.lease_queued(&req.conversation.model, None).await?;
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    let (policy, job_id) = (state.settings.chat_policy(), id.clone());
    let (v, clamped) = prepare(&model, move |model| {
        let (max_tokens, clamped) = super::ceiling::clamp(req.max_tokens, model.engine.limits().max_new_tokens);
        chat.common.max_tokens = Some(max_tokens);
        system::place(&mut chat, &model.prompter);
        let v = chat.validate(&job_id, model, policy).map_err(|e| system::refused(e, &req.conversation, model))?;
        Ok((v, clamped))
    })
    .await?;
    let head = reply::Head { id: id.clone(), model: model.served_id(), clamped };
    let wait = head_wait(&v, state.settings.head_wait);
    let s = submit(&state, (model, place), v, clamped, &id, &counting, wait).await;
    let response = match s.pieces {
        Ok(pieces) if s.streamed => reply::stream(pieces, head, state.settings.keepalive),
        Ok(pieces) => reply::collect(pieces, head).await,
        Err(e) => AnthropicError(e).into_response(),
    };
    Ok(s.served.finish(response))
}

/// Counts the prompt a message request would send (its tools included), by the model's tokenizer.
#[utoipa::path(
    post,
    path = "/v1/messages/count_tokens",
    tag = "completions",
    request_body = CountTokens,
    responses(
        (status = 200, description = "The prompt's tokens", body = TokenCount),
        (status = 400, description = "Invalid request", body = ErrorResponse),
        (status = 404, description = "Unknown model", body = ErrorResponse),
        (status = 500, description = "The model failed to load", body = ErrorResponse),
        (status = 501, description = "The model has no tokenizer.json", body = ErrorResponse),
        (status = 503, description = "The model is loading or the server is shutting down", body = ErrorResponse),
    ),
    security(("bearer" = []))
)]
pub async fn count_tokens(State(state): State<AppState>, Body(body): Body) -> Result<Json<TokenCount>, AnthropicError> {
    // Every tool is counted (`ChatCompletionRequest::count_tokens`).
    super::extract::refuse_oversized(&body, &state, None, true)?;
    let req: CountTokens = parse(&body)?;
    let chat = convert::conversation(&req.conversation)?;
    let model = state.lease(&req.conversation.model, None).await?;
    let id = model.served_id();
    let counted = prepare(&model, move |model| {
        let mut chat = chat;
        system::place(&mut chat, &model.prompter);
        chat.count_tokens(model)
    })
    .await?;
    let input_tokens = counted.ok_or_else(|| {
        ApiError::not_supported(format!(
            "The model `{id}` has no tokenizer.json to count with: put the one from its Hugging Face repository next to the .rkllm file or set `tokenizer`."
        ))
    })?;
    Ok(Json(TokenCount { input_tokens }))
}
