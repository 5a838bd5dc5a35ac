//! The part both completion endpoints share: submit the job, then answer as
//! an SSE stream or as one JSON body.

use super::error::ApiError;
use super::record::{Counting, Record};
use super::reply::{pieces, Piece, Summary};
use super::request::Validated;
use super::response::*;
use super::AppState;
use crate::conversation::{Delta as ReplyDelta, Reply};
use crate::engine::Place;
use crate::registry::Lease;
use axum::http::{HeaderName, HeaderValue};
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

/// Tool definitions left out of the prompt (docs/api.md, "Tools that do not fit").
const TOOLS_DROPPED: HeaderName = HeaderName::from_static("x-rkllmd-tools-dropped");
const IGNORED_PARAMS: HeaderName = HeaderName::from_static("x-rkllmd-ignored-params");
/// How the prompt was made (docs/api.md, "Models without a chat template").
const TEMPLATE_MODE: HeaderName = HeaderName::from_static("x-rkllmd-template-mode");

/// Submits the job to the leased model; the lease rides with the reply
/// until its last piece, so the model is not unloaded under a stream.
pub async fn respond(
    state: &AppState,
    model: Lease,
    place: Place,
    v: Validated,
    shape: Shape,
    meta: Meta,
    counting: &Counting,
) -> Result<Response, ApiError> {
    let template_mode = HeaderValue::from_static(model.prompter.mode().as_str());
    let wait = head_wait(&v, state.settings.head_wait);
    let include_usage = v.include_usage;
    let Submitted { pieces, streamed, tools_dropped, ignored } =
        submit(state, model, place, v, &meta.id, counting, wait).await;
    let mut response = match pieces {
        Ok(pieces) if streamed => stream(pieces, shape, meta, include_usage, state.settings.keepalive).into_response(),
        Ok(pieces) => collect(pieces, shape, meta).await.unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    };
    response.headers_mut().insert(TEMPLATE_MODE, template_mode);
    tools_dropped_header(&mut response, tools_dropped);
    ignored_params_header(&mut response, &ignored);
    Ok(response)
}

/// Until when a stream's response head is held.
#[derive(Debug, Clone, Copy)]
pub enum HeadWait {
    /// The run's start, for at most this long (`head_wait_secs`).
    RunStart(Duration),
    /// The first piece of the reply, however long it takes.
    FirstPiece,
}

/// How long a stream's head waits. Without a tokenizer, a prompt that may be
/// longer than the context can be refused by the runtime before its first
/// token: the head then waits for the first piece, so that the refusal is a
/// 400 as when the daemon counts the prompt itself (no keep-alive comments
/// meanwhile). Otherwise until the run starts, for at most `bound`.
pub fn head_wait(v: &Validated, bound: Duration) -> HeadWait {
    if v.checks.size.tokens.is_none() && v.checks.size.may_overflow() {
        HeadWait::FirstPiece
    } else {
        HeadWait::RunStart(bound)
    }
}

/// A submitted job's reply, for any wire shape to write.
pub struct Submitted<S> {
    /// Its pieces, read ahead of the client (`outbox.rs`) and, for a stream,
    /// from when its head may go; `Err` when the request ended before that
    /// (its status: see [`hold_head`]).
    pub pieces: Result<S, ApiError>,
    pub streamed: bool,
    /// Tools left out of the prompt (`tools_dropped_header`).
    pub tools_dropped: usize,
    /// The sampling fields the runtime ignored (comma-separated).
    pub ignored: String,
}

/// The one path from a validated job to its reply that every generation
/// endpoint takes (chat and completions, Ollama, Responses, Messages):
/// submitted in its queue place, read ahead of its client, and a stream's
/// head held as `wait` says.
pub async fn submit(
    state: &AppState,
    model: Lease,
    place: Place,
    v: Validated,
    id: &str,
    counting: &Counting,
    wait: HeadWait,
) -> Submitted<impl futures_util::Stream<Item = Piece> + Send + 'static> {
    let (streamed, tools_dropped) = (v.stream, v.checks.tools_dropped);
    let (pieces, ignored) = start(model, place, v, id, counting);
    let pieces = super::outbox::read_ahead(pieces, state.settings.write_timeout);
    let pieces = hold_head(pieces, streamed.then_some(wait)).await;
    Submitted { pieces, streamed, tools_dropped, ignored }
}

