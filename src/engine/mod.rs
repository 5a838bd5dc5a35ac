//! The only code that talks to the runtime: loading the model on its own
//! thread, the request queue, sampling defaults and per-request overrides,
//! limits, time-outs and abort. It knows nothing of HTTP: a job arrives
//! rendered, and a generation ends with an [`EndReason`], never a status.

mod backend;
mod batch;
mod batch_files;
mod batch_runs;
mod batched;
mod calls;
mod context;
mod conversations;
mod error;
mod filler_cost;
mod forward;
mod generation;
mod guards;
mod halt;
mod handle;
mod info;
mod job;
mod kv;
mod limits;
mod liveness;
mod model_shape;
mod npu;
mod outcome;
mod plan;
mod prompt;
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
mod state;
mod vision;

pub use backend::{
    open_runtime, runtime_tokenizer, runtime_tokenizer_json, BackendError, BackendKind, OpenedRuntime, RuntimeChoice,
    RuntimeSettings,
};
pub use batch_files::BatchFiles;
pub use conversations::WarmConversations;
pub use error::EngineError;
pub use forward::{Capture, Forward, ForwardJob, Matrix, Rows, RunInput};
pub use generation::Generation;
pub use halt::ABORT_GRACE;
pub use info::RuntimeInfo;
pub use job::{CacheHints, Handoff, Job, Resent, Shown};
pub use limits::{Limits, DEFAULT_MAX_CONTEXT_LEN};
pub use npu::Npu;
pub use outcome::{CacheUse, Deadline, EndReason, GenEvent, MissReason, Outcome};
pub use prompt::{ImageInput, Prompt};
pub use prompt_cache::{Prefix, PromptCacheSettings};
pub use queue::{Place, QueueState};
pub use saved::{DiskTier, SavedSettings};
pub use schedule::ScheduleSettings;
pub use shared_prefix::SharedPrefixSettings;
pub use short_batch::ShortBatches;
pub use slot_count::{planned, single_because, AutoBatch, BatchChoice, ChosenBy, AUTO_MAX};
pub use state::Engine;
pub use vision::{builtin_encoder, tags_for, Vision, VisionInfo, VisionSettings, IMAGE_MARKER};

use crate::sampling::SamplingOverrides;
use batched::Batched;
use calls::wait_for;
use conversations::Conversations;
use handle::Handle;
use rkllm_sys::{InitConfig, LoraAdapter, SamplingParams};

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
        let resident = conversation_cache && schedule.batch == 1;
        let prefix_dir = saved.as_ref().map(|s| s.dir.clone());
        let saved = saved.filter(|_| resident).and_then(|settings| match saved::Saved::open(settings) {
            Ok(saved) => Some(saved),
            Err(why) => {
                tracing::warn!(reason = %why, "conversations are not saved: the directory cannot be made");
                None
            }
        });
        let prefixes = shared_prefixes
            .zip(prefix_dir.filter(|_| saved.is_some()))
            .map(|(settings, dir)| shared_prefix::SharedPrefixes::new(dir, settings));
        let conversations = resident.then(|| Conversations::new(kv::KvCache::new(keep_reasoning), saved, prefixes));
        let batched = (conversation_cache && schedule.batch > 1).then(|| {
            let mut slots = slots::Slots::new(usize::from(schedule.batch), keep_reasoning);
            slots.set_short(short);
            Batched::new(slots, batch_files)
        });
        Ok(Engine {
            handle: Handle::new(model, info.abi, limits, short),
            queue: queue::Queue::new(queue_depth, npu),
            info,
            defaults,
            runtime_counts_prompt: !disable_runtime_template && schedule.batch == 1,
            scheduler: schedule::Scheduler::new(schedule),
            prompt_cache,
            adapters: loras.into_iter().map(|l| l.name).collect(),
            vision,
            conversations,
            batched,
        })
    }
}
