//! Turning a [`Generation`] into reply deltas (stop sequences, reasoning,
//! tool calls: [`ReplyParser`]), finish reason, usage and timings. Both the
//! SSE writer and the non-stream collector read this one stream, so the two
//! response shapes cannot disagree; the request is recorded here, with the
//! ending the client gets.

use super::error::ApiError;
use super::record::Record;
use super::request::Checks;
use super::response::Usage;
use super::status::{ending, Facts};
use crate::conversation::resend::view;
use crate::conversation::{Delta, Reply, ReplyParser, ReplyRules};
use crate::engine::{EndReason, GenEvent, Generation, Shown};
use crate::metrics::Timings;
use futures_util::{Stream, StreamExt};

pub enum Piece {
    /// The run started: the request left the queue (before any delta).
    Started,
    /// What one runtime token added to the reply (may be nothing).
    Delta(Delta),
    /// The generation ended normally; always the last piece.
    Finished(Box<Summary>),
    /// The generation failed (possibly after some text); always the last piece.
    Failed(Box<ApiError>),
}

/// What the last chunk (or the body) says about a finished reply.
pub struct Summary {
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: &'static str,
    /// The client's stop sequence that ended the reply (`finish_reason` `stop`).
    pub stop_sequence: Option<String>,
    pub usage: Usage,
    pub timings: Timings,
}

pub fn pieces(
    mut generation: Generation,
    record: Record,
    stops: Vec<String>,
    rules: ReplyRules,
    checks: Checks,
) -> impl Stream<Item = Piece> {
    async_stream::stream! {
        let record = record;
        // Given back to the conversation cache when the reply ends.
        let mut handoff = generation.take_handoff();
        let mut parser = ReplyParser::new(rules, stops);
        let mut matched = false;
        // The reply as a client gathers it, for the conversation cache.
        let mut seen = Reply::default();
        // The reply's text, kept only when it is checked at the end.
        let mut content = String::new();
        while let Some(event) = generation.next().await {
            match event {
                GenEvent::Started => yield Piece::Started,
                GenEvent::Token { text } => {
                    if matched {
                        continue;
                    }
                    let step = parser.push(&text);
                    if step.stopped {
                        matched = true;
                        generation.stop();
                    }
                    if checks.format.is_some() {
                        content.push_str(&step.delta.content);
                    }
                    seen.absorb(step.delta.clone());
                    yield Piece::Delta(step.delta);
                }
                GenEvent::Done(outcome) => {
                    let rest = parser.finish(&outcome.tail);
                    if checks.format.is_some() {
                        content.push_str(&rest.content);
                    }
                    seen.absorb(rest.clone());
                    let whole = !matched && matches!(outcome.reason, EndReason::Eos | EndReason::Length);
                    if let Some(handoff) = handoff.take().filter(|_| whole) {
                        // What a client resends of this reply: a reply cut by a
                        // stop sequence is not (the cache holds text it never saw).
                        let calls = seen.calls.iter().map(|c| (c.name.as_str(), c.arguments.as_str()));
                        let reasoned = parser.reasoned() || seen.content.contains("</think>");
                        let shown = Shown { view: view(&seen.content, calls), reasoned, tokens: outcome.timeline.tokens };
                        handoff.returned(shown);
                    }
                    if !rest.is_empty() {
                        yield Piece::Delta(rest);
                    }
                    let called_tools = parser.called_tools();
                    let facts = Facts {
                        called_tools,
                        before_first_token: outcome.failed_before_first_token(),
                        never_ran: outcome.never_ran(),
                        prompt: Some(&checks.size),
                        // A reply that calls tools is not the answer yet.
                        format_violation: checks.format.as_ref().filter(|_| !called_tools).and_then(|f| f.check(&content).err()),
                    };
                    let ending = ending(&outcome.reason, &facts);
                    record.finish(&outcome, &ending);
                    if let Some(e) = ending.error {
                        yield Piece::Failed(Box::new(e));
                        break;
                    }
                    let timings = Timings {
                        tools_dropped: u32::try_from(checks.tools_dropped).unwrap_or(u32::MAX),
                        ..Timings::derive(&outcome.timeline, outcome.perf, outcome.cached_tokens)
                    };
                    let prompt_tokens = crate::metrics::usage_prompt_tokens(outcome.prompt_tokens, &timings);
                    let completion_tokens = outcome.timeline.tokens;
                    let usage = Usage::new(prompt_tokens, completion_tokens, outcome.cached_tokens);
                    let stop_sequence = parser.stop_sequence().map(str::to_owned);
                    yield Piece::Finished(Box::new(Summary { finish_reason: ending.finish_reason, stop_sequence, usage, timings }));
                    break;
                }
            }
        }
    }
}

/// A reply that is not streamed: its pieces gathered until it finished (or
/// failed), for each front end to write as one body.
pub async fn collect(pieces: impl Stream<Item = Piece>) -> Result<(Reply, Summary), ApiError> {
    let mut pieces = std::pin::pin!(pieces);
    let mut reply = Reply::default();
    while let Some(piece) = pieces.next().await {
        match piece {
            Piece::Started => {}
            Piece::Delta(delta) => reply.absorb(delta),
            Piece::Failed(e) => return Err(*e),
            Piece::Finished(summary) => return Ok((reply, *summary)),
        }
    }
    Err(ApiError::runtime("the generation ended without a result"))
}
