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
pub use job::Job;
pub use queue::QueueState;

use crate::config::Config;
use crate::conversation::Prompter;
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
    #[error(transparent)]
    Prompt(#[from] crate::conversation::LoadError),
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
    pub max_context_len: u32,
}

pub struct Engine {
    model: Model,
    /// Set at shutdown: queued jobs end without running.
    closing: std::sync::atomic::AtomicBool,
    queue: queue::Queue,
    info: RuntimeInfo,
    defaults: SamplingParams,
    limits: Limits,
    prompter: Prompter,
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
        // Before the (slow) model load, so a bad template fails fast.
        let prompter = Prompter::load(&crate::app::prompt_settings(config), &model_path)?;
        prompter.log_choice();
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
        if prompter.renders() {
            // The daemon renders every prompt itself: disable the runtime's template.
            model.set_chat_template("", "", "").blocking_recv().map_err(|_| rkllm_sys::ModelError::ThreadGone)??;
        }
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
                max_context_len: config.max_context_len,
            },
            prompter,
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
    /// The chat template and tokenizer loaded for this model.
    pub fn prompter(&self) -> &Prompter {
        &self.prompter
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

/// Hands a finished request to the observer (request log, cross-check,
/// metrics, timings log).
pub(crate) fn log_request(job_id: &str, outcome: &Outcome, disconnected: bool, called_tools: bool) {
    let (status, finish_reason) =
        if disconnected { (499, "abort") } else { outcome.reason.status_and_finish_reason(called_tools) };
    crate::metrics::finish_request(&crate::metrics::Finished {
        id: job_id,
        status,
        finish_reason,
        timeline: &outcome.timeline,
        perf: outcome.perf,
        dropped_tokens: outcome.dropped_tokens,
        client_disconnected: disconnected,
        counted_prompt_tokens: outcome.prompt_tokens,
    });
}
