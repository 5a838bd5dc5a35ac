//! The only code that talks to the runtime: loading the model on its own
//! thread, the request queue, sampling defaults and per-request overrides,
//! limits, time-outs and abort. It knows nothing of HTTP: a job arrives
//! rendered, and a generation ends with an [`EndReason`], never a status.

mod backend;
mod batch;
mod batch_files;
mod context;
mod conversations;
mod forward;
mod generation;
mod guards;
mod halt;
mod job;
mod kv;
mod kv_images;
mod liveness;
mod model_shape;
mod npu;
mod outcome;
mod plan;
mod prompt_cache;
mod queue;
mod restore_costs;
mod returns;
mod run;
mod saved;
mod saved_dir;
mod schedule;
mod shared_prefix;
mod short_batch;
mod slot_count;
mod slots;
mod vision;

pub use backend::{
    open_runtime, runtime_tokenizer, BackendError, BackendKind, OpenedRuntime, RuntimeChoice, RuntimeSettings,
};
pub use batch_files::BatchFiles;
pub use conversations::WarmConversations;
pub use forward::{Capture, Forward, ForwardJob, Matrix, Rows, RunInput};
pub use generation::Generation;
pub use halt::ABORT_GRACE;
pub use job::{CacheHints, ImageInput, Job, Resent};
pub use npu::Npu;
pub use outcome::{CacheUse, Deadline, EndReason, GenEvent, MissReason, Outcome};
pub use prompt_cache::{Prefix, PromptCacheSettings};
pub use queue::{Place, QueueState};
pub use saved::{DiskTier, SavedSettings};
pub use schedule::ScheduleSettings;
pub use shared_prefix::SharedPrefixSettings;
pub use short_batch::ShortBatches;
pub use slot_count::{planned, single_because, AutoBatch, BatchChoice, ChosenBy, AUTO_MAX};
pub use vision::{builtin_encoder, tags_for, Vision, VisionInfo, VisionSettings, IMAGE_MARKER};

use crate::sampling::SamplingOverrides;
use rkllm_sys::{Abi, InitConfig, LoraAdapter, Model, SamplingParams};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the request queue is full")]
    QueueFull,
    /// An aborted run has not returned ([`halt`]): nothing can run until it does.
    #[error("the runtime did not return from an aborted run")]
    Unresponsive,
    // The registry says which model's load failed (`RegistryError::Load`).
    #[error(transparent)]
    Model(#[from] rkllm_sys::ModelError),
    #[error("loading the LoRA adapter `{name}` failed: {source}")]
    Adapter { name: String, source: rkllm_sys::ModelError },
    #[error("{0}")]
    PromptCache(String),
    #[error("{0}")]
    Vision(String),
    /// The runtime did not return from a probe's run at load
    /// (`short_batch.rs`, `batch_files.rs`): its thread is lost.
    #[error("the runtime did not come back from the {probe} probe: {why}")]
    ProbeWedged { probe: &'static str, why: String },
}

/// What the daemon tells about its runtime (startup log, /health, fingerprint).
#[derive(Debug, Clone)]
pub struct RuntimeInfo {
    pub backend: BackendKind,
    pub abi: Abi,
    /// The runtime's version (from the library's marker), if known.
    pub version: Option<String>,
    /// The library path, or the in-process simulator.
    pub origin: String,
    /// The path or spec given to `rkllm_init`.
    pub model_path: String,
    /// With `batch` > 1: whether the runtime took a batched run with slots
    /// left without input, as the probe at load found (`short_batch.rs`).
    pub short_batches: Option<ShortBatches>,
    /// The batch slots the model was opened with, who chose them and why (`slot_count.rs`).
    pub batch: BatchChoice,
    /// With `batch` > 1 and conversations saved: whether a batched run's
    /// prompt-cache file restores its slots, as the probe at load found
    /// (`batch_files.rs`).
    pub batch_files: Option<BatchFiles>,
}

/// What one request may take.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_new_tokens: u32,
    pub first_token_base: Duration,
    pub first_token_per_kib: Duration,
    pub request_timeout: Duration,
    /// The context given to `rkllm_init`; with `context_from_model`, the
    /// first init's, replaced at load by the context the model was
    /// converted for (`context.rs`).
    pub max_context_len: u32,
    pub context_from_model: bool,
}

/// The context the vendor's demos give `rkllm_init`, and the one a model is
/// first initialised with when its own is to be read (`context.rs`).
pub const DEFAULT_MAX_CONTEXT_LEN: u32 = 4096;

impl Limits {
    /// Prefill time grows with the prompt, so the first-token allowance does too.
    pub fn first_token_timeout(&self, prompt_bytes: usize) -> Duration {
        self.first_token_base + self.first_token_per_kib.mul_f64(prompt_bytes as f64 / 1024.0)
    }
}

