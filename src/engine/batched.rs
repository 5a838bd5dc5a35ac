//! The conversation cache of a model run in batches (`batch` = N > 1): a
//! conversation per slot (`slots.rs`) and, when the probe at load found
//! them working, the batched runs' prompt-cache files (`batch_files.rs`).
//! Each batched run is laid out and settled here, with the model's handle
//! lent for the runtime calls.

use super::batch_files::{BatchFiles, GroupFiles};
use super::calls::{answered, lock};
use super::conversations::WarmConversations;
use super::handle::Handle;
use super::saved_dir;
use super::slots::{Kept, Layout, Member, Restores, SlotJob, Slots};
use rkllm_sys::Finish;
use std::sync::Mutex;
use tokio::time::Instant;

pub(super) struct Batched {
    slots: Mutex<Slots>,
    /// `Some` when a batched run's file restores its slots.
    files: Option<Mutex<GroupFiles>>,
}

impl Batched {
    pub fn new(slots: Slots, files: Option<GroupFiles>) -> Self {
        Batched { slots: Mutex::new(slots), files: files.map(Mutex::new) }
    }

    /// How many of these slots hold a conversation (a filler put there costs it).
    pub fn holding(&self, slots: impl Iterator<Item = usize>) -> usize {
        let held = lock(&self.slots);
        slots.filter(|&s| held.holds(s)).count()
    }

    /// Whether newcomers will likely clear every slot after a run of `layout`.
    pub fn likely_cleared(&self, layout: &Layout) -> bool {
        lock(&self.slots).likely_cleared(layout)
    }

    /// The next file a batched run saves its slots to, while the files work.
    pub fn next_file(&self) -> Option<std::path::PathBuf> {
        self.files.as_ref().and_then(|files| lock(files).next_file())
    }

    /// How the client was shown the reply of `job`, `shown` tokens of it.
    pub fn seen(&self, job: &str, view: String, reasoned: bool, shown: u32) {
        lock(&self.slots).seen(job, view, reasoned, shown);
    }

    /// What the slots hold is no longer known.
    pub fn forget(&self) {
        lock(&self.slots).forget();
    }

    /// The conversations the slots hold now.
    pub fn warm(&self) -> WarmConversations {
        let (warm, resident_tokens) = lock(&self.slots).held();
        WarmConversations { warm, resident_tokens, ..WarmConversations::default() }
    }

    /// Whether a job of these ids, run with `lora`, extends a slot's conversation.
    pub fn is_warm(&self, ids: &[i32], lora: Option<&str>) -> bool {
        lock(&self.slots).is_warm(ids, lora)
    }

    /// A short run did not keep a slot without input as it was: fillers
    /// from now on, also in the slots' layouts.
    pub fn short_broken(&self, rt: &Handle, why: &str) {
        if rt.short_batch_broken(why) {
            lock(&self.slots).set_short(false);
        }
    }

