//! The one table from engine outcomes to the wire: HTTP status, error type
//! and code, and finish reason. JSON replies, stream error events, the
//! request log and the metrics all read their status from here.

use super::error::ApiError;
use super::request::PromptSize;
use crate::engine::{EndReason, EngineError};

/// Status 499 (nginx's "client closed request"): the client went away, so
/// nobody reads it; the request log and metrics report it.
const CLIENT_CLOSED: u16 = 499;

/// What one finished generation is on the wire.
#[derive(Debug, Clone)]
pub struct Ending {
    /// The status the request log and metrics report.
    pub status: u16,
    /// `stop`, `length`, `tool_calls`, or for a failure `timeout`, `error`,
    /// `context_length`, `invalid_format`, `shutdown`, `abort`.
    pub finish_reason: &'static str,
    /// For a failure: the error the client gets (a JSON body, or the stream's
    /// error event). `None` for a normal end and for an abandoned request.
    pub error: Option<ApiError>,
}

impl Ending {
    fn ok(finish_reason: &'static str) -> Ending {
        Ending { status: 200, finish_reason, error: None }
    }

    fn failed(error: ApiError, finish_reason: &'static str) -> Ending {
        Ending { status: error.status.as_u16(), finish_reason, error: Some(error) }
    }
}

/// What the api knows besides the engine's reason.
#[derive(Debug, Default)]
pub struct Facts<'a> {
    /// The reply held tool calls (all well-formed).
    pub called_tools: bool,
    /// The run started and ended before its first token.
    pub before_first_token: bool,
    /// The job ended without its run starting (still queued, or refused by the runtime).
    pub never_ran: bool,
    /// The prompt's size against the context.
    pub prompt: Option<&'a PromptSize>,
    /// Why the reply is not what `response_format` asked for.
    pub format_violation: Option<String>,
}

pub fn ending(reason: &EndReason, facts: &Facts) -> Ending {
    let overflow = facts.prompt.filter(|p| facts.before_first_token && p.may_overflow());
    match reason {
        // Asked-for JSON that is not: an error, never a "stop" that presents it as JSON.
        EndReason::Eos | EndReason::Stopped | EndReason::Length if facts.format_violation.is_some() => {
            let why = facts.format_violation.clone().unwrap_or_default();
            Ending::failed(ApiError::invalid_format(why), "invalid_format")
        }
        EndReason::Eos | EndReason::Stopped if facts.called_tools => Ending::ok("tool_calls"),
        EndReason::Eos | EndReason::Stopped => Ending::ok("stop"),
        EndReason::Length => Ending::ok("length"),
        EndReason::Timeout(which) => Ending::failed(
            ApiError::timeout(format!("The {} time-out expired; the generation was aborted.", which.as_str())),
            "timeout",
        ),
        // The runtime refuses a prompt longer than its context before the
        // first token: the client's to fix, as when the daemon counts it.
        EndReason::RuntimeError(_) if overflow.is_some() => Ending::failed(
            overflow.map(PromptSize::refused_by_runtime).unwrap_or_else(|| ApiError::runtime("")),
            "context_length",
        ),
        // Nothing ran: another board can take it.
        EndReason::RuntimeError(message) if facts.never_ran => {
            Ending::failed(ApiError::runtime_unavailable(message.clone()), "error")
        }
        EndReason::RuntimeError(message) => Ending::failed(ApiError::runtime(message.clone()), "error"),
        EndReason::ShuttingDown => Ending::failed(ApiError::shutting_down(), "shutdown"),
        EndReason::Unresponsive => Ending::failed(ApiError::runtime_unresponsive(), "error"),
        EndReason::Abandoned => Ending { status: CLIENT_CLOSED, finish_reason: "abort", error: None },
    }
}

/// A hidden-layer or logits job (embeddings, rerank): 200 `stop` when every
/// input ran, else the row of the reason it did not.
pub fn forward(result: Result<(), &EndReason>) -> Ending {
    match result {
        Ok(()) => Ending::ok("stop"),
        Err(reason) => ending(reason, &Facts::default()),
    }
}

/// `dimensions` the model's vectors do not have, found by the model's first
/// embedding run (the runtime tells the width no sooner; later runs refuse
/// it before running).
pub fn wrong_dimensions(error: ApiError) -> Ending {
    Ending::failed(error, "invalid_dimensions")
}

