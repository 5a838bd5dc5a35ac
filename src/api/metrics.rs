//! `GET /metrics` (Prometheus/OpenMetrics text; public like `/health`),
//! optionally on a listener of its own (`metrics_addr`), and the counting of
//! completion, embedding and rerank requests that never reached the engine.

use super::error::Said;
use super::record::Counting;
use super::route::Routes;
use super::state::AppState;
use super::system::SystemInfo;
use crate::metrics::process::ProcessStats;
use crate::metrics::scrape::{self, Live, SavedTotals};
use crate::metrics::Kind;
use crate::registry::adapter_id;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// The exposition: accumulated request metrics and this moment's gauges.
pub async fn scrape(State(state): State<AppState>) -> Response {
    match super::system::off_the_async_thread(move || exposition(&state)).await {
        Ok(response) => response,
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

fn exposition(state: &AppState) -> Response {
    let observer = crate::metrics::observer();
    let system = SystemInfo::gather(state);
    // Within the same second as `gather`'s read: the cached snapshot.
    let snapshot = observer.telemetry.get();
    let loaded = state.models().ok().map(|r| r.loaded());
    let queue = loaded.as_ref().map(|models| {
        models.iter().map(|m| m.engine.queue_state()).fold((0, 0), |(run, wait), q| (run + q.running, wait + q.waiting))
    });
    let encoder_running = loaded
        .as_ref()
        .and_then(|models| models.iter().filter_map(|m| m.engine.encoder_running()).reduce(|a, b| a + b));
    // Each model's own KV cache: the sum of those that have reported one.
    let kv_cache_tokens = loaded
        .as_ref()
        .and_then(|models| models.iter().filter_map(|m| m.engine.kv_cache_tokens()).reduce(|a, b| a + b));
    let context_len = match loaded.as_deref() {
        Some([one]) => Some(one.engine.limits().max_context_len),
        _ => None,
    };
    let adapters: Vec<String> = loaded
        .iter()
        .flatten()
        .flat_map(|m| m.engine.adapter_names().map(|a| adapter_id(&m.model_id, a)).collect::<Vec<_>>())
        .collect();
    let adapters = (!adapters.is_empty()).then_some(adapters);
    let saved_conversations = loaded.as_ref().and_then(|models| {
        let warm = models.iter().filter_map(|m| m.engine.warm_conversations());
        warm.map(|w| SavedTotals {
            count: w.saved as i64,
            bytes: w.saved_bytes as i64,
            on_disk: w.on_disk as i64,
            on_disk_bytes: w.on_disk_bytes as i64,
        })
        .reduce(|a, b| a + b)
    });
    let process = ProcessStats {
        rss_bytes: system.memory.rss_bytes,
        peak_rss_bytes: system.memory.peak_rss_bytes,
        cpu_seconds: system.cpu.process_seconds,
    };
    let live = Live {
        queue,
        encoder_running,
        kv_cache_tokens,
        saved_conversations,
        context_len,
        adapters,
        info: system.info_labels(),
        telemetry: &snapshot,
        process,
    };
    match scrape::render(&observer.metrics, &live) {
        Ok(text) => ([(header::CONTENT_TYPE, scrape::CONTENT_TYPE)], text).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode the metrics: {e}")).into_response(),
    }
}

/// `/metrics` on the main listener (public, so described in `table`),
/// unless it has a listener of its own.
pub fn main_routes(state: &AppState, table: &mut Routes) -> Router<AppState> {
    if state.settings.metrics_on_main_listener {
        table.public(Router::new(), "/metrics", get(scrape))
    } else {
        Router::new()
    }
}

/// Binds `addr` and serves `/metrics` there until the process ends.
pub async fn serve_separately(state: &AppState, addr: std::net::SocketAddr) -> Result<(), String> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let app = Router::new().route("/metrics", get(scrape)).with_state(state.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("the metrics listener stopped: {e}");
        }
    });
    tracing::info!("metrics on http://{bound}/metrics");
    Ok(())
}

/// What the counting middleware reads: the routes (`route.rs`), and the state
/// (whose registry turns the model a body named into the `model` label).
#[derive(Clone)]
pub struct Counter {
    routes: Arc<Routes>,
    state: AppState,
}

impl Counter {
    pub fn new(routes: Arc<Routes>, state: AppState) -> Counter {
        Counter { routes, state }
    }