/// Everything the engine is built from (the composition root fills it in).
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// The path or `sim:` spec given to `rkllm_init`.
    pub model_path: String,
    pub limits: Limits,
    /// Requests that may wait while one runs.
    pub queue_depth: usize,
    /// Sequences per run (`n_batch`, above 1 every run is batched:
    /// `batch.rs`), the batch's gathering time and the bound on locality
    /// (`schedule.rs`). With `auto_batch` its `batch` is 1 and the load
    /// chooses the slots.
    pub schedule: ScheduleSettings,
    /// `batch = "auto"`: the slots chosen at load (`slot_count.rs`).
    pub auto_batch: Option<AutoBatch>,
    /// NPU memory domain (`extend_param.base_domain_id`).
    pub base_domain_id: i32,
    /// The configured `[sampling]` table, laid over RKLLM's defaults.
    pub sampling: SamplingOverrides,
    /// The daemon renders every prompt itself: switch the runtime's own template off.
    pub disable_runtime_template: bool,
    /// Keep the conversation in the KV cache between runs (`kv.rs`); jobs
    /// without token ids always run stateless.
    pub conversation_cache: bool,
    /// A cached reply that held reasoning may stand for the same reply
    /// resent without it (`kv.rs`): the context keeps the reasoning.
    pub keep_reasoning: bool,
    /// The NPU turn every model's runs share.
    pub npu: Npu,
    /// Loaded with `rkllm_load_lora` right after the model; a job names one by `Job::lora`.
    pub loras: Vec<LoraAdapter>,
    /// A prompt-cache file made if needed and loaded after the adapters (`prompt_cache.rs`).
    pub prompt_cache: Option<PromptCacheSettings>,
    /// A vision-language model's image encoder (`vision.rs`).
    pub vision: Option<VisionSettings>,
    /// Conversations saved as prompt-cache files beside the resident one
    /// (`saved.rs`) with `batch` = 1; with `batch` > 1 the batched runs'
    /// files (`batch_files.rs`), when the probe at load finds them working.
    pub saved: Option<SavedSettings>,
    /// Long prefixes that several conversations share, kept as prompt-cache
    /// files of their own beside the saved conversations (`shared_prefix.rs`);
    /// used only where those are.
    pub shared_prefixes: Option<SharedPrefixSettings>,
}

impl EngineSettings {
    /// What a run samples with unless a request says otherwise: the
    /// `[sampling]` table over RKLLM's defaults.
    pub fn sampling_defaults(&self) -> SamplingParams {
        self.sampling.apply(SamplingParams::RKLLM_DEFAULTS)
    }
}

pub struct Engine {
    model: Model,
    /// The shutdown's abort, and a runtime that ignores an abort: queued jobs end without running.
    halt: halt::Halt,
    /// How fast this model prefills: a prefill's allowance (`liveness.rs`).
    prefill_pace: liveness::PrefillPace,
    /// The prefill bound of the run inside the runtime, for the watchdog (`liveness.rs`).
    prefill_bound: liveness::PrefillBound,
    queue: queue::Queue,
    info: RuntimeInfo,
    defaults: SamplingParams,
    limits: Limits,
    /// `Some` with the conversation cache on.
    kv: Option<std::sync::Mutex<kv::KvCache>>,
    /// Positions in this model's KV cache after its last run, as the runtime
    /// said (`rkllm_get_kv_cache_size`); -1 until it said. The api reads it
    /// for `/metrics` (each model its own, summed there).
    kv_tokens: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Picks every generation's turn (`schedule.rs`).
    scheduler: schedule::Scheduler,
    /// `Some` when the model has a prompt-cache file (loaded).
    prompt_cache: Option<prompt_cache::PromptCache>,
    /// The names of the LoRA adapters loaded with the model.
    adapters: Vec<String>,
    /// `Some` for a vision-language model.
    vision: Option<vision::Vision>,
    /// `Some` with saved conversations and shared prefixes on. Declared
    /// before `saved`, so dropped first: its files go before `saved`
    /// removes the directory they share.
    prefixes: Option<std::sync::Mutex<shared_prefix::SharedPrefixes>>,
    /// `Some` when conversations are saved as files (with `kv`).
    saved: Option<std::sync::Arc<std::sync::Mutex<saved::Saved>>>,
    /// `Some` with the conversation cache on and `batch` > 1: a
    /// conversation per batch slot (`slots.rs`), instead of `kv`.
    slots: Option<std::sync::Mutex<slots::Slots>>,
    /// `Some` with `slots` when a batched run's file restores its slots.
    batch_files: Option<std::sync::Mutex<batch_files::GroupFiles>>,
    /// The runtime wraps each prompt in its own chat template (the daemon
    /// renders none for this model) and runs one job at a time: the run's
    /// own prefill count, not the prompt's ids, is the prompt's size. (A
    /// batch's count is the whole batch's, so a batched job keeps the ids'.)
    runtime_counts_prompt: bool,
    /// Batched runs leave slots without a job without input (`short_batch.rs`).
    short: std::sync::atomic::AtomicBool,
}

