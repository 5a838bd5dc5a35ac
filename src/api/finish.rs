//! What every generation front end's reply says in its headers of how its
//! request was served (docs/api.md, "Response headers"): one finisher, so
//! that Chat Completions, Completions, Responses, Messages and Ollama's
//! chat and generate send the same set, streamed or not, on their reply and
//! on an error met once the job was submitted. The board's name
//! (`x-rkllmd-instance`) is on every response of the listener
//! (`state::mark_instance`), not only these.

use super::ceiling::Clamped;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;

/// How the prompt was made (docs/api.md, "Models without a chat template").
const TEMPLATE_MODE: HeaderName = HeaderName::from_static("x-rkllmd-template-mode");
/// Tool definitions left out of the prompt (docs/api.md, "Tools that do not fit").
const TOOLS_DROPPED: HeaderName = HeaderName::from_static("x-rkllmd-tools-dropped");
/// Tools left out of the prompt for their type (docs/api.md, "Responses API").
const TOOLS_UNSUPPORTED: HeaderName = HeaderName::from_static("x-rkllmd-tools-unsupported");
/// The request fields that were not applied.
const IGNORED_PARAMS: HeaderName = HeaderName::from_static("x-rkllmd-ignored-params");

/// What a reply's headers say; `submit` fills what the job knows, a front
/// end adds what only its request knows.
#[derive(Debug, Default)]
pub struct Served {
    /// The prompter's mode (`Mode::as_str`).
    pub template_mode: &'static str,
    pub tools_dropped: usize,
    /// Tool types this front end cannot run here (Responses' `web_search`, …).
    pub tools_unsupported: Vec<String>,
    /// Request fields that were not applied: the sampling fields the
    /// runtime's ABI cannot take per run, then the front end's own.
    pub ignored: Vec<String>,
    /// A `max_tokens` above the server's limit, served as a ceiling (`ceiling.rs`).
    pub clamped: Option<Clamped>,
}

impl Served {
    /// Writes the headers onto `response` (one that is empty is not sent).
    pub fn finish(self, mut response: Response) -> Response {
        let headers = response.headers_mut();
        headers.insert(TEMPLATE_MODE, HeaderValue::from_static(self.template_mode));
        if self.tools_dropped > 0 {
            headers.insert(TOOLS_DROPPED, HeaderValue::from(self.tools_dropped));
        }
        for (name, list) in [(TOOLS_UNSUPPORTED, &self.tools_unsupported), (IGNORED_PARAMS, &self.ignored)] {
            // A name that is not visible ASCII cannot be a header's: none is set.
            if let Some(value) =
                Some(list.join(",")).filter(|l| !l.is_empty()).and_then(|l| HeaderValue::from_str(&l).ok())
            {
                headers.insert(name, value);
            }
        }
        if let Some(clamped) = self.clamped {
            clamped.header(&mut response);
        }
        response
    }
}