    /// The `model` label of a request counted before the engine: the model
    /// (or adapter) its body named when this daemon serves it; empty when
    /// the body named none or one unknown here (a label per unknown name
    /// would let clients grow the metrics without bound).
    fn model_label(&self, counting: &Counting) -> String {
        let registry = self.state.models().ok();
        match counting.named_model().and_then(|asked| registry?.resolve(asked)) {
            Some((spec, Some(adapter))) => adapter_id(&spec.id, &adapter),
            Some((spec, None)) => spec.id.clone(),
            None => String::new(),
        }
    }
}

/// Counts a completion, embedding or rerank request that ended before
/// reaching the engine (bad input, auth, queue full, loading, shutting
/// down) with its status, and logs why (the request log proper has a line
/// only for requests that reached the engine); also one whose client went
/// away before then (499). The request record counts the others: it takes
/// the request's [`Counting`] over when the request reaches the engine.
pub async fn count_requests(State(counter): State<Counter>, mut req: Request, next: Next) -> Response {
    let kind = match counter.routes.counted(req.uri().path()) {
        Some(kind) if req.method() == Method::POST => kind,
        _ => return next.run(req).await,
    };
    let counting = Counting::default();
    req.extensions_mut().insert(counting.clone());
    let mut unanswered = Unanswered { kind, counting: counting.clone(), counter: counter.clone(), armed: true };
    let response = next.run(req).await;
    unanswered.armed = false;
    if !counting.taken_over() {
        let observer = crate::metrics::observer();
        let status = response.status().as_u16();
        observer.metrics.rejected(&counter.model_label(&counting), kind, status);
        if let Some(Said(body)) = response.extensions().get::<Said>() {
            tracing::info!(
                kind = kind.as_str(),
                status,
                code = body.code,
                param = body.param,
                message = %body.message,
                "request refused before the engine"
            );
        }
    }
    response
}

/// A counted request whose handler is dropped before it answers: the
/// client went away (during a model load, say, or while its prompt was
/// prepared). Counted as 499 unless a request record took it over.
struct Unanswered {
    kind: Kind,
    counting: Counting,
    counter: Counter,
    armed: bool,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if self.armed && !self.counting.taken_over() {
            let model = self.counter.model_label(&self.counting);
            crate::metrics::observer().metrics.rejected(&model, self.kind, 499);
            tracing::info!(kind = self.kind.as_str(), "the client went away before its request reached the engine");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    /// `rkllmd_requests_total` of rerank requests with `status`, from the process's metrics.
    fn reranks(status: u16) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, crate::metrics::observer().metrics.registry()).unwrap();
        let labels = [format!("status=\"{status}\""), "kind=\"rerank\"".to_owned()];
        text.lines()
            .filter(|l| l.starts_with("rkllmd_requests_total{") && labels.iter().all(|x| l.contains(x.as_str())))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn rerank() -> axum::http::Request<Body> {
        axum::http::Request::post("/v1/rerank").body(Body::empty()).unwrap()
    }

    /// `/v1/rerank` answered by `handler`, counted as the router counts it.
    fn counted(handler: axum::routing::MethodRouter<AppState>) -> Router {
        let state = AppState::new(crate::api::state::Settings::example());
        let mut routes = Routes::default();
        routes.insert("/v1/rerank", crate::api::route::Route::counted(Kind::Rerank));
        let router = Router::new().route("/v1/rerank", handler);
        let counter = Counter::new(Arc::new(routes), state.clone());
        router.layer(axum::middleware::from_fn_with_state(counter, count_requests)).with_state(state)
    }

    #[tokio::test]
    async fn a_request_dropped_before_the_engine_is_counted_once_as_499() {
        // Never answers, never reaches the engine: as a request waiting for its model to load.
        let waiting = counted(axum::routing::post(std::future::pending::<StatusCode>));
        let before = reranks(499);
        let mut call = Box::pin(waiting.oneshot(rerank()));
        assert!(futures_util::poll!(&mut call).is_pending());
        drop(call);
        assert_eq!(reranks(499), before + 1.0);

        // Answered before the engine: counted with its own status, not 499.
        let refused = counted(axum::routing::post(|| async { StatusCode::NOT_IMPLEMENTED }));
        let before_501 = reranks(501);
        assert_eq!(refused.oneshot(rerank()).await.unwrap().status(), 501);
        assert_eq!((reranks(501), reranks(499)), (before_501 + 1.0, before + 1.0));
    }
}
