//! `POST /v1/responses`: OpenAI's Responses API (create; stateless),
//! converted into a chat request and validated, run and timed exactly as
//! `/v1/chat/completions` is; the reply is the same piece stream, written
//! as a response object or as the Responses API's events.

mod convert;
mod reply;
mod tools;
pub(super) mod wire;

use super::error::{ApiError, ErrorEnvelope};
use super::extract::ApiJson;
use super::record::Counting;
use super::request::prepare;
use super::state::AppState;
use super::submit::{head_wait, submit};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
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
    let (mut chat, tools) = convert::chat_request(&req)?;
    let (model, place) = state.lease_queued(&req.model, None).await?;
    let id = format!("resp_{}", uuid::Uuid::new_v4().simple());
    if !tools.unsupported.is_empty() {
        tracing::warn!(%id, tools = %tools.unsupported.join(","), "tools of types that cannot run here were left out of the prompt");
    }
    let policy = state.settings.chat_policy();
    let job_id = id.clone();
    // A ceiling, as OpenAI's own limit is: the most the server produces, not a refusal.
    let clamped = chat.clamp_max_tokens(model.engine.limits().max_new_tokens);
    let (v, tools) = prepare(&model, move |model| match chat.validate(&job_id, model, policy) {
        Ok(v) => Ok((v, tools)),
        Err(mut e) => {
            // Chat's field names, as this request calls them.
            if e.body.param.as_deref() == Some("max_tokens") {
                e.body.param = Some("max_output_tokens".into());
            }
            Err(tools.rename(e))
        }
    })
    .await?;
    let mut echo = serde_json::Map::new();
    echo.insert("instructions".into(), json!(req.instructions));
    echo.insert("max_output_tokens".into(), json!(req.max_output_tokens));
    echo.insert("tools".into(), json!(req.tools.clone().unwrap_or_default()));
    echo.insert("tool_choice".into(), req.tool_choice.clone().unwrap_or(json!("auto")));
    echo.insert("temperature".into(), json!(req.sampling.temperature));
    echo.insert("top_p".into(), json!(req.sampling.top_p));
    // Accepted, not applied (the model decides how many calls it makes): echoed as sent.
    echo.insert("parallel_tool_calls".into(), req.extra.get("parallel_tool_calls").cloned().unwrap_or(json!(true)));
    let head = reply::Head {
        id: id.clone(),
        created_at: crate::api::state::unix_now(),
        model: model.served_id(),
        echo,
        names: tools.names,
        unsupported: tools.unsupported.len(),
    };
    let wait = head_wait(&v, state.settings.head_wait);
    let mut s = submit(&state, (model, place), v, clamped, &id, &counting, wait).await;
    s.served.ignored.extend(convert::ignored(&req));
    s.served.tools_unsupported = tools.unsupported;
    let response = match s.pieces {
        Ok(pieces) if s.streamed => reply::stream(pieces, head, state.settings.keepalive),
        Ok(pieces) => reply::collect(pieces, head).await.unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    };
    Ok(s.served.finish(response))
}