    /// Where each job of a batch runs, with every slot cleared first when
    /// the layout needs it (the turn is held); `None`: the run keeps no
    /// history (the cache is off, or clearing failed).
    pub async fn lay_out(&self, rt: &Handle, members: &[Member<'_>]) -> Option<Layout> {
        let slots = Some(&self.slots).filter(|s| !lock(s).is_off())?;
        let context = rt.limits.max_context_len;
        let files = self.files.as_ref();
        let layout = {
            let files = files.map(lock);
            lock(slots).layout(members, context, files.as_deref().map(|f| f as &dyn Restores))
        };
        if layout.clear {
            match answered(rt.model.clear_kv_cache(false)).await {
                Ok(()) => lock(slots).cleared(),
                Err(why) => {
                    tracing::warn!("rkllm_clear_kv_cache failed ({why}); this batched run keeps no history");
                    lock(slots).forget();
                    return None;
                }
            }
        }
        let Some(files) = files else { return Some(layout) };
        let loaded = lock(files).loaded;
        match &layout.restore {
            // Loaded again even when it is the loaded one: whether a clear
            // keeps a loaded file is open in the manual.
            Some(file) => {
                let path = file.to_string_lossy();
                match answered(rt.model.load_prompt_cache(&path)).await {
                    Ok(()) => {
                        let mut files = lock(files);
                        files.loaded = true;
                        files.used(file);
                        Some(layout)
                    }
                    Err(why) => {
                        lock(files)
                            .switch_off(format!("rkllm_load_prompt_cache of a batched run's file failed: {why}"));
                        // Every slot was cleared: the jobs start clean.
                        Some(lock(slots).layout(members, context, None))
                    }
                }
            }
            None if loaded => {
                // A loaded file would spare a clean slot that starts like
                // it: every run's prefill must be the planned one.
                if let Err(why) = answered(rt.model.release_prompt_cache()).await {
                    lock(files).switch_off(format!("rkllm_release_prompt_cache failed: {why}"));
                }
                lock(files).loaded = false;
                Some(layout)
            }
            None => Some(layout),
        }
    }

    /// The clients of these slots left them at these times (after their run).
    pub fn left(&self, left: &[(usize, Instant)]) {
        lock(&self.slots).left(left);
    }

    /// After a batched run that kept history (turn still held): each slot's
    /// size against what it was sent and generated, and the run's prefill
    /// against what was sent.
    pub async fn settle(&self, rt: &Handle, kept: Kept, finish: &Finish, slot_tokens: &[Vec<i32>]) {
        let slots = &self.slots;
        let metrics = &crate::metrics::observer().metrics;
        if !finish.started || finish.is_error() {
            if let Some(save) = &kept.save {
                saved_dir::remove(save, "a batched run's file");
            }
            // Not started: every client left before the run began, no slot changed.
            if finish.started {
                lock(slots).forget();
            }
            return;
        }
        let sizes = match rt.model.kv_cache_size().await {
            Ok(Ok(sizes)) => Some(sizes),
            _ => None,
        };
        if let Some(sizes) = &sizes {
            rt.kv_size_reported(sizes.iter().map(|&s| i64::from(s)).sum());
        }
        // A slot without input must hold what it held (unknown sizes say nothing).
        let moved: Vec<usize> = if sizes.is_none() {
            Vec::new()
        } else {
            let slots = lock(slots);
            let now = |s: usize| sizes.as_deref().and_then(|r| r.get(s)).and_then(|&n| usize::try_from(n).ok());
            let changed = |s: usize| slots.size(s).is_some_and(|before| now(s) != Some(before));
            (0..kept.absent.len()).filter(|&s| kept.absent[s] && changed(s)).collect()
        };
        if !moved.is_empty() {
            self.short_broken(rt, &format!("batch slots {moved:?}, given no input, changed size"));
            let mut slots = lock(slots);
            moved.iter().for_each(|&s| slots.forget_slot(s));
        }
        let disagreements =
            lock(slots).settle(&kept.used, &kept.absent, kept.lora.as_deref(), slot_tokens, sizes.as_deref());
        for (slot, d) in disagreements {
            tracing::warn!(
                slot,
                expected = d.expected,
                reported = ?d.reported,
                "a batch slot's KV cache does not hold what was sent and generated; it is cleared before its next use"
            );
            metrics.kv_cache_mismatch();
        }
        let prefilled = finish.perf.and_then(|p| usize::try_from(p.prefill_tokens).ok());
        self.settle_files(&kept, kept.sent.zip(prefilled), finish.aborted);
        if let (Some(sent), Some(prefilled)) = (kept.sent, prefilled) {
            // Less is a model's prompt-cache file sparing a fresh slot's prefix.
            if prefilled > sent {
                metrics.conversation_cache_off();
                lock(slots).switch_off(format!(
                    "a batched run prefilled {prefilled} tokens where {sent} were sent: the runtime did not keep its \
                     slots' history"
                ));
                // What the slots hold would be read by the next runs.
                if let Err(why) = answered(rt.model.clear_kv_cache(false)).await {
                    tracing::warn!("rkllm_clear_kv_cache failed after the batch slots were switched off ({why})");
                }
            }
        }
    }

    /// What the probe at load found, or `SwitchedOff` once a run's file or
    /// restore did not deliver: what `/health` reports now.
    pub fn files_now(&self, found: Option<BatchFiles>) -> Option<BatchFiles> {
        match (found, &self.files) {
            (Some(BatchFiles::Accepted), Some(files)) if lock(files).is_off() => Some(BatchFiles::SwitchedOff),
            (found, _) => found,
        }
    }

    /// After a batched run that kept history, its slots settled: a
    /// restore's prefill against the runtime's count (`counts`: sent and
    /// prefilled), then the file the run saved, kept with what each slot's
    /// conversation holds now. A run that was `aborted` (its clients left)
    /// may have stopped inside its prefill: its count need not be the whole
    /// prefill's, and the runtime may not have saved yet (the manual leaves
    /// open when a run saves), so neither says the files do not work — the
    /// count goes unchecked and a missing file is no file, not a failure.
    fn settle_files(&self, kept: &Kept, counts: Option<(usize, usize)>, aborted: bool) {
        let (Some(files), slots) = (&self.files, &self.slots) else { return };
        let counts = counts.filter(|_| !aborted);
        let restored = kept.used.iter().flatten().filter_map(|job| job.plan.restore.as_ref());
        let spared: usize = restored.map(|r| r.held).sum();
        match counts {
            Some((sent, prefilled)) if spared > 0 && prefilled + spared != sent => {
                lock(files).switch_off(format!(
                    "a batched run restoring {spared} ids from a file prefilled {prefilled} of the {sent} ids sent \
                     (expected {})",
                    sent.saturating_sub(spared)
                ));
            }
            None if spared > 0 && !aborted => {
                tracing::warn!("a batched run restored from a file but its prefill count is not known: unchecked");
            }
            _ => {}
        }
        let Some(save) = kept.save.clone() else { return };
        if aborted && !save.exists() {
            tracing::debug!(file = %save.display(), "an aborted batched run saved no prompt-cache file");
            return;
        }
        let entries = {
            let slots = lock(slots);
            let entry = |(s, used): (usize, &Option<SlotJob>)| {
                Some((slots.held_prompt(s)?, used.as_ref()?.plan.prompt.clone()))
            };
            kept.used.iter().enumerate().map(entry).collect()
        };
        lock(files).saved(save, kept.lora.as_deref(), entries);
    }
}
