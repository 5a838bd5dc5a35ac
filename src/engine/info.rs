//! What the daemon tells about its runtime (startup log, `/health`,
//! fingerprint): the backend, the ABI, the batch slots and what the probes
//! at load found.

use super::backend::BackendKind;
use super::batch_files::BatchFiles;
use super::short_batch::ShortBatches;
use super::slot_count::BatchChoice;
use rkllm_sys::Abi;

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
