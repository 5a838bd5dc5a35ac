//! Observability: the request timeline and every figure derived from it,
//! the request log, Prometheus metrics, and NPU/system telemetry.
//!
//! One [`Observer`] per process holds the accumulated metrics, the telemetry
//! sampler and the optional timings log. The engine reports each finished
//! request once ([`finish_request`]); the same [`Timings`] feed the final
//! chunk, the log line, the timings log and the histograms.

pub mod board;
pub mod init_log;
pub mod process;
pub mod registry;
pub mod request_log;
pub mod scrape;
pub mod telemetry;
pub mod timeline;

pub use request_log::{usage_prompt_tokens, Finished, Kind};
pub use timeline::{RuntimePerf, Timeline, Timings};

use std::path::PathBuf;
use std::sync::OnceLock;

/// What observability is built from.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the sysfs/debugfs/procfs telemetry files are read from.
    pub telemetry_root: PathBuf,
    /// Append one JSON line per finished request here.
    pub timings_log: Option<PathBuf>,
}

pub struct Observer {
    pub metrics: registry::Metrics,
    pub telemetry: telemetry::Sampler,
    timings_log: Option<request_log::TimingsLog>,
}

static OBSERVER: OnceLock<Observer> = OnceLock::new();

/// Sets the process's observer up from the configuration; call once at start,
/// before any request. Fails when the timings log cannot be opened.
pub fn init(settings: &Settings) -> Result<(), String> {
    let observer = Observer {
        metrics: registry::Metrics::new(),
        telemetry: telemetry::Sampler::new(&settings.telemetry_root),
        timings_log: settings.timings_log.as_deref().map(request_log::TimingsLog::open).transpose()?,
    };
    OBSERVER.set(observer).map_err(|_| "the observer was initialised twice".to_owned())
}

/// The process's observer (a default one — root `/`, no timings log — if
/// [`init`] was not called, as in unit tests).
pub fn observer() -> &'static Observer {
    OBSERVER.get_or_init(|| Observer {
        metrics: registry::Metrics::new(),
        telemetry: telemetry::Sampler::new("/"),
        timings_log: None,
    })
}

/// Everything that happens once per request that reached the engine: the
/// log event, the cross-check, the metrics and the timings-log line. The api
/// calls it with the outcome it answered (or would have answered) with.
pub fn finish_request(f: &Finished) {
    let o = observer();
    let model = f.model;
    let timings = Timings::derive(f.timeline, f.perf, f.cached_tokens);
    request_log::log(f, &timings, model);
    for mismatch in request_log::cross_check(f, &timings) {
        o.metrics.mismatch(mismatch);
    }
    o.metrics.finished(f, &timings, model);
    if let Some(log) = &o.timings_log {
        log.append(&request_log::Line {
            unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
            id: f.id,
            model,
            kind: f.kind,
            inputs: f.inputs,
            status: f.status,
            finish_reason: f.finish_reason,
            prompt_tokens: f.prompt_tokens(&timings),
            completion_tokens: timings.predicted_n,
            client_disconnected: f.client_disconnected,
            run_ms: timeline::run_ms(f.timeline),
            timeline_us: request_log::TimelineUs::of(f.timeline),
            timings: &timings,
        });
    }
}
