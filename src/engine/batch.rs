//! Batched decoding (`batch` = N > 1): a group of jobs the scheduler
//! (`schedule.rs`) put together goes to the NPU in one run, one slot each,
//! and every slot streams to its own generation.
//!
//! The runtime takes sampling, the adapter, `max_new_tokens` and
//! `keep_history` per run, so a group shares sampling and adapter; the run
//! gets the group's largest token limit (each generation ends its own reply
//! at its own limit), and keeps history when the conversation cache is on
//! (`slots.rs` places each job in its slot). Slots without a job get no
//! input where the runtime takes that (a short batch, probed at load:
//! `short_batch.rs`), else a one-token filler input, because the runtime
//! reads exactly N inputs (`rkllm-sys/src/batch.rs`). A filler's reply is never read,
//! and the run is aborted as soon as the last real reply ends, so fillers
//! cost only while a real reply runs beside them (docs/performance.md).
//!
//! A slot is left by its generation (client gone, stop sequence, limit,
//! time-out): its tokens are dropped from then on, and the run is aborted
//! only once every slot has been left — `rkllm_abort` ends the whole run.

use super::job::CacheHints;
use super::kv::Plan;
use super::plan::RunPlan;
use super::queue::{Place, Turn};
use super::slots::Kept;
use rkllm_sys::{BatchEnd, Event, RunControl};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// What the slots of one batched run share.
#[derive(Default)]
pub(super) struct Shared {
    /// Slots still wanted.
    pub wanted: AtomicUsize,
    /// Told when none is (the batch was aborted).
    pub aborted: Notify,
    /// Which slot was left when: its reply's end, after which its client
    /// may send again (the scheduler's gathering counts on it).
    pub left_at: Mutex<Vec<(usize, Instant)>>,
}

/// Aborting "my run": the run itself, or, in a batch, this slot only.
#[derive(Clone)]
pub(super) struct SlotControl {
    run: RunControl,
    /// `Some` for a batch slot.
    batch: Option<Arc<Shared>>,
    /// The batch slot (0 for a single run).
    index: usize,
    left: Arc<AtomicBool>,
}

impl SlotControl {
    pub fn single(run: RunControl) -> Self {
        SlotControl { run, batch: None, index: 0, left: Arc::default() }
    }

    /// Slot `index` of the batched run `run` whose slots share `batch`.
    pub fn in_batch(run: RunControl, batch: Arc<Shared>, index: usize) -> Self {
        SlotControl { run, batch: Some(batch), index, left: Arc::default() }
    }

    pub fn is_batched(&self) -> bool {
        self.batch.is_some()
    }

    /// Ends this job's part of the run: a single run is aborted; a batch
    /// slot is left, and the batch aborted when no slot is wanted any more.
    pub fn abort(&self) {
        match &self.batch {
            None => self.run.abort(),
            Some(shared) => {
                if self.left.swap(true, Ordering::SeqCst) {
                    return;
                }
                shared.left_at.lock().unwrap_or_else(|e| e.into_inner()).push((self.index, Instant::now()));
                if shared.wanted.fetch_sub(1, Ordering::SeqCst) == 1 {
                    self.run.abort();
                    shared.aborted.notify_one();
                }
            }
        }
    }
}

/// A slot of a started batch, handed to its generation.
pub(super) struct Slot {
    pub control: SlotControl,
    pub events: UnboundedReceiver<Event>,
    /// Jobs in the batch (fillers not counted).
    pub jobs: u32,
    /// How the job uses its slot's conversation (`None`: the cache is off).
    pub plan: Option<Plan>,
}

/// A job the scheduler put in a batch.
pub(super) struct BatchJob {
    pub id: String,
    pub plan: Arc<RunPlan>,
    /// What the conversation cache matches besides the prompt's ids.
    pub hints: CacheHints,
    pub place: Place,
}

/// A batched run under way: its turn is held until the runtime returned.
pub(super) struct BatchRun {
    pub done: oneshot::Receiver<BatchEnd>,
    pub shared: Arc<Shared>,
    pub turn: Turn,
    pub jobs: usize,
    pub size: usize,
    /// What each slot was given, when the slots keep their conversations.
    pub kept: Option<Kept>,
    /// Some slot was given no input (a short batch).
    pub short: bool,
    /// Per job, in the group's order: when the reply ended whose
    /// conversation it continues (its client came back; `schedule.rs`
    /// measures how soon).
    pub homes: Vec<Option<Instant>>,
}
