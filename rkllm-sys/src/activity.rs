//! Signs of life of the runtime thread, for a service watchdog.
//!
//! A hung runtime (a wedged NPU driver, a deadlock inside the library)
//! blocks the runtime thread inside a call forever, while a busy one is in
//! a long prefill (no callbacks for minutes) or decoding (a callback per
//! token). The facts that tell them apart are kept here as atomics, so the
//! result callback can stamp them without taking a lock; what counts as
//! "too long" is the caller's policy.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What a watchdog needs to tell a busy runtime from a hung one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activity {
    /// The id of the run inside `rkllm_run` (the `run` of its
    /// [`Event::Started`](crate::Event::Started)), if one is.
    pub run: Option<u64>,
    /// Time since the last sign of life (model loaded, run start, callback, run end).
    pub since_progress: Duration,
    /// Token callbacks so far in the active (or last) run; 0 while prefilling.
    pub tokens: u64,
    /// Prompt length of the active (or last) run in bytes.
    pub prompt_bytes: usize,
}

impl Activity {
    /// A run is inside `rkllm_run`.
    pub fn running(&self) -> bool {
        self.run.is_some()
    }
}

pub(crate) struct Progress {
    epoch: Instant,
    /// Nanoseconds from `epoch` to the last sign of life.
    last_ns: AtomicU64,
    tokens: AtomicU64,
    prompt_bytes: AtomicUsize,
}

impl Progress {
    pub(crate) fn new() -> Self {
        Progress {
            epoch: Instant::now(),
            last_ns: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            prompt_bytes: AtomicUsize::new(0),
        }
    }

    /// Stamps a sign of life (also used when `rkllm_run` returns).
    pub(crate) fn stamp(&self, at: Instant) {
        let ns = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.last_ns.fetch_max(ns, Ordering::Relaxed);
    }

    pub(crate) fn run_started(&self, prompt_bytes: usize) {
        self.tokens.store(0, Ordering::Relaxed);
        self.prompt_bytes.store(prompt_bytes, Ordering::Relaxed);
        self.stamp(Instant::now());
    }

    /// Any callback is a sign of life; token callbacks are also counted.
    pub(crate) fn callback(&self, at: Instant, token: bool) {
        self.stamp(at);
        if token {
            self.tokens.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn activity(&self, run: Option<u64>) -> Activity {
        let last = self.epoch + Duration::from_nanos(self.last_ns.load(Ordering::Relaxed));
        Activity {
            run,
            since_progress: Instant::now().saturating_duration_since(last),
            tokens: self.tokens.load(Ordering::Relaxed),
            prompt_bytes: self.prompt_bytes.load(Ordering::Relaxed),
        }
    }
}
