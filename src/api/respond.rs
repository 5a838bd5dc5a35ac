//! OpenAI's two completion endpoints' replies: chat completions and text
//! completions, as an SSE stream or as one JSON body.

use super::ceiling::Clamped;
use super::error::ApiError;
use super::record::Counting;
use super::reply::{Piece, Summary};
use super::request::Validated;
use super::response::*;
use super::state::{fingerprint, unix_now, AppState};
use super::submit::{head_wait, submit, Submitted};
use crate::conversation::Delta as ReplyDelta;
use crate::engine::Place;
use crate::registry::Lease;
use axum::http::HeaderName;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::convert::Infallible;
use std::time::Duration;

/// Which endpoint is answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Chat,
    Text,
}

/// What every chunk and body of one response repeats.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub fingerprint: String,
}

impl Meta {
    /// What every chunk of a reply by this model (or adapter) repeats.
    pub fn new(prefix: &str, model: &Lease) -> Meta {
        Meta {
            id: format!("{prefix}-{}", uuid::Uuid::new_v4().simple()),
            created: unix_now(),
            model: model.served_id(),
            fingerprint: fingerprint(model),
        }
    }
}

/// Submits the job to the leased model (`submit`); the lease rides with
/// the reply until its last piece, so the model is not unloaded under a stream.
pub async fn respond(
    state: &AppState,
    leased: (Lease, Place),
    v: Validated,
    clamped: Option<Clamped>,
    shape: Shape,
    meta: Meta,
    counting: &Counting,
) -> Response {
    let wait = head_wait(&v, state.settings.head_wait);
    let include_usage = v.include_usage;
    let Submitted { pieces, streamed, served } = submit(state, leased, v, clamped, &meta.id, counting, wait).await;
    let response = match pieces {
        Ok(pieces) if streamed => stream(pieces, shape, meta, include_usage, state.settings.keepalive).into_response(),
        Ok(pieces) => collect(pieces, shape, meta).await.unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    };
    served.finish(response)
}

async fn collect(
    pieces: impl futures_util::Stream<Item = Piece>,
    shape: Shape,
    meta: Meta,
) -> Result<Response, ApiError> {
    let (reply, Summary { finish_reason, usage, timings, .. }) = super::reply::collect(pieces).await?;
    let finish_reason = Some(finish_reason);
    let Meta { id, created, model, fingerprint } = meta;
    let body = match shape {
        Shape::Chat => serde_json::to_value(ChatCompletion {
            id,
            object: "chat.completion",
            created,
            model,
            system_fingerprint: fingerprint,
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage::from_reply(reply),
                finish_reason,
                logprobs: None,
            }],
            usage,
            timings,
        }),
        Shape::Text => serde_json::to_value(TextCompletion {
            id,
            object: "text_completion",
            created,
            model,
            system_fingerprint: fingerprint,
            choices: vec![TextChoice { index: 0, text: reply.content, finish_reason, logprobs: None }],
            usage,
            timings,
        }),
    };
    Ok(axum::Json(body.map_err(|e| ApiError::runtime(e.to_string()))?).into_response())
}

fn stream(
    pieces: impl futures_util::Stream<Item = Piece> + Send + 'static,
    shape: Shape,
    meta: Meta,
    include_usage: bool,
    keepalive: Duration,
) -> impl IntoResponse {
    let events = async_stream::stream! {
        let mut pieces = std::pin::pin!(pieces);
        let mut first = true;
        while let Some(piece) = pieces.next().await {
            match piece {
                // Past `head_wait_secs` the head went out before the run started.
                Piece::Started => {}
                Piece::Delta(delta) => {
                    yield chunk(&meta, shape, Some(delta), first, None, None, None);
                    first = false;
                }
                Piece::Failed(e) => {
                    yield json_event(&e.envelope());
                    yield Event::default().data("[DONE]");
                }
                Piece::Finished(finished) => {
                    let Summary { finish_reason, usage, timings, .. } = *finished;
                    let finish_reason = Some(finish_reason);
                    // The last chunk before [DONE] carries usage and timings in every stream.
                    if include_usage {
                        yield chunk(&meta, shape, None, false, finish_reason, None, None);
                        yield usage_chunk(&meta, shape, usage, timings);
                    } else {
                        yield chunk(&meta, shape, None, false, finish_reason, Some(usage), Some(timings));
                    }
                    yield Event::default().data("[DONE]");
                }
            }
        }
    };
    let sse =
        Sse::new(events.map(Ok::<_, Infallible>)).keep_alive(KeepAlive::new().interval(keepalive).text("keep-alive"));
    ([(HeaderName::from_static("x-accel-buffering"), "no")], sse)
}

fn json_event(value: &impl serde::Serialize) -> Event {
    Event::default()
        .data(serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":{{\"message\":\"{e}\"}}}}")))
}

/// A token's chunk (`step: Some`) or the finish chunk (`finish_reason: Some`).
fn chunk(
    meta: &Meta,
    shape: Shape,
    step: Option<ReplyDelta>,
    first: bool,
    finish_reason: Option<&'static str>,
    usage: Option<Usage>,
    timings: Option<crate::metrics::Timings>,
) -> Event {
    let Meta { id, created, model, fingerprint } = meta;
    match shape {
        Shape::Chat => {
            let delta = step.map_or_else(ChunkDelta::default, |step| ChunkDelta::from_step(step, first));
            json_event(&Chunk {
                id,
                object: "chat.completion.chunk",
                created: *created,
                model,
                system_fingerprint: fingerprint,
                choices: vec![ChunkChoice { index: 0, delta, finish_reason, logprobs: None }],
                usage,
                timings,
            })
        }
        Shape::Text => json_event(&Chunk {
            id,
            object: "text_completion",
            created: *created,
            model,
            system_fingerprint: fingerprint,
            // The legacy endpoint reads replies raw: everything is in `content`.
            choices: vec![TextChoice {
                index: 0,
                text: step.map(|s| s.content).unwrap_or_default(),
                finish_reason,
                logprobs: None,
            }],
            usage,
            timings,
        }),
    }
}

/// The `include_usage` chunk: no choices, usage and timings.
fn usage_chunk(meta: &Meta, shape: Shape, usage: Usage, timings: crate::metrics::Timings) -> Event {
    let Meta { id, created, model, fingerprint } = meta;
    let object = match shape {
        Shape::Chat => "chat.completion.chunk",
        Shape::Text => "text_completion",
    };
    json_event(&Chunk::<ChunkChoice> {
        id,
        object,
        created: *created,
        model,
        system_fingerprint: fingerprint,
        choices: vec![],
        usage: Some(usage),
        timings: Some(timings),
    })
}
