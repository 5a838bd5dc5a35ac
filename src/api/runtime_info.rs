//! The wire shapes of what the engine tells about itself (`/health`,
//! `/v1/system`): the engine's types carry no serde or schema attributes.

use crate::engine::{Engine, QueueState, WarmConversations};
use serde::Serialize;
use utoipa::ToSchema;

/// The loaded runtime.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Runtime {
    /// `rkllm` (the real library) or `sim` (the simulated runtime).
    pub backend: &'static str,
    /// The C ABI in use: `1.3` or `1.2`.
    pub abi: String,
    /// The runtime's version (from the library's marker), if known.
    pub version: Option<String>,
    /// The library path, or the in-process simulator. Not in the public
    /// `/health` when an API key protects `/v1/system`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The path or spec given to `rkllm_init` (shown as `origin` is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
    /// With batch > 1: `accepted` (slots without a request get no input), `refused`, `misplaced` or `timed_out` (they get fillers), as the probe at load found, `switched_off` (accepted, then a short run did not keep its slots as they were: fillers) or `not_probed` (`batch_short_probe = false`: fillers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short_batches: Option<&'static str>,
    /// With batch > 1 and conversations saved: `accepted` (a conversation displaced from its batch slot comes back from a batched run's prompt-cache file), `refused` or `misplaced` (the probe at load found the runtime failing to save or load one, or sparing other ids than each slot's own: displaced conversations are prefilled again) or `switched_off` (accepted, then a run's file or restore did not deliver).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_files: Option<&'static str>,
    /// The batch slots the model was opened with.
    pub batch: Batch,
}

/// The batch slots a model was opened with (`batch` in the configuration).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Batch {
    /// Sequences per run (`n_batch`; 1: one request at a time).
    pub slots: u8,
    /// `auto` (chosen at load from the model's KV size per slot, the free memory and the short-batch probe) or `config` (`batch = N`).
    pub chosen_by: &'static str,
    /// Why: the memory arithmetic, the probe's finding, or what keeps the model at 1 slot.
    pub reason: String,
}

impl Runtime {
    /// Without the file paths: what a public endpoint shows when an API key
    /// keeps the rest of the system's description private.
    pub fn without_paths(self) -> Runtime {
        Runtime { origin: None, model_path: None, ..self }
    }
}

impl From<&Engine> for Runtime {
    fn from(engine: &Engine) -> Self {
        let info = engine.info();
        Runtime {
            backend: info.backend.as_str(),
            abi: info.abi.to_string(),
            version: info.version.clone(),
            origin: Some(info.origin.clone()),
            model_path: Some(info.model_path.clone()),
            short_batches: engine.short_batches_now().map(|s| s.as_str()),
            batch: Batch {
                slots: info.batch.slots,
                chosen_by: info.batch.chosen_by.as_str(),
                reason: info.batch.reason.clone(),
            },
            batch_files: engine.batch_files_now().map(|s| s.as_str()),
        }
    }
}

/// The request queue now.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Queue {
    /// Generations on the NPU now (0 or 1).
    pub running: usize,
    /// Requests waiting for their turn.
    pub waiting: usize,
    /// How many may wait before new ones are refused.
    pub capacity: usize,
    /// Tokens the running request has generated so far (0 while it prefills).
    pub running_tokens: u32,
}

impl Queue {
    /// The queues of several models added up; `capacity` is the per-model depth.
    pub fn sum(capacity: usize, states: impl Iterator<Item = QueueState>) -> Queue {
        states.fold(Queue { running: 0, waiting: 0, capacity, running_tokens: 0 }, |q, s| Queue {
            running: q.running + s.running,
            waiting: q.waiting + s.waiting,
            capacity,
            running_tokens: q.running_tokens + s.running_tokens,
        })
    }
}

impl From<QueueState> for Queue {
    fn from(q: QueueState) -> Self {
        let QueueState { running, waiting, capacity, running_tokens } = q;
        Queue { running, waiting, capacity, running_tokens }
    }
}

/// The conversations a loaded model keeps warm (the conversation cache).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Conversations {
    /// Conversations whose state is kept: those the KV cache holds (one,
    /// or one per batch slot) and those saved as prompt-cache files.
    pub warm: usize,
    /// Prompt tokens of the conversations the KV cache holds (0: none).
    pub resident_tokens: usize,
    /// Conversations saved as prompt-cache files (both tiers) and their bytes.
    pub saved: usize,
    pub saved_bytes: u64,
    /// Of those, the ones on the disk tier (`conversation_cache_disk_dir`).
    pub on_disk: usize,
    pub on_disk_bytes: u64,
}

impl From<WarmConversations> for Conversations {
    fn from(w: WarmConversations) -> Self {
        let WarmConversations { warm, resident_tokens, saved, saved_bytes, on_disk, on_disk_bytes } = w;
        Conversations { warm, resident_tokens, saved, saved_bytes, on_disk, on_disk_bytes }
    }
}
