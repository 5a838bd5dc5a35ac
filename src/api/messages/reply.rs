//! A reply's pieces (the stream every endpoint reads) as an Anthropic
//! message, or as its server-sent events: `message_start`, content blocks
//! started, filled and stopped, `message_delta` with the stop reason and
//! usage, `message_stop`.

use super::error::AnthropicError;
use crate::api::ceiling::Clamped;
use crate::api::reply::{Piece, Summary};
use crate::conversation::{CallDelta, Delta};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::Duration;

pub struct Head {
    pub id: String,
    pub model: String,
    /// `max_tokens` lowered to the server's limit, said in `timings`.
    pub clamped: Option<Clamped>,
}

/// The run's `timings`, with the clamp of `max_tokens` when one was made.
fn timings(s: &Summary, head: &Head) -> Value {
    let mut timings = serde_json::to_value(&s.timings).unwrap_or_default();
    if let Some(clamped) = head.clamped {
        clamped.add_to_timings(&mut timings);
    }
    timings
}

/// `stop_reason` and `stop_sequence`: `end_turn` (the model ended),
/// `stop_sequence` (one of the request's matched, named beside it),
/// `max_tokens`, `tool_use`.
fn stop(s: &Summary) -> (&'static str, Option<&str>) {
    match (s.finish_reason, s.stop_sequence.as_deref()) {
        ("length", _) => ("max_tokens", None),
        ("tool_calls", _) => ("tool_use", None),
        (_, Some(sequence)) => ("stop_sequence", Some(sequence)),
        _ => ("end_turn", None),
    }
}

/// Anthropic's `input_tokens` leaves out the tokens read from the cache.
fn usage(s: &Summary) -> Value {
    let cached = s.usage.prompt_tokens_details.cached_tokens;
    let input = s.usage.prompt_tokens.map(|p| p - i64::from(cached));
    json!({"input_tokens": input, "output_tokens": s.usage.completion_tokens,
           "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0})
}

/// A call's arguments as the object Anthropic's `input` is (`{}` if they are not one).
fn input(arguments: &str) -> Value {
    serde_json::from_str::<Value>(arguments).ok().filter(Value::is_object).unwrap_or(json!({}))
}

/// The whole reply as one message.
pub async fn collect(pieces: impl Stream<Item = Piece>, head: Head) -> Response {
    let (reply, summary) = match crate::api::reply::collect(pieces).await {
        Ok(collected) => collected,
        Err(e) => return AnthropicError(e).into_response(),
    };
    let mut content = Vec::new();
    if !reply.reasoning.is_empty() {
        content.push(json!({"type": "thinking", "thinking": reply.reasoning, "signature": ""}));
    }
    if !reply.content.is_empty() || reply.calls.is_empty() {
        content.push(json!({"type": "text", "text": reply.content}));
    }
    for c in &reply.calls {
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input(&c.arguments)}));
    }
    let (stop_reason, stop_sequence) = stop(&summary);
    let body = json!({"id": head.id, "type": "message", "role": "assistant", "model": head.model,
        "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
        "usage": usage(&summary), "timings": timings(&summary, &head)});
    axum::Json(body).into_response()
}

#[derive(PartialEq, Eq)]
enum Open {
    None,
    Thinking,
    Text,
    ToolUse,
}

struct Blocks {
    /// The index of the open block (or of the next one).
    index: usize,
    open: Open,
}

fn event(kind: &str, mut data: Value) -> Event {
    data["type"] = json!(kind);
    Event::default().event(kind).data(data.to_string())
}

impl Blocks {
    fn close(&mut self, out: &mut Vec<Event>) {
        if self.open != Open::None {
            out.push(event("content_block_stop", json!({"index": self.index})));
            self.index += 1;
            self.open = Open::None;
        }
    }

    /// Opens a block of this kind unless one is open; `start` is its `content_block`.
    fn open(&mut self, kind: Open, start: Value, out: &mut Vec<Event>) {
        if self.open != kind || kind == Open::ToolUse {
            self.close(out);
            out.push(event("content_block_start", json!({"index": self.index, "content_block": start})));
            self.open = kind;
        }
    }

    fn delta(&mut self, delta: Delta) -> Vec<Event> {
        let mut out = Vec::new();
        let Delta { content, reasoning, calls } = delta;
        if !reasoning.is_empty() {
            self.open(Open::Thinking, json!({"type": "thinking", "thinking": "", "signature": ""}), &mut out);
            out.push(event(
                "content_block_delta",
                json!({"index": self.index, "delta": {"type": "thinking_delta", "thinking": reasoning}}),
            ));
        }
        if !content.is_empty() {
            self.open(Open::Text, json!({"type": "text", "text": ""}), &mut out);
            out.push(event(
                "content_block_delta",
                json!({"index": self.index, "delta": {"type": "text_delta", "text": content}}),
            ));
        }
        for CallDelta { head, arguments, .. } in calls {
            if let Some(head) = head {
                let start = json!({"type": "tool_use", "id": head.id, "name": head.name, "input": {}});
                self.open(Open::ToolUse, start, &mut out);
            }
            if self.open == Open::ToolUse && !arguments.is_empty() {
                out.push(event(
                    "content_block_delta",
                    json!({"index": self.index, "delta": {"type": "input_json_delta", "partial_json": arguments}}),
                ));
            }
        }
        out
    }
}

/// The reply as Messages API events.
pub fn stream(pieces: impl Stream<Item = Piece> + Send + 'static, head: Head, keepalive: Duration) -> Response {
    let events = async_stream::stream! {
        let mut pieces = std::pin::pin!(pieces);
        let mut blocks = Blocks { index: 0, open: Open::None };
        // The prompt's count is known only once the run says what the cache held.
        let message = json!({"id": head.id, "type": "message", "role": "assistant", "model": head.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": null, "output_tokens": 0}});
        yield event("message_start", json!({"message": message}));
        while let Some(piece) = pieces.next().await {
            match piece {
                Piece::Delta(delta) => {
                    for e in blocks.delta(delta) {
                        yield e;
                    }
                }
                Piece::Started => {}
                Piece::Failed(e) => {
                    yield event("error", serde_json::to_value(AnthropicError(*e).body()).unwrap_or_default());
                }
                Piece::Finished(summary) => {
                    let mut out = Vec::new();
                    if blocks.index == 0 && blocks.open == Open::None {
                        blocks.open(Open::Text, json!({"type": "text", "text": ""}), &mut out);
                    }
                    blocks.close(&mut out);
                    for e in out {
                        yield e;
                    }
                    let (stop_reason, stop_sequence) = stop(&summary);
                    let delta = json!({"stop_reason": stop_reason, "stop_sequence": stop_sequence});
                    yield event("message_delta", json!({"delta": delta, "usage": usage(&summary), "timings": timings(&summary, &head)}));
                    yield event("message_stop", json!({}));
                }
            }
        }
    };
    let sse = Sse::new(events.map(Ok::<_, Infallible>)).keep_alive(KeepAlive::new().interval(keepalive).text("ping"));
    ([(axum::http::HeaderName::from_static("x-accel-buffering"), "no")], sse).into_response()
}
