//! The HTTP listener: accepts TCP connections and serves the router over
//! HTTP/1.1 and h2c with hyper, adding what `axum::serve` lacks:
//! - a header-read time-out (a client gets that long to send a request's
//!   head; the same timer ends an idle kept-alive connection), so slowloris
//!   connections do not pile up;
//! - a body-idle time-out (a body that stops arriving is answered with 408)
//!   and a time-out on the whole body (a body trickling in is too);
//! - a cap on open connections (past it, a connection is answered with 503
//!   and closed), which health probes pass (`GET /health`, `/health/ready`
//!   are served on up to [`PROBE_CONNECTIONS`] more connections): a service
//!   manager or load balancer must not take a busy daemon for a dead one;
//! - the OpenAI error envelope on the error responses hyper writes by itself
//!   when a request cannot be parsed ([`EnvelopeIo`]);
//! - `Connection: close` on an HTTP/1 response given before the request's
//!   body was read (a refusal), since hyper will not read the rest to
//!   reuse the connection.
//!
//! Graceful shutdown ([`Shutdown`]): once draining, no more connections are
//! accepted, idle ones are closed and busy ones finish their response; once
//! cancelled (the shutdown's abort), a request still without its response
//! (being prepared: tokenized, its images decoded) is answered 503
//! `shutting_down` at once, and the listener waits [`CANCEL_LINGER`] at most
//! for the connections left.

use crate::api::error::{ApiError, Refuse};
use crate::conn_cap::ConnCap;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, Request, StatusCode, Version};
use axum::response::IntoResponse;
use axum::Router;
use http_body::Body as _;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

/// Where the daemon's shutdown is, as the listener sees it (`server.rs` sets it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    Serving,
    /// No more connections; those open finish their responses.
    Draining,
    /// The running work was aborted: what is still being prepared is not
    /// waited for.
    Cancelled,
}

/// After the cancel, how long the connections left may take: the aborted
/// runs' streams get their endings within the abort's grace (1 s,
/// `engine/halt.rs`), and the 503s must be written.
const CANCEL_LINGER: Duration = Duration::from_millis(1_500);

/// A body's rate is judged once it has been read this long: a client's
/// first moments (a slow start, a pause) do not count against it.
const MIN_RATE_AFTER: Duration = Duration::from_secs(5);

/// What the listener enforces (config: `header_read_timeout_secs`,
/// `body_idle_timeout_secs`, `body_timeout_secs`, `max_connections`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub header_read_timeout: Duration,
    pub body_idle_timeout: Duration,
    pub body_timeout: Duration,
    /// Bytes per second a body must average after [`MIN_RATE_AFTER`] (0: none).
    pub body_min_rate: u64,
    pub max_connections: usize,
    /// Percent of `max_connections` one client address may hold (`conn_cap.rs`).
    pub client_connection_share: u8,
}

/// Connections over the cap that may still be health probes, at most.
pub const PROBE_CONNECTIONS: usize = 64;
/// How long a health probe over the cap may take in all.
const PROBE_LIMIT: Duration = Duration::from_secs(5);
/// While a connection over the cap has sent only part of its request
/// line, look again this often.
const PROBE_PEEK_EVERY: Duration = Duration::from_millis(10);

