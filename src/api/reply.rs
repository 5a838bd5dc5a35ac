//! Turning a [`Generation`] into reply deltas (stop sequences, reasoning,
//! tool calls: [`ReplyParser`]), finish reason, usage and timings. Both the
//! SSE writer and the non-stream collector read this one stream, so the two
//! response shapes cannot disagree.

use super::error::ApiError;
use super::response::Usage;
use crate::conversation::{Delta, ReplyParser, ReplyRules};
use crate::engine::{EndReason, GenEvent, Generation};
use crate::metrics::Timings;
use futures_util::{Stream, StreamExt};

pub enum Piece {
    /// What one runtime token added to the reply (may be nothing).
    Delta(Delta),
    /// The generation ended normally; always the last piece.
    Finished(Box<Finished>),
    /// The generation failed (possibly after some text); always the last piece.
    Failed(Box<ApiError>),
}

pub struct Finished {
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: &'static str,
    pub usage: Usage,
    pub timings: Timings,
}

pub fn pieces(mut generation: Generation, stops: Vec<String>, rules: ReplyRules) -> impl Stream<Item = Piece> {
    async_stream::stream! {
        let mut parser = ReplyParser::new(rules, stops);
        let mut matched = false;
        let mut noted_tools = false;
        while let Some(event) = generation.next().await {
            match event {
                GenEvent::Token { text } => {
                    if matched {
                        continue;
                    }
                    let step = parser.push(&text);
                    // A later malformed call can take the finish reason back.
                    if noted_tools != parser.called_tools() {
                        noted_tools = !noted_tools;
                        generation.note_tool_calls(noted_tools);
                    }
                    if step.stopped {
                        matched = true;
                        generation.stop();
                    }
                    yield Piece::Delta(step.delta);
                }
                GenEvent::Done(outcome) => {
                    let rest = parser.finish(&outcome.tail);
                    if !rest.is_empty() {
                        yield Piece::Delta(rest);
                    }
                    let failure = match &outcome.reason {
                        EndReason::Eos | EndReason::Stopped | EndReason::Length => None,
                        EndReason::Timeout(which) => {
                            Some(ApiError::timeout(format!("The {which} time-out expired; the generation was aborted.")))
                        }
                        EndReason::RuntimeError(message) => Some(ApiError::runtime(message.clone())),
                        EndReason::ShuttingDown => Some(ApiError::shutting_down()),
                    };
                    if let Some(e) = failure {
                        yield Piece::Failed(Box::new(e));
                        break;
                    }
                    // The same mapping the request log and metrics use.
                    let (_, finish_reason) = outcome.reason.status_and_finish_reason(parser.called_tools());
                    let timings = Timings::derive(&outcome.timeline, outcome.perf);
                    let prompt_tokens = crate::metrics::usage_prompt_tokens(outcome.prompt_tokens, &timings);
                    let completion_tokens = outcome.timeline.tokens;
                    let usage = Usage { prompt_tokens, completion_tokens, total_tokens: prompt_tokens.map(|p| p + i64::from(completion_tokens)) };
                    yield Piece::Finished(Box::new(Finished { finish_reason, usage, timings }));
                    break;
                }
            }
        }
    }
}
