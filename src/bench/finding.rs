//! A defect found in a response: by the wire checks or the server-timings cross-check.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// `wire` (the stream broke a rule of docs/openai-wire) or `server` (its timings).
    pub source: &'static str,
    /// A stable name, listed in docs/bench.md.
    pub kind: &'static str,
    pub detail: String,
}

impl Finding {
    pub fn wire(kind: &'static str, detail: impl Into<String>) -> Finding {
        Finding { source: "wire", kind, detail: detail.into() }
    }

    pub fn server(kind: &'static str, detail: impl Into<String>) -> Finding {
        Finding { source: "server", kind, detail: detail.into() }
    }
}
