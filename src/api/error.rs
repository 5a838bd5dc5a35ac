//! The OpenAI error envelope: every rejection the daemon makes, including
//! the web framework's own, goes out as
//! `{"error":{"message","type","param","code"}}` through this one type.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    /// Seconds for `Retry-After` (429/503).
    pub retry_after: Option<u64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct ErrorBody {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// A prompt longer than the context, in numbers (`context_length_exceeded`):
    /// what each client family's own wording of it states. Not sent as such.
    #[serde(skip)]
    pub overflow: Option<Overflow>,
}

/// A prompt that does not fit: its tokens (the reply's reserve included,
/// or the least the prompt can be without a tokenizer) against the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    pub tokens: u32,
    pub context: u32,
}

impl Overflow {
    /// `u32` keeps `ApiError` small: a context is far below 2³².
    pub fn new(tokens: usize, context: usize) -> Overflow {
        let cap = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Overflow { tokens: cap(tokens), context: cap(context) }
    }
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody { message: message.into(), kind, param: None, code: None, overflow: None },
            retry_after: None,
        }
    }

    fn code(mut self, code: &'static str) -> Self {
        self.body.code = Some(code);
        self
    }

    pub fn bad_request(param: Option<&str>, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.body.param = param.map(str::to_owned);
        e
    }

    pub fn invalid_value(param: &str, message: impl Into<String>) -> Self {
        Self::bad_request(Some(param), message).code("invalid_value")
    }

    /// An image the request carries that is not served: `invalid_image`,
    /// `image_too_large`, `too_many_images`, `images_not_supported`.
    pub fn image(param: &str, code: &'static str, message: impl Into<String>) -> Self {
        Self::bad_request(Some(param), message).code(code)
    }

    /// `/api/pull` while `allow_pull` is off.
    pub fn pull_off() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "invalid_request_error",
            "Pulling models over the API is off: set allow_pull = true (with models_dir), or run `rkllmd pull` on the machine.",
        )
        .code("pull_disabled")
    }

    /// A pull that failed, with the status that says whose fault it is.
    pub fn pull(e: &crate::pull::PullError) -> Self {
        use crate::pull::PullError as P;
        let (status, code) = match e {
            P::Name(_) => (StatusCode::BAD_REQUEST, "invalid_value"),
            P::NotFound(_) => (StatusCode::NOT_FOUND, "model_not_found"),
            P::Denied(_) => (StatusCode::FORBIDDEN, "hub_denied"),
            P::Busy(_) => (StatusCode::CONFLICT, "pull_in_progress"),
            P::Hub(_) => (StatusCode::BAD_GATEWAY, "hub_error"),
            P::Corrupt(_) => (StatusCode::BAD_GATEWAY, "download_corrupt"),
            P::Disk(_) | P::Setup(_) => (StatusCode::INTERNAL_SERVER_ERROR, "pull_failed"),
        };
        let kind = if status.is_server_error() { "server_error" } else { "invalid_request_error" };
        Self::new(status, kind, e.to_string()).code(code)
    }

    pub fn model_not_found(model: &str) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model `{model}` does not exist; GET /v1/models lists the served models."),
        )
        .code("model_not_found");
        e.body.param = Some("model".into());
        e
    }

    pub fn route_not_found(path: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", format!("No route for {path}")).code("not_found")
    }

    pub fn method_not_allowed() -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "Method not allowed for this path")
            .code("method_not_allowed")
    }

    /// A browser request from a foreign web origin, or under a host name the
    /// server does not answer to (`cross_site.rs`).
    pub fn cross_site(code: &'static str, message: String) -> Self {
        Self::new(StatusCode::FORBIDDEN, "invalid_request_error", message).code(code)
    }

    /// A `Host` that breaks RFC 9112: two of them, or one that is no
    /// `host[:port]` (`cross_site.rs`).
    pub fn invalid_host(why: &str) -> Self {
        Self::bad_request(
            None,
            format!("The request's Host is invalid ({why}); send one Host header, `name[:port]` with a numeric port."),
        )
        .code("invalid_host")
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Incorrect or missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`.",
        )
        .code("invalid_api_key")
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            "Expected a JSON body with `Content-Type: application/json`.",
        )
        .code("unsupported_media_type")
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("The request body exceeds the limit of {limit} bytes."),
        )
        .code("payload_too_large")
    }

    pub fn body_timeout(idle_secs: u64) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!("The request body stopped arriving: nothing for {idle_secs} s (body_idle_timeout_secs)."),
        )
        .code("body_timeout")
    }

    pub fn body_too_slow(total_secs: u64) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!("The request body did not arrive whole within {total_secs} s (body_timeout_secs)."),
        )
        .code("body_timeout")
    }

    pub fn body_below_rate(bytes_per_sec: u64) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!("The request body arrived slower than {bytes_per_sec} bytes/s (body_min_rate_bytes_per_sec)."),
        )
        .code("body_timeout")
    }

    pub fn too_many_connections(max: usize) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            format!("Too many open connections (max_connections = {max}); retry later."),
        )
        .code("too_many_connections");
        e.retry_after = Some(1);
        e
    }

    /// The errors hyper answers by itself when a request cannot be parsed
    /// (see `listener::EnvelopeIo`); `None` for any other status.
    pub fn unparsable_request(status: StatusCode) -> Option<Self> {
        let (message, code) = match status {
            StatusCode::BAD_REQUEST => (
                "The request is not valid HTTP/1.1: a malformed request line or header (e.g. a folded header line, an invalid Content-Length, or TLS sent to a plain-HTTP port).",
                "invalid_http",
            ),
            StatusCode::URI_TOO_LONG => ("The request URI is too long.", "uri_too_long"),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => ("The request headers are too large.", "headers_too_large"),
            _ => return None,
        };
        Some(Self::new(status, "invalid_request_error", message).code(code))
    }

    pub fn queue_full(retry_after: u64) -> Self {
        let mut e =
            Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "The request queue is full; retry later.")
                .code("queue_full");
        e.retry_after = Some(retry_after);
        e
    }

    pub fn loading() -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", "The model is still loading.")
            .code("model_loading");
        e.retry_after = Some(5);
        e
    }

    /// A model that could not be loaded (its file, NPU memory): the daemon
    /// serves the others. 503 with `Retry-After`: nothing ran, so a proxy may
    /// send the request to another board.
    pub fn model_load_failed(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message).code("model_load_failed");
        e.retry_after = Some(5);
        e
    }

    /// A model whose earlier load left the runtime stuck: only a restart helps (no `Retry-After`).
    pub fn model_wedged(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message).code("model_wedged")
    }

    /// A model larger than the memory budget: no retry on this board helps.
    pub fn model_too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message).code("model_load_failed")
    }

    /// Not run: the server is stopping (a proxy may retry it elsewhere).
    pub fn shutting_down() -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", "The server is shutting down.")
            .code("shutting_down");
        e.retry_after = Some(2);
        e
    }

    /// Not run: the runtime could not take the run (its thread is gone).
    pub fn runtime_unavailable(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message).code("runtime_unavailable");
        e.retry_after = Some(5);
        e
    }

    /// The runtime has not returned from an aborted run: nothing can run
    /// until it does (or the service manager restarts the daemon).
    pub fn runtime_unresponsive() -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "The runtime has not returned from an aborted run; retry later.",
        )
        .code("runtime_unresponsive");
        e.retry_after = Some(5);
        e
    }

    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message).code("runtime_error")
    }

    /// The reply is not the JSON `response_format` asked for (the runtime
    /// cannot constrain decoding; the reply is checked after the fact).
    pub fn invalid_format(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message).code("invalid_response_format")
    }

    /// The request is valid but this model or configuration cannot serve it
    /// (llama.cpp's answer for a feature it was not started with).
    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, "not_supported_error", message).code("not_supported")
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, "server_error", message).code("timeout")
    }

    pub fn envelope(&self) -> ErrorEnvelope {
        ErrorEnvelope { error: self.body.clone() }
    }
}

/// How a refusal met before a handler (a missing key, a foreign origin, a
/// body too large, no such route) is written: in the shape of the route's
/// errors, which the route table's first guard puts on the request
/// (`api/mod.rs`, from `route.rs`); OpenAI's envelope when none is.
#[derive(Debug, Clone, Copy)]
pub struct Refuse(pub fn(ApiError) -> Response);

impl Refuse {
    /// How refusals of this request are written.
    pub fn of(req: &axum::extract::Request) -> Refuse {
        req.extensions().get::<Refuse>().copied().unwrap_or(Refuse(IntoResponse::into_response))
    }

    pub fn with(self, e: ApiError) -> Response {
        (self.0)(e)
    }
}

/// What an error response said, kept on the response for the counting
/// middleware's log line (the body is already serialised by then).
#[derive(Debug, Clone)]
pub struct Said(pub ErrorBody);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let envelope = self.envelope();
        self.respond_with(&envelope)
    }
}

impl ApiError {
    /// This error's response with `body`, a front end's own shape of it:
    /// its status, `Retry-After`, `x-should-retry` and what it [`Said`].
    pub fn respond_with(self, body: &impl Serialize) -> Response {
        let mut response = (self.status, axum::Json(body)).into_response();
        response.extensions_mut().insert(Said(self.body.clone()));
        let headers = response.headers_mut();
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        // The SDK retries 5xx; a runtime error for this input will not go away.
        if self.status == StatusCode::INTERNAL_SERVER_ERROR {
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        response
    }
}
