//! A reply's pieces (the same stream the OpenAI endpoints read) as Ollama's
//! NDJSON objects, or as one object with `stream: false`.

use super::wire::{Chunk, OutCall, OutFunction, OutMessage, Stats, StreamLine};
use crate::api::reply::{Piece, Summary};
use crate::conversation::{Delta, Reply};
use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use std::time::Duration;

/// Which endpoint is answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `message: {role, content, thinking, tool_calls}`
    Chat,
    /// `response`, `thinking`
    Generate,
}

/// What every object repeats, and what the last one adds.
pub struct Frame {
    pub shape: Shape,
    pub model: String,
    /// Time this request spent loading the model.
    pub load: Duration,
}

pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

impl Frame {
    pub fn chunk(&self, content: String, thinking: String, calls: Vec<OutCall>) -> Chunk {
        let thinking = (!thinking.is_empty()).then_some(thinking);
        let tool_calls = (!calls.is_empty()).then_some(calls);
        let (message, response, thinking) = match self.shape {
            Shape::Chat => (Some(OutMessage { role: "assistant", content, thinking, tool_calls }), None, None),
            Shape::Generate => (None, Some(content), thinking),
        };
        Chunk {
            model: self.model.clone(),
            created_at: now_rfc3339(),
            message,
            response,
            thinking,
            done: false,
            done_reason: None,
            stats: None,
        }
    }

    /// The object that ends a reply: `done`, the reason and the figures.
    pub fn done(&self, chunk: Chunk, reason: &'static str, stats: Option<Stats>) -> Chunk {
        Chunk { done: true, done_reason: Some(reason), stats, ..chunk }
    }

    fn stats(&self, summary: &Summary) -> Stats {
        let ns = |ms: Option<f64>| ms.map_or(0, |ms| (ms * 1e6) as u64);
        let t = &summary.timings;
        let load = self.load.as_nanos() as u64;
        Stats {
            // Ollama's total includes the load, which comes before `received`.
            total_duration: ns(t.e2e_ms) + load,
            load_duration: load,
            prompt_eval_count: summary.usage.prompt_tokens.unwrap_or(0),
            prompt_eval_cached_count: Some(summary.usage.prompt_tokens_details.cached_tokens),
            prompt_eval_duration: ns(t.prompt_ms),
            eval_count: t.predicted_n,
            eval_duration: ns(t.ttft_ms.zip(t.e2e_ms).map(|(first, end)| end - first)),
        }
    }
}

/// Tool calls with their arguments as objects (Ollama's form).
fn calls(reply: &mut Reply) -> Vec<OutCall> {
    std::mem::take(&mut reply.calls)
        .into_iter()
        .map(|c| OutCall {
            function: OutFunction {
                arguments: serde_json::from_str(&c.arguments).unwrap_or(Value::Object(Default::default())),
                name: c.name,
            },
        })
        .collect()
}

/// `tool_calls` ends a reply as `stop` in Ollama's terms.
fn done_reason(finish_reason: &'static str) -> &'static str {
    match finish_reason {
        "tool_calls" => "stop",
        other => other,
    }
}

/// The whole reply as one object.
pub async fn collect(pieces: impl Stream<Item = Piece>, frame: Frame) -> Response {
    let (mut reply, summary) = match crate::api::reply::collect(pieces).await {
        Ok(collected) => collected,
        Err(e) => return super::error::OllamaError(e).into_response(),
    };
    let calls = calls(&mut reply);
    let chunk = frame.chunk(reply.content, reply.reasoning, calls);
    let stats = frame.stats(&summary);
    axum::Json(frame.done(chunk, done_reason(summary.finish_reason), Some(stats))).into_response()
}

fn line(value: StreamLine) -> Bytes {
    let mut text = serde_json::to_string(&value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    text.push('\n');
    Bytes::from(text)
}

/// One object per token that added text, the tool calls once complete, then
/// the `done` object; a failure ends the stream with `{"error": …}`.
pub fn stream(pieces: impl Stream<Item = Piece> + Send + 'static, frame: Frame) -> Response {
    let lines = async_stream::stream! {
        let mut pieces = std::pin::pin!(pieces);
        let mut reply = Reply::default();
        while let Some(piece) = pieces.next().await {
            match piece {
                Piece::Started => {}
                Piece::Delta(delta) => {
                    let Delta { content, reasoning, calls } = delta;
                    if !content.is_empty() || !reasoning.is_empty() {
                        yield line(StreamLine::Chunk(Box::new(frame.chunk(content, reasoning, Vec::new()))));
                    }
                    // Calls are sent whole, as Ollama does: gather their steps.
                    reply.absorb(Delta { calls, ..Delta::default() });
                }
                Piece::Failed(e) => {
                    yield line(StreamLine::Error(super::error::body(e.status, &e.body)));
                }
                Piece::Finished(summary) => {
                    let calls = calls(&mut reply);
                    if !calls.is_empty() {
                        yield line(StreamLine::Chunk(Box::new(frame.chunk(String::new(), String::new(), calls))));
                    }
                    let stats = frame.stats(&summary);
                    let last = frame.done(frame.chunk(String::new(), String::new(), Vec::new()), done_reason(summary.finish_reason), Some(stats));
                    yield line(StreamLine::Chunk(Box::new(last)));
                }
            }
        }
    };
    let body = Body::from_stream(lines.map(Ok::<_, std::convert::Infallible>));
    ([(CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}
