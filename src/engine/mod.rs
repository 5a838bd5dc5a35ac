//! The only code that talks to the runtime: loading the model on its own
//! thread, the request queue, sampling defaults and per-request overrides,
//! limits, time-outs and abort. It knows nothing of HTTP.

mod backend;
mod generation;
mod job;
mod liveness;
mod queue;

pub use backend::{model_id, BackendKind};
pub use generation::{EndReason, GenEvent, Generation, Outcome};
pub use job::{Job, SamplingOverrides};
pub use queue::QueueState;

use crate::config::Config;
use crate::metrics::Timings;
use rkllm_sys::{Abi, InitConfig, Model, SamplingParams};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the request queue is full")]
    QueueFull,
    #[error(transparent)]
    Backend(#[from] backend::BackendError),
    #[error("loading the model failed: {0}")]
    Model(#[from] rkllm_sys::ModelError),
}

/// What the daemon tells about its runtime (startup log, /health, fingerprint).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct RuntimeInfo {
    pub backend: BackendKind,
    #[schema(value_type = String)]
    #[serde(serialize_with = "serialize_display")]
    pub abi: Abi,
    /// The runtime's version (from the library's marker), if known.
    pub version: Option<String>,
    /// The library path, or the in-process simulator.
    pub origin: String,
    /// The path or spec given to `rkllm_init`.
    pub model_path: String,
}

fn serialize_display<S: serde::Serializer>(value: &impl std::fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_new_tokens: u32,
    pub first_token_base: Duration,
    pub first_token_per_kib: Duration,
    pub request_timeout: Duration,
}

pub struct Engine {
    model: Model,
    /// Set at shutdown: queued jobs end without running.
    closing: std::sync::atomic::AtomicBool,
    queue: queue::Queue,
    info: RuntimeInfo,
    defaults: SamplingParams,
    limits: Limits,
}

impl Engine {
    /// Opens the runtime and loads the model; blocks for as long as
    /// `rkllm_init` takes (seconds to minutes on a board). `on_fallback`
    /// receives the reason when `auto` falls back to the simulator.
    pub fn load(config: &Config, on_fallback: impl FnOnce(&str)) -> Result<Engine, EngineError> {
        let (runtime, kind, fallback) = backend::open(config)?;
        if let Some(why) = fallback {
            on_fallback(&why);
        }
        let model_path = backend::model_path(config, kind)?;
        let defaults = config.sampling.apply(SamplingParams::RKLLM_DEFAULTS);
        let init = InitConfig {
            max_context_len: config.max_context_len as i32,
            max_new_tokens: config.max_new_tokens as i32,
            sampling: defaults,
            base_domain_id: config.base_domain_id,
            ..InitConfig::new(model_path.clone())
        };
        let info = RuntimeInfo {
            backend: kind,
            abi: runtime.abi(),
            version: runtime.version().map(str::to_owned),
            origin: runtime.origin().to_string(),
            model_path,
        };
        let model = Model::load(runtime, init)?;
        // The daemon renders every prompt itself: disable the runtime's template.
        model.set_chat_template("", "", "").blocking_recv().map_err(|_| rkllm_sys::ModelError::ThreadGone)??;
        Ok(Engine {
            model,
            closing: std::sync::atomic::AtomicBool::new(false),
            queue: queue::Queue::new(config.queue_depth),
            info,
            defaults,
            limits: Limits {
                max_new_tokens: config.max_new_tokens,
                first_token_base: Duration::from_secs(config.first_token_timeout_secs),
                first_token_per_kib: Duration::from_millis(config.first_token_timeout_ms_per_kib),
                request_timeout: Duration::from_secs(config.request_timeout_secs),
            },
        })
    }

    pub fn info(&self) -> &RuntimeInfo {
        &self.info
    }
    /// What the runtime printed while `rkllm_init` ran.
    pub fn init_log(&self) -> &str {
        self.model.init_log()
    }
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    pub fn sampling_defaults(&self) -> SamplingParams {
        self.defaults
    }
    pub fn queue_state(&self) -> QueueState {
        self.queue.state()
    }
    pub fn queue_full(&self) -> bool {
        self.queue.is_full()
    }
    /// Shutdown after the grace period: abort the running generation and
    /// end the queued ones without running them.
    pub fn abort_all(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::SeqCst);
        self.model.abort_active();
    }

    fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The one structured event per finished request, with the raw timeline
/// (µs from `received`) and the derived figures; warns when our measurement
/// and the runtime's disagree.
pub(crate) fn log_request(job_id: &str, outcome: &Outcome, disconnected: bool) {
    let Outcome { reason, timeline, perf, aborted, .. } = outcome;
    let us =
        |at: Option<std::time::Instant>| at.map(|a| a.saturating_duration_since(timeline.received).as_micros() as u64);
    let timings = Timings::derive(timeline, *perf);
    tracing::info!(
        target: "rkllmd::request",
        id = job_id,
        end = ?reason,
        tokens = timeline.tokens,
        client_disconnected = disconnected,
        admitted_us = us(timeline.admitted),
        first_token_us = us(timeline.first_token),
        last_token_us = us(timeline.last_token),
        finished_us = us(timeline.finished),
        queue_ms = timings.queue_ms,
        ttft_ms = timings.ttft_ms,
        tpot_ms = timings.predicted_per_token_ms,
        decode_tps = timings.predicted_per_second,
        e2e_ms = timings.e2e_ms,
        runtime_prefill_ms = perf.map(|p| p.prefill_time_ms),
        runtime_generate_tokens = perf.map(|p| p.generate_tokens),
        "request finished"
    );
    let Some(p) = perf else { return };
    // After an abort the runtime may have generated tokens we dropped.
    if !aborted && p.generate_tokens != i64::from(timeline.tokens) {
        tracing::warn!(
            id = job_id,
            ours = timeline.tokens,
            runtime = p.generate_tokens,
            "generated-token count differs from the runtime's"
        );
    }
    if let Some(prefill) = timings.prompt_ms {
        if prefill + 1.0 < p.prefill_time_ms {
            tracing::warn!(
                id = job_id,
                ours_ms = prefill,
                runtime_ms = p.prefill_time_ms,
                "measured prefill is shorter than the runtime's own"
            );
        }
    }
}