impl Engine {
    /// Loads the model on the runtime `open_runtime` gave; blocks for as long
    /// as `rkllm_init` takes (seconds to minutes on a board).
    pub fn load(runtime: OpenedRuntime, settings: EngineSettings) -> Result<Engine, EngineError> {
        let defaults = settings.sampling_defaults();
        let EngineSettings {
            model_path,
            limits,
            queue_depth,
            mut schedule,
            auto_batch,
            base_domain_id,
            sampling: _,
            disable_runtime_template,
            conversation_cache,
            keep_reasoning,
            npu,
            loras,
            prompt_cache,
            vision,
            saved,
            shared_prefixes,
        } = settings;
        if vision.is_some() && schedule.batch > 1 {
            // Batched runs take text slots only (`batch.rs`).
            return Err(EngineError::Vision("a model with a vision encoder is served with batch = 1".into()));
        }
        let single = slot_count::single_because(vision.is_some(), prompt_cache.is_some());
        let auto_batch = auto_batch.map(|auto| AutoBatch { single: auto.single.or(single), ..auto });
        // Before the (slow) model load: a missing encoder or unknown tags fail fast.
        let vision = vision
            .map(|v| vision::Vision::open(&v, runtime.kind, &model_path))
            .transpose()
            .map_err(EngineError::Vision)?;
        let init = InitConfig {
            max_context_len: limits.max_context_len as i32,
            max_new_tokens: limits.max_new_tokens as i32,
            sampling: defaults,
            base_domain_id,
            n_batch: 1,
            // ABI 1.2 takes the image tags at init (1.3: with each run).
            image_tags: vision.as_ref().map(|v| v.info().tags.clone()),
            ..InitConfig::new(model_path.clone())
        };
        let opened = slot_count::open(slot_count::Request {
            runtime: &runtime.runtime,
            init,
            limits,
            configured: schedule.batch,
            auto: auto_batch,
            probe_short: schedule.probe_short,
        })?;
        let slot_count::Opened { model, limits, batch, short: short_batches } = opened;
        schedule.batch = batch.slots;
        if disable_runtime_template {
            wait_for(model.set_chat_template("", "", ""))?;
        }
        for adapter in &loras {
            wait_for(model.load_lora(adapter))
                .map_err(|source| EngineError::Adapter { name: adapter.name.clone(), source })?;
            tracing::info!(adapter = %adapter.name, path = %adapter.path, scale = adapter.scale, "LoRA adapter loaded");
        }
        let prompt_cache = prompt_cache
            .map(|settings| {
                let runtime = format!(
                    "{} {}",
                    runtime.runtime.version().unwrap_or("(no version marker)"),
                    runtime.runtime.origin()
                );
                prompt_cache::PromptCache::prepare(&model, &settings, &runtime, &model_path)
            })
            .transpose()?;
        let short = short_batches == Some(ShortBatches::Accepted);
        let files = batch_files::at_load(
            &model,
            &schedule,
            conversation_cache,
            saved.as_ref(),
            prompt_cache.is_some(),
            slot_count::probe_bound(&limits),
        );
        let (batch_files, batch_files_found) = match files {
            Ok(files) => files,
            Err(why) => return Err(slot_count::wedged(model, "batch-file", why)),
        };
        let info = RuntimeInfo {
            backend: runtime.kind,
            abi: runtime.runtime.abi(),
            version: runtime.runtime.version().map(str::to_owned),
            origin: runtime.runtime.origin().to_string(),
            model_path,
            short_batches,
            batch,
            batch_files: batch_files_found,
        };
        let kv = (conversation_cache && schedule.batch == 1)
            .then(|| std::sync::Mutex::new(kv::KvCache::new(keep_reasoning)));
        let slots = (conversation_cache && schedule.batch > 1).then(|| {
            let mut slots = slots::Slots::new(usize::from(schedule.batch), keep_reasoning);
            slots.set_short(short);
            std::sync::Mutex::new(slots)
        });
        let prefix_dir = saved.as_ref().map(|s| s.dir.clone());
        let saved = saved.filter(|_| kv.is_some()).and_then(|settings| match saved::Saved::open(settings) {
            Ok(saved) => Some(std::sync::Arc::new(std::sync::Mutex::new(saved))),
            Err(why) => {
                tracing::warn!(reason = %why, "conversations are not saved: the directory cannot be made");
                None
            }
        });
        let prefixes = shared_prefixes
            .zip(prefix_dir.filter(|_| saved.is_some()))
            .map(|(settings, dir)| std::sync::Mutex::new(shared_prefix::SharedPrefixes::new(dir, settings)));
        Ok(Engine {
            model,
            prefixes,
            halt: halt::Halt::default(),
            prefill_pace: liveness::PrefillPace::default(),
            prefill_bound: liveness::PrefillBound::default(),
            queue: queue::Queue::new(queue_depth, npu),
            info,
            defaults,
            limits,
            kv,
            saved,
            slots,
            batch_files,
            kv_tokens: std::sync::Arc::new(std::sync::atomic::AtomicI64::new(-1)),
            runtime_counts_prompt: !disable_runtime_template && schedule.batch == 1,
            short: std::sync::atomic::AtomicBool::new(short),
            scheduler: schedule::Scheduler::new(schedule),
            prompt_cache,
            adapters: loras.into_iter().map(|l| l.name).collect(),
            vision,
        })
    }