/// A refused connection (over the cap) is kept this long at most, so the
/// client can read the 503 before the socket closes.
const REFUSE_LINGER: Duration = Duration::from_secs(1);
/// After a failed accept (e.g. out of file descriptors), wait this long
/// instead of spinning on the same error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener`, its connections under `cap`, until the
/// shutdown drains and every connection has finished, or [`CANCEL_LINGER`]
/// after it was cancelled.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    settings: Settings,
    cap: Arc<ConnCap>,
    shutdown: watch::Receiver<Shutdown>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(settings.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let probes = Arc::new(Semaphore::new(PROBE_CONNECTIONS));
    let limits =
        BodyLimits { idle: settings.body_idle_timeout, total: settings.body_timeout, min_rate: settings.body_min_rate };
    let refusal = Bytes::from(over_capacity_response(settings.max_connections));
    let graceful = GracefulShutdown::new();
    let draining = reached(shutdown.clone(), Shutdown::Draining);
    let mut draining = std::pin::pin!(draining);
    loop {
        let (tcp, client) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut draining => break,
        };
        let Some(permit) = cap.hold(client.ip()) else {
            match probes.clone().try_acquire_owned() {
                Ok(probe) => {
                    let over = OverCap {
                        app: app.clone(),
                        builder: builder.clone(),
                        limits,
                        refusal: refusal.clone(),
                        cap: cap.clone(),
                    };
                    tokio::spawn(over.serve(tcp, probe, settings.max_connections));
                }
                Err(_) => {
                    cap.refused();
                    tokio::spawn(refuse(tcp, refusal.clone()));
                }
            }
            continue;
        };
        // Without TCP_NODELAY each small SSE write waits for the ACK of the one before, and on a kept-alive
        // connection the client delays that ACK by ~40 ms: `rkllmd bench` measured TTFT 43 ms instead of 1 ms.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        let app = app.clone();
        let cancel = shutdown.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let handled = handle(app.clone(), req, limits);
            let cancelled = reached(cancel.clone(), Shutdown::Cancelled);
            async move {
                tokio::select! {
                    response = handled => response,
                    () = cancelled => {
                        let mut response = ApiError::shutting_down().into_response();
                        crate::api::mark_instance(&mut response);
                        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                        Ok(response)
                    }
                }
            }
        });
        let conn = builder.serve_connection(TokioIo::new(EnvelopeIo::new(tcp)), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("connection ended with an error: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    let finished = graceful.shutdown();
    let mut finished = std::pin::pin!(finished);
    tokio::select! {
        () = &mut finished => return,
        () = reached(shutdown, Shutdown::Cancelled) => {}
    }
    if tokio::time::timeout(CANCEL_LINGER, finished).await.is_err() {
        tracing::warn!("connections still open {} ms after the shutdown's abort are closed", CANCEL_LINGER.as_millis());
    }
}

/// Resolves once the shutdown is at `phase` or past it.
async fn reached(mut shutdown: watch::Receiver<Shutdown>, phase: Shutdown) {
    let past = |now: &Shutdown| *now == phase || *now == Shutdown::Cancelled;
    if shutdown.wait_for(past).await.is_err() {
        // The sender is gone without reaching it: it never comes.
        std::future::pending::<()>().await;
    }
}

/// How long a request body may take: without data, and in all.
#[derive(Debug, Clone, Copy)]
struct BodyLimits {
    idle: Duration,
    total: Duration,
    /// Bytes per second, averaged from the first read, after [`MIN_RATE_AFTER`].
    min_rate: u64,
}

/// How far a request body was read: not to its end (`UNREAD`), to its
/// end (`WHOLE`), or until a time-out fired (`IDLE`, `TOTAL`) or it came
/// too slowly (`SLOW`).
struct BodyState;
impl BodyState {
    const UNREAD: u8 = 0;
    const IDLE: u8 = 1;
    const TOTAL: u8 = 2;
    const WHOLE: u8 = 3;
    const SLOW: u8 = 4;
}

/// One request through the router, its body under the time-outs.
async fn handle(
    app: Router,
    req: Request<Incoming>,
    limits: BodyLimits,
) -> Result<axum::response::Response, Infallible> {
    let empty = req.body().is_end_stream();
    let http1 = req.version() < Version::HTTP_2;
    let state = Arc::new(AtomicU8::new(if empty { BodyState::WHOLE } else { BodyState::UNREAD }));
    let req = req.map(|body| {
        Body::new(TimedBody {
            inner: body,
            limits,
            idle_timer: None,
            deadline: None,
            started: None,
            received: 0,
            state: state.clone(),
        })
    });
    let mut response = app.oneshot(req).await?;
    // Whatever the handler made of the failed read, the cause is the client's slowness.
    let error = match state.load(Ordering::SeqCst) {
        BodyState::IDLE => ApiError::body_timeout(limits.idle.as_secs()),
        BodyState::TOTAL => ApiError::body_too_slow(limits.total.as_secs()),
        BodyState::SLOW => ApiError::body_below_rate(limits.min_rate),
        BodyState::UNREAD if http1 => {
            // Refused before its body was read (a missing key, a foreign Host, a body too large):
            // hyper closes such a connection, and a client that sent its next request on it
            // meanwhile sees it closed without an answer. Said, the client opens a new one.
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Ok(response);
        }
        _ => return Ok(response),
    };
    // In the route's error shape (`api::refusals` put it on the response).
    let refuse = response.extensions().get::<Refuse>().copied().unwrap_or(Refuse(IntoResponse::into_response));
    let mut response = refuse.with(error);
    // A response made here replaces the handler's, which carried the board's name.
    crate::api::mark_instance(&mut response);
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    Ok(response)
}

/// A request body that fails once no data has arrived for `idle` while the
/// handler waits for it, or once it has been read for `total` without
/// ending. The timers run only while the body is being read.
struct TimedBody {
    inner: Incoming,
    limits: BodyLimits,
    idle_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When it began to be read, and the bytes since (for `min_rate`).
    started: Option<tokio::time::Instant>,
    received: u64,
    state: Arc<AtomicU8>,
}

impl TimedBody {
    /// The body so far came slower than `min_rate` (judged after [`MIN_RATE_AFTER`]).
    fn too_slow(&self) -> bool {
        let elapsed = self.started.map_or(Duration::ZERO, |s| s.elapsed());
        self.limits.min_rate > 0
            && elapsed > MIN_RATE_AFTER
            && (self.received as f64) < self.limits.min_rate as f64 * elapsed.as_secs_f64()
    }
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let total = this.limits.total;
        // First, so that a body trickling in cannot keep it from firing.
        this.started.get_or_insert_with(tokio::time::Instant::now);
        let deadline = this.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(total)));
        if deadline.as_mut().poll(cx).is_ready() {
            this.state.store(BodyState::TOTAL, Ordering::SeqCst);
            return Poll::Ready(Some(Err(format!("the body took over {} s", total.as_secs()).into())));
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.idle_timer = None;
            if frame.is_none() || this.inner.is_end_stream() {
                this.state.store(BodyState::WHOLE, Ordering::SeqCst);
            } else {
                this.received += frame.as_ref().and_then(|f| f.as_ref().ok()?.data_ref()).map_or(0, |d| d.len() as u64);
                if this.too_slow() {
                    // A body trickling in (a byte now and then keeps the idle timer from firing).
                    this.state.store(BodyState::SLOW, Ordering::SeqCst);
                    let rate = this.limits.min_rate;
                    return Poll::Ready(Some(Err(format!("the body came slower than {rate} bytes/s").into())));
                }
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let idle = this.limits.idle;
        let timer = this.idle_timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
        ready!(timer.as_mut().poll(cx));
        this.state.store(BodyState::IDLE, Ordering::SeqCst);
        Poll::Ready(Some(Err(format!("no body data for {} s", idle.as_secs()).into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn over_capacity_response(max_connections: usize) -> Vec<u8> {
    raw_response(&ApiError::too_many_connections(max_connections), &["retry-after: 1"])
}

/// A whole HTTP/1.1 response carrying `error`'s envelope, closing the connection.
fn raw_response(error: &ApiError, extra_headers: &[&str]) -> Vec<u8> {
    let body = serde_json::to_vec(&error.envelope()).unwrap_or_default();
    let mut head = format!(
        "HTTP/1.1 {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        error.status,
        body.len()
    );
    for line in extra_headers {
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

/// A connection over the cap (the cap full, or its address at its share),
/// while a probe slot is free.
struct OverCap {
    app: Router,
    builder: auto::Builder<TokioExecutor>,
    limits: BodyLimits,
    refusal: Bytes,
    /// Told of each refusal: readiness reports them (`conn_cap.rs`).
    cap: Arc<ConnCap>,
}

impl OverCap {
    /// Serves a health probe (its requests to `/health` and `/health/ready`;
    /// anything else on it gets the 503), answers anything else with the 503.
    async fn serve(self, tcp: TcpStream, _probe: tokio::sync::OwnedSemaphorePermit, max_connections: usize) {
        let probe = tokio::time::timeout(REFUSE_LINGER, is_health_probe(&tcp)).await.unwrap_or(false);
        if !probe {
            self.cap.refused();
            return refuse(tcp, self.refusal).await;
        }
        let OverCap { app, builder, limits, cap, .. } = self;
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let (app, cap) = (app.clone(), cap.clone());
            async move {
                let mut response = if is_health_path(req.uri().path()) {
                    handle(app, req, limits).await?
                } else {
                    cap.refused();
                    ApiError::too_many_connections(max_connections).into_response()
                };
                response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                Ok::<_, Infallible>(response)
            }
        });
        let conn = builder.serve_connection(TokioIo::new(EnvelopeIo::new(tcp)), service);
        let _ = tokio::time::timeout(PROBE_LIMIT, conn).await;
    }
}

fn is_health_path(path: &str) -> bool {
    path == "/health" || path == "/health/ready"
}

/// Whether the connection's first request line asks for a health path
/// (looked at without reading it, so hyper reads it whole after).
async fn is_health_probe(tcp: &TcpStream) -> bool {
    const GET: &[u8] = b"GET ";
    let mut buf = [0u8; 64];
    loop {
        let seen = match tcp.peek(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => &buf[..n],
        };
        if let Some(target) = seen.strip_prefix(GET) {
            // "GET /health HTTP/1.1", "GET /health/ready?x HTTP/1.1".
            if let Some(end) = target.iter().position(|&b| b == b' ' || b == b'?') {
                return std::str::from_utf8(&target[..end]).is_ok_and(is_health_path);
            }
        } else if !GET.starts_with(seen) {
            return false;
        }
        if seen.len() == buf.len() {
            return false;
        }
        // Part of the line so far: peeking again at once would return the same bytes.
        tokio::time::sleep(PROBE_PEEK_EVERY).await;
    }
}

/// Answers a connection over the cap with 503 and closes it. What the client
/// sent is read and discarded for a moment first: closing a socket with
/// unread data resets it, and the client might lose the answer.
async fn refuse(mut tcp: TcpStream, response: Bytes) {
    let answer = async {
        tcp.write_all(&response).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 4096];
        while tcp.read(&mut sink).await? > 0 {}
        Ok::<_, io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSE_LINGER, answer).await;
}

/// The connection as hyper sees it, so that the error responses hyper writes
/// by itself carry the envelope too.
///
/// hyper 1 answers a request it cannot parse on its own, before any service
/// runs, with an empty body, and offers no hook to change that: 400 for a
/// malformed request line or header (an obs-fold line, a negative
/// Content-Length, TLS bytes on the plain port), 414 for a URI too long for
/// `http::Uri`, 431 for a head over its buffer size. Such a response is
/// recognised by its head (one of those statuses with `content-length: 0`,
/// which the router never writes: every error of its own carries the
/// envelope), and rewritten with the envelope as its body. Writes are not
/// vectored, so hyper hands over each head as one buffer.
struct EnvelopeIo<T> {
    inner: T,
    /// A rewritten response still to be written, and how much of it is.
    pending: Vec<u8>,
    written: usize,
}

impl<T> EnvelopeIo<T> {
    fn new(inner: T) -> Self {
        EnvelopeIo { inner, pending: Vec::new(), written: 0 }
    }
}

impl<T: AsyncWrite + Unpin> EnvelopeIo<T> {
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for EnvelopeIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for EnvelopeIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(rewritten) = with_envelope(buf) {
            self.pending = rewritten;
            // Taken whole; what the socket does not take now, flush or shutdown finishes.
            if let Poll::Ready(Err(e)) = self.poll_pending(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// hyper's own parse-error response, rewritten with the envelope; `None` for
/// anything else.
fn with_envelope(head: &[u8]) -> Option<Vec<u8>> {
    // Cheap first: a body write is neither short nor starts with a status line.
    if head.len() > 1024 || !head.starts_with(b"HTTP/1.") {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let head = text.strip_suffix("\r\n\r\n")?;
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let status = status_line.strip_prefix("HTTP/1.1 ").or_else(|| status_line.strip_prefix("HTTP/1.0 "))?;
    let status = StatusCode::from_bytes(status.get(..3)?.as_bytes()).ok()?;
    let error = ApiError::unparsable_request(status)?;
    let lines: Vec<&str> = headers.split("\r\n").filter(|l| !l.is_empty()).collect();
    let empty =
        |l: &&str| l.split_once(':').is_some_and(|(k, v)| k.eq_ignore_ascii_case("content-length") && v.trim() == "0");
    if !lines.iter().any(empty) {
        return None;
    }
    let kept: Vec<&str> = lines
        .into_iter()
        .filter(|l| {
            let name = l.split(':').next().unwrap_or("").trim();
            !["content-length", "connection", "content-type"].iter().any(|h| name.eq_ignore_ascii_case(h))
        })
        .collect();
    Some(raw_response(&error, &kept))
}

#[cfg(test)]
mod tests {
    use super::with_envelope;

    #[test]
    fn hyper_parse_error_heads_get_the_envelope_and_nothing_else_changes() {
        let out = with_envelope(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: x\r\n\r\n").unwrap();
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n") && head.contains("date: x"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "uri_too_long");
        // A response with a body, another status, or a partial head is left alone.
        assert!(with_envelope(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n").is_none());
        assert!(with_envelope(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(with_envelope(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n").is_none());
    }
}
