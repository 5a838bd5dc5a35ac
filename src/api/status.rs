//! The one table from engine outcomes to the wire: HTTP status, error type
//! and code, and finish reason. JSON replies, stream error events, the
//! request log and the metrics all read their status from here.

use super::error::ApiError;
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
    /// `shutdown`, `abort`.
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

/// `called_tools`: the reply held tool calls (all well-formed).
pub fn ending(reason: &EndReason, called_tools: bool) -> Ending {
    match reason {
        EndReason::Eos | EndReason::Stopped if called_tools => Ending::ok("tool_calls"),
        EndReason::Eos | EndReason::Stopped => Ending::ok("stop"),
        EndReason::Length => Ending::ok("length"),
        EndReason::Timeout(which) => Ending::failed(
            ApiError::timeout(format!("The {} time-out expired; the generation was aborted.", which.as_str())),
            "timeout",
        ),
        EndReason::RuntimeError(message) => Ending::failed(ApiError::runtime(message.clone()), "error"),
        EndReason::ShuttingDown => Ending::failed(ApiError::shutting_down(), "shutdown"),
        EndReason::Abandoned => Ending { status: CLIENT_CLOSED, finish_reason: "abort", error: None },
    }
}

/// A hidden-layer or logits job that did not complete.
pub fn failed(reason: &EndReason) -> ApiError {
    ending(reason, false).error.unwrap_or_else(|| ApiError::runtime("the request ended without a result"))
}

/// A job the engine refused.
pub fn refused(error: &EngineError) -> ApiError {
    match error {
        EngineError::QueueFull => ApiError::queue_full(2),
        EngineError::Model(e) => ApiError::runtime(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Deadline;
    use axum::http::StatusCode;

    #[test]
    fn the_table() {
        let row = |r: EndReason, tools: bool| {
            let e = ending(&r, tools);
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
        assert_eq!(row(EndReason::Abandoned, false), (499, "abort", None));
        assert_eq!(refused(&EngineError::QueueFull).status, StatusCode::TOO_MANY_REQUESTS);
    }
}
