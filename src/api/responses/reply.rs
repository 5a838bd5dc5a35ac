//! A reply's pieces (the stream every endpoint reads) as a Responses API
//! object, or as its server-sent events: `response.created`, output items
//! opened and closed around their deltas, then `response.completed`.

use super::tools::{custom_input, Names};
use crate::api::error::ApiError;
use crate::api::reply::{Piece, Summary};
use crate::conversation::{CallDelta, Delta};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::Duration;

/// What every response object of one request repeats.
pub struct Head {
    pub id: String,
    pub created_at: u64,
    pub model: String,
    /// The request's fields a response echoes (`instructions`, `tools`, …).
    pub echo: serde_json::Map<String, Value>,
    /// Who the tools the model calls are to the client.
    pub names: Names,
    /// Tools left out of the prompt for their type (`timings.tools_unsupported`).
    pub unsupported: usize,
}

fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

impl Head {
    fn object(&self, status: &str, output: Vec<Value>, end: Option<&Summary>) -> Value {
        let mut o = json!({"id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "model": self.model, "output": output, "error": null, "incomplete_details": null,
            "parallel_tool_calls": true, "previous_response_id": null, "store": false, "metadata": {}});
        for (k, v) in &self.echo {
            o[k] = v.clone();
        }
        if let Some(s) = end {
            let cached = s.usage.prompt_tokens_details.cached_tokens;
            o["usage"] = json!({"input_tokens": s.usage.prompt_tokens, "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": s.usage.completion_tokens, "total_tokens": s.usage.total_tokens});
            o["timings"] = json!(s.timings);
            o["timings"]["tools_unsupported"] = json!(self.unsupported);
            if s.finish_reason == "length" {
                o["status"] = json!("incomplete");
                o["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
        }
        o
    }
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [], "content": [{"type": "reasoning_text", "text": text}]})
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "in_progress" { json!([]) } else { json!([text_part(text)]) };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// A call as the client knows the tool: a `function_call` (with its
/// `namespace` when it has one) or a `custom_tool_call` with its text.
fn call_item(names: &Names, id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    let origin = names.origin(name);
    let mut item = if origin.custom {
        let input = if status == "in_progress" { String::new() } else { custom_input(arguments) };
        json!({"type": "custom_tool_call", "id": id, "call_id": call_id, "name": origin.name, "input": input, "status": status})
    } else {
        json!({"type": "function_call", "id": id, "call_id": call_id, "name": origin.name, "arguments": arguments, "status": status})
    };
    if let Some(namespace) = origin.namespace {
        item["namespace"] = json!(namespace);
    }
    item
}

/// The whole reply as one response object.
pub async fn collect(pieces: impl Stream<Item = Piece>, head: Head) -> Result<Response, ApiError> {
    let (reply, summary) = crate::api::reply::collect(pieces).await?;
    let mut output = Vec::new();
    if !reply.reasoning.is_empty() {
        output.push(reasoning_item(&item_id("rs"), &reply.reasoning));
    }
    if !reply.content.is_empty() || reply.calls.is_empty() {
        output.push(message_item(&item_id("msg"), &reply.content, "completed"));
    }
    for c in &reply.calls {
        output.push(call_item(&head.names, &item_id("fc"), &c.id, &c.name, &c.arguments, "completed"));
    }
    Ok(axum::Json(head.object("completed", output, Some(&summary))).into_response())
}

/// The output item being written.
enum Open {
    None,
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
    Call { id: String, call_id: String, name: String, arguments: String },
}

/// Numbers the events and keeps the output items done so far.
struct Events {
    seq: u64,
    output: Vec<Value>,
    open: Open,
    names: Names,
}

impl Events {
    fn event(&mut self, kind: &str, mut data: Value) -> Event {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        Event::default().event(kind).data(data.to_string())
    }

    fn index(&self) -> usize {
        self.output.len()
    }

