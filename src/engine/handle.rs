//! One model's runtime handle and what every part of the engine reads
//! beside it: its limits, the halt at shutdown (or after an abort the
//! runtime ignored), what the watchdog learns of its runs, and the KV
//! cache's size as the runtime last said. The conversation caches and the
//! runs are handed this, not the whole engine.

use super::halt::Halt;
use super::limits::Limits;
use super::liveness::Liveness;
use rkllm_sys::{Abi, Model};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(super) struct Handle {
    pub model: Model,
    pub abi: Abi,
    pub limits: Limits,
    /// The shutdown's abort, and a runtime that ignores an abort: queued jobs end without running.
    pub halt: Halt,
    /// How fast this model prefills, and the bound of the run inside it (`liveness.rs`).
    pub liveness: Liveness,
    /// Positions in this model's KV cache after its last run, as the runtime
    /// said (`rkllm_get_kv_cache_size`); -1 until it said. The api reads it
    /// for `/metrics` (each model its own, summed there).
    pub kv_tokens: Arc<AtomicI64>,
    /// Batched runs leave slots without a job without input (`short_batch.rs`).
    short: AtomicBool,
}

impl Handle {
    pub fn new(model: Model, abi: Abi, limits: Limits, short: bool) -> Self {
        Handle {
            model,
            abi,
            limits,
            halt: Halt::default(),
            liveness: Liveness::default(),
            kv_tokens: Arc::new(AtomicI64::new(-1)),
            short: AtomicBool::new(short),
        }
    }

    /// How long a run may prefill (`liveness.rs`).
    pub fn prefill_stall(&self, sent: Option<usize>, prompt: (Option<usize>, usize), batch: u32) -> Duration {
        self.liveness.prefill_stall(&self.limits, sent, prompt, batch)
    }

    /// A run is inside the runtime: `rkllm_run` has not returned.
    pub fn in_run(&self) -> bool {
        self.model.activity().running()
    }

    /// Asks the runtime thread for the KV cache's size (it answers between
    /// runs) and keeps it for `/metrics` when it comes; nothing waits for it.
    pub fn sample_kv_cache(&self) {
        let size = self.model.kv_cache_size();
        let kv_tokens = self.kv_tokens.clone();
        let publish = async move {
            if let Ok(Ok(sizes)) = size.await {
                kv_tokens.store(sizes.iter().map(|&s| i64::from(s)).sum(), Ordering::Relaxed);
            }
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(publish);
        }
    }

    /// Keeps the KV cache's size the runtime reported after a run (summed over the slots).
    pub fn kv_size_reported(&self, size: i64) {
        self.kv_tokens.store(size, Ordering::Relaxed);
    }

    /// Whether a batched run leaves slots without a job without input.
    pub fn short_batches(&self) -> bool {
        self.short.load(Ordering::Relaxed)
    }

    /// A short run did not keep a slot without input as it was: fillers
    /// from now on (WARN, counted). `true` when this switched them off.
    pub fn short_batch_broken(&self, why: &str) -> bool {
        let was = self.short.swap(false, Ordering::Relaxed);
        if was {
            crate::metrics::observer().metrics.batch_short_off();
            tracing::warn!(reason = why, "short batches are switched off for this model: fillers from now on");
        }
        was
    }
}