/// Holds a stream's response head until its run starts. A request that ends
/// before then — still queued when the daemon stops, or refused by the
/// runtime — is answered with its own status (503 with `Retry-After`), which
/// a proxy retries on another board, instead of a 200 whose stream carries
/// only an error; a daemon that dies meanwhile leaves no response at all,
/// which proxies retry too. Past the bound the head goes out and keep-alive
/// comments tell the client its request is alive. The timeline is the
/// engine's: holding the head moves no instant of it. `None` (a reply that
/// is not streamed) holds nothing: its body reports its own ending.
async fn hold_head(
    pieces: impl futures_util::Stream<Item = Piece> + Send + 'static,
    wait: Option<HeadWait>,
) -> Result<impl futures_util::Stream<Item = Piece> + Send + 'static, ApiError> {
    let mut pieces = Box::pin(pieces);
    let first = match wait {
        None => None,
        Some(HeadWait::RunStart(bound)) => match tokio::time::timeout(bound, pieces.next()).await {
            Ok(Some(Piece::Started)) | Err(_) => None,
            Ok(piece) => piece,
        },
        Some(HeadWait::FirstPiece) => loop {
            match pieces.next().await {
                Some(Piece::Started) => continue,
                piece => break piece,
            }
        },
    };
    match first {
        Some(Piece::Failed(e)) => Err(*e),
        first => Ok(futures_util::stream::iter(first).chain(pieces)),
    }
}

/// Says how many tools were left out of the prompt, when any were.
pub fn tools_dropped_header(response: &mut Response, dropped: usize) {
    if dropped > 0 {
        response.headers_mut().insert(TOOLS_DROPPED, HeaderValue::from(dropped));
    }
}

/// Names the request fields that were not applied (comma-separated), when any were.
pub fn ignored_params_header(response: &mut Response, ignored: &str) {
    if ignored.is_empty() {
        return;
    }
    // A field name that is not visible ASCII cannot be a header's: none is set.
    if let Ok(value) = HeaderValue::from_str(ignored) {
        response.headers_mut().insert(IGNORED_PARAMS, value);
    }
}

/// Submits a job in its queue place and gives its reply as pieces (holding
/// the lease), with the sampling fields the runtime ignored (comma-separated).
fn start(
    model: Lease,
    place: Place,
    v: Validated,
    id: &str,
    counting: &Counting,
) -> (impl futures_util::Stream<Item = Piece> + Send + 'static, String) {
    let Validated { job, stops, rules, checks, .. } = v;
    let job = crate::engine::Job { lora: model.adapter.clone(), ..job };
    let mut generation = model.engine.submit(place, job);
    let record = Record::new(id.to_owned(), model.served_id(), &mut generation, counting, checks.tools_dropped);
    let ignored = generation.ignored_params.join(",");
    if !ignored.is_empty() {
        tracing::warn!(%id, params = %ignored, "runtime ABI 1.2 cannot apply sampling per run; these request fields were ignored");
    }
    let pieces = pieces(generation, record, stops, rules, checks).map(move |piece| {
        // Held until the reply's last piece is read or the reply is dropped.
        let _held = &model;
        piece
    });
    (pieces, ignored)
}

async fn collect(
    pieces: impl futures_util::Stream<Item = Piece>,
    shape: Shape,
    meta: Meta,
) -> Result<Response, ApiError> {
    let mut pieces = std::pin::pin!(pieces);
    let mut reply = Reply::default();
    while let Some(piece) = pieces.next().await {
        match piece {
            Piece::Started => {}
            Piece::Delta(delta) => reply.absorb(delta),
            Piece::Failed(e) => return Err(*e),
            Piece::Finished(finished) => {
                let Summary { finish_reason, usage, timings, .. } = *finished;
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
                return Ok(axum::Json(body.map_err(|e| ApiError::runtime(e.to_string()))?).into_response());
            }
        }
    }
    Err(ApiError::runtime("the generation ended without a result"))
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