/// A job the engine refused.
pub fn refused(error: &EngineError) -> ApiError {
    match error {
        EngineError::QueueFull => ApiError::queue_full(2),
        EngineError::Unresponsive => ApiError::runtime_unresponsive(),
        // Load-time errors: not what a submitted job meets, but named all the same.
        EngineError::Model(_)
        | EngineError::Adapter { .. }
        | EngineError::PromptCache(_)
        | EngineError::Vision(_)
        | EngineError::ProbeWedged { .. } => ApiError::runtime(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Deadline;
    use axum::http::StatusCode;

    #[test]
    fn the_table() {
        let row = |r: EndReason, called_tools: bool| {
            let e = ending(&r, &Facts { called_tools, ..Facts::default() });
            (e.status, e.finish_reason, e.error.map(|e| (e.status, e.body.kind, e.body.code)))
        };
        assert_eq!(row(EndReason::Eos, false), (200, "stop", None));
        assert_eq!(row(EndReason::Stopped, true), (200, "tool_calls", None));
        assert_eq!(row(EndReason::Length, true), (200, "length", None));
        assert_eq!(
            row(EndReason::Timeout(Deadline::FirstToken), false),
            (504, "timeout", Some((StatusCode::GATEWAY_TIMEOUT, "server_error", Some("timeout"))))
        );
        assert_eq!(
            row(EndReason::RuntimeError("x".into()), false),
            (500, "error", Some((StatusCode::INTERNAL_SERVER_ERROR, "server_error", Some("runtime_error"))))
        );
        assert_eq!(
            row(EndReason::ShuttingDown, false),
            (503, "shutdown", Some((StatusCode::SERVICE_UNAVAILABLE, "server_error", Some("shutting_down"))))
        );
        assert_eq!(
            row(EndReason::Unresponsive, false),
            (503, "error", Some((StatusCode::SERVICE_UNAVAILABLE, "server_error", Some("runtime_unresponsive"))))
        );
        assert_eq!(row(EndReason::Abandoned, false), (499, "abort", None));
        let never_ran = ending(&EndReason::RuntimeError("gone".into()), &Facts { never_ran: true, ..Facts::default() });
        assert_eq!((never_ran.status, never_ran.error.and_then(|e| e.retry_after)), (503, Some(5)));
        assert_eq!(refused(&EngineError::QueueFull).status, StatusCode::TOO_MANY_REQUESTS);
        let forward = |r: Result<(), &EndReason>| (forward(r).status, forward(r).finish_reason);
        assert_eq!(forward(Ok(())), (200, "stop"));
        assert_eq!(forward(Err(&EndReason::Timeout(Deadline::Request))), (504, "timeout"));
    }

    #[test]
    fn a_runtime_refusal_of_a_prompt_that_may_not_fit_is_the_clients() {
        let size = |bytes| PromptSize { param: "messages", bytes, context: 4096, ..PromptSize::default() };
        let row = |bytes, before_first_token| {
            let prompt = size(bytes);
            let e = ending(
                &EndReason::RuntimeError("x".into()),
                &Facts { before_first_token, prompt: Some(&prompt), ..Facts::default() },
            );
            (e.status, e.finish_reason, e.error.and_then(|e| e.body.code))
        };
        assert_eq!(row(20_000, true), (400, "context_length", Some("context_length_exceeded")));
        // After a token, or for a prompt too short to overflow: the runtime's own error.
        assert_eq!(row(20_000, false), (500, "error", Some("runtime_error")));
        assert_eq!(row(4_000, true), (500, "error", Some("runtime_error")));
    }

    #[test]
    fn a_reply_that_breaks_the_format_is_an_error() {
        let facts = Facts { format_violation: Some("not JSON".into()), ..Facts::default() };
        for reason in [EndReason::Eos, EndReason::Stopped, EndReason::Length] {
            let e = ending(&reason, &facts);
            assert_eq!((e.status, e.finish_reason), (500, "invalid_format"));
            assert_eq!(e.error.map(|e| e.body.code), Some(Some("invalid_response_format")));
        }
        // Other endings keep their own meaning.
        assert_eq!(ending(&EndReason::Abandoned, &facts).status, 499);
    }
}