    /// Closes the open item (its `.done` events), leaving none open.
    fn close(&mut self, out: &mut Vec<Event>) {
        let index = self.index();
        let item = match std::mem::replace(&mut self.open, Open::None) {
            Open::None => return,
            Open::Reasoning { id, text } => {
                let e = json!({"item_id": id, "output_index": index, "content_index": 0, "text": text});
                out.push(self.event("response.reasoning_text.done", e));
                reasoning_item(&id, &text)
            }
            Open::Message { id, text } => {
                let e = json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []});
                out.push(self.event("response.output_text.done", e));
                let e = json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part(&text)});
                out.push(self.event("response.content_part.done", e));
                message_item(&id, &text, "completed")
            }
            Open::Call { id, call_id, name, arguments } => {
                let item = call_item(&self.names, &id, &call_id, &name, &arguments, "completed");
                if let Some(input) = item.get("input").and_then(Value::as_str) {
                    // A custom tool's text is known once its arguments end: one delta, whole.
                    let e = json!({"item_id": id, "output_index": index, "delta": input});
                    out.push(self.event("response.custom_tool_call_input.delta", e));
                    let e = json!({"item_id": id, "output_index": index, "input": input});
                    out.push(self.event("response.custom_tool_call_input.done", e));
                } else {
                    let e = json!({"item_id": id, "output_index": index, "name": item["name"], "arguments": arguments});
                    out.push(self.event("response.function_call_arguments.done", e));
                }
                item
            }
        };
        out.push(self.event("response.output_item.done", json!({"output_index": index, "item": item})));
        self.output.push(item);
    }

    fn open_reasoning(&mut self, out: &mut Vec<Event>) {
        if !matches!(self.open, Open::Reasoning { .. }) {
            self.close(out);
            let id = item_id("rs");
            let item = json!({"type": "reasoning", "id": id, "summary": [], "content": []});
            out.push(self.event("response.output_item.added", json!({"output_index": self.index(), "item": item})));
            self.open = Open::Reasoning { id, text: String::new() };
        }
    }

    fn open_message(&mut self, out: &mut Vec<Event>) {
        if !matches!(self.open, Open::Message { .. }) {
            self.close(out);
            let (id, index) = (item_id("msg"), self.index());
            let item = message_item(&id, "", "in_progress");
            out.push(self.event("response.output_item.added", json!({"output_index": index, "item": item})));
            let e = json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part("")});
            out.push(self.event("response.content_part.added", e));
            self.open = Open::Message { id, text: String::new() };
        }
    }

    fn delta(&mut self, delta: Delta) -> Vec<Event> {
        let mut out = Vec::new();
        let Delta { content, reasoning, calls } = delta;
        if !reasoning.is_empty() {
            self.open_reasoning(&mut out);
            let index = self.index();
            if let Open::Reasoning { id, text } = &mut self.open {
                text.push_str(&reasoning);
                let e = json!({"item_id": id.clone(), "output_index": index, "content_index": 0, "delta": reasoning});
                let e = self.event("response.reasoning_text.delta", e);
                out.push(e);
            }
        }
        if !content.is_empty() {
            self.open_message(&mut out);
            let index = self.index();
            if let Open::Message { id, text } = &mut self.open {
                text.push_str(&content);
                let e = json!({"item_id": id.clone(), "output_index": index, "content_index": 0, "delta": content, "logprobs": []});
                let e = self.event("response.output_text.delta", e);
                out.push(e);
            }
        }
        for CallDelta { head, arguments, .. } in calls {
            if let Some(head) = head {
                self.close(&mut out);
                let id = item_id("fc");
                let item = call_item(&self.names, &id, &head.id, &head.name, "", "in_progress");
                out.push(self.event("response.output_item.added", json!({"output_index": self.index(), "item": item})));
                self.open = Open::Call { id, call_id: head.id, name: head.name, arguments: String::new() };
            }
            let index = self.index();
            if let (Open::Call { id, name, arguments: all, .. }, false) = (&mut self.open, arguments.is_empty()) {
                all.push_str(&arguments);
                if self.names.is_custom(name) {
                    continue;
                }
                let e = json!({"item_id": id.clone(), "output_index": index, "delta": arguments});
                let e = self.event("response.function_call_arguments.delta", e);
                out.push(e);
            }
        }
        out
    }
}

/// The reply as Responses API events.
pub fn stream(pieces: impl Stream<Item = Piece> + Send + 'static, head: Head, keepalive: Duration) -> Response {
    let events = async_stream::stream! {
        let mut pieces = std::pin::pin!(pieces);
        let mut ev = Events { seq: 0, output: Vec::new(), open: Open::None, names: head.names.clone() };
        let created = head.object("in_progress", Vec::new(), None);
        yield ev.event("response.created", json!({"response": created.clone()}));
        yield ev.event("response.in_progress", json!({"response": created}));
        while let Some(piece) = pieces.next().await {
            match piece {
                Piece::Delta(delta) => {
                    for e in ev.delta(delta) {
                        yield e;
                    }
                }
                Piece::Started => {}
                Piece::Failed(e) => {
                    let mut failed = head.object("failed", std::mem::take(&mut ev.output), None);
                    failed["error"] = json!({"code": e.body.code.unwrap_or(e.body.kind), "message": e.body.message});
                    yield ev.event("response.failed", json!({"response": failed}));
                }
                Piece::Finished(summary) => {
                    let mut out = Vec::new();
                    // A reply with nothing in it is still one (empty) message.
                    if ev.output.is_empty() && matches!(ev.open, Open::None) {
                        ev.open_message(&mut out);
                    }
                    ev.close(&mut out);
                    for e in out {
                        yield e;
                    }
                    let done = head.object("completed", std::mem::take(&mut ev.output), Some(&summary));
                    let kind = if done["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
                    yield ev.event(kind, json!({"response": done}));
                }
            }
        }
    };
    let sse =
        Sse::new(events.map(Ok::<_, Infallible>)).keep_alive(KeepAlive::new().interval(keepalive).text("keep-alive"));
    ([(axum::http::HeaderName::from_static("x-accel-buffering"), "no")], sse).into_response()
}