    pub fn info(&self) -> &RuntimeInfo {
        &self.info
    }
    /// Tokens in the KV cache after the last run, once the runtime said.
    pub fn kv_cache_tokens(&self) -> Option<i64> {
        Some(self.kv_tokens.load(Ordering::Relaxed)).filter(|&t| t >= 0)
    }
    /// What the runtime printed while `rkllm_init` ran.
    pub fn init_log(&self) -> &str {
        self.model.init_log()
    }
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    /// The LoRA adapters loaded with the model, by name.
    pub fn adapter_names(&self) -> impl Iterator<Item = &str> {
        self.adapters.iter().map(String::as_str)
    }
    pub fn conversation_cache(&self) -> bool {
        self.kv.is_some() || self.slots.is_some()
    }
    /// Whether a long prefix that conversations share is kept as a file
    /// (`shared_prefix.rs`): the api then says where a first turn's
    /// system messages and tools end (`CacheHints::stable`).
    pub fn shares_prefixes(&self) -> bool {
        self.prefixes.is_some()
    }
    /// Whether a prompt-cache file is loaded.
    pub fn prompt_cache(&self) -> bool {
        self.prompt_cache.is_some()
    }
    /// Sequences per run (1: unbatched).
    pub fn batch(&self) -> usize {
        self.scheduler.size()
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
    /// Whether any queue place is held: a job waits, runs, or its aborted
    /// run is being drained (the registry's test of "idle", with its leases).
    pub fn in_use(&self) -> bool {
        self.queue.in_use()
    }
    /// A place in the queue, or `QueueFull` (`Unresponsive` while the runtime
    /// is stuck in an aborted run: `halt.rs`) at once. Taken before a request
    /// is prepared (rendered, tokenized), so that a full daemon refuses
    /// without doing that work, as TGI's permit and Ollama's pending channel
    /// do; the place then goes to [`Engine::submit`] or [`Engine::forward`].
    pub fn reserve(&self) -> Result<Place, EngineError> {
        if self.halt.is_unresponsive() {
            return Err(EngineError::Unresponsive);
        }
        self.queue.try_enter().ok_or(EngineError::QueueFull)
    }
    /// Shutdown after the grace period: abort the running generation and
    /// end the queued ones without running them.
    pub fn abort_all(&self) {
        self.halt.close();
        self.model.abort_active();
    }

    fn is_closing(&self) -> bool {
        self.halt.is_closing()
    }

    /// The runtime has not returned from an aborted run (`halt.rs`): nothing can run now.
    pub fn is_unresponsive(&self) -> bool {
        self.halt.is_unresponsive()
    }
}

/// Takes one of the engine's record locks, also one a panic poisoned: what
/// the records hold is checked against the runtime after every run anyway.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The runtime thread's answer to a handle call, awaited: the runtime's
/// error, or the thread's absence, as words for a log line.
async fn answered<T>(answer: tokio::sync::oneshot::Receiver<Result<T, rkllm_sys::ModelError>>) -> Result<T, String> {
    match answer.await {
        Ok(answer) => answer.map_err(|e| e.to_string()),
        Err(_) => Err("the runtime thread is gone".into()),
    }
}

/// The runtime thread's answer to a handle call, waited for on a blocking
/// thread (a model load); a thread that went away is `ThreadGone`.
fn wait_for<T>(
    answer: tokio::sync::oneshot::Receiver<Result<T, rkllm_sys::ModelError>>,
) -> Result<T, rkllm_sys::ModelError> {
    answer.blocking_recv().unwrap_or(Err(rkllm_sys::ModelError::ThreadGone))
}
