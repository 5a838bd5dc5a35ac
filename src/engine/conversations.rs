//! The engine's conversations: the one the KV cache holds (`kv.rs`) and
//! those saved as prompt-cache files (`saved.rs`). A run with token ids is
//! planned against both, with the turn held: the resident conversation if
//! the prompt continues it, else the longest saved one it continues
//! (loaded), else a clean start. Every run saves its prompt when files are
//! kept, and every reuse is checked against the runtime afterwards.

use super::calls::{answered, lock};
use super::handle::Handle;
use super::job::CacheHints;
use super::kv::{self, KvCache, Made, Plan, Shared};
use super::outcome::{CacheUse, MissReason};
use super::prompt;
use super::prompt_cache::{saved_tokens, saving_request};
use super::saved::{Restore, Saved};
use super::saved_dir;
use super::shared_prefix::SharedPrefixes;
use crate::metrics::RuntimePerf;
use rkllm_sys::{Event, RunInput};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The conversations a model keeps warm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WarmConversations {
    /// Conversations whose state is kept (resident or saved, each once).
    pub warm: usize,
    /// Prompt tokens of the conversations the KV cache holds (0: none;
    /// with `batch` > 1, summed over the slots).
    pub resident_tokens: usize,
    /// Conversations saved as prompt-cache files, and their bytes (both tiers).
    pub saved: usize,
    pub saved_bytes: u64,
    /// Of those, the ones on the disk tier.
    pub on_disk: usize,
    pub on_disk_bytes: u64,
}

/// The conversation cache of a model run one sequence at a time (`batch`
/// = 1): what its KV cache holds, the conversations saved as files, and
/// the shared prefixes' files; each run is planned and settled here, with
/// the model's handle lent for the runtime calls.
pub(super) struct Conversations {
    kv: Mutex<KvCache>,
    /// `Some` with saved conversations and shared prefixes on. Declared
    /// before `saved`, so dropped first: its files go before `saved`
    /// removes the directory they share.
    prefixes: Option<Mutex<SharedPrefixes>>,
    /// `Some` when conversations are saved as files.
    saved: Option<Arc<Mutex<Saved>>>,
}

impl Conversations {
    pub fn new(kv: KvCache, saved: Option<Saved>, prefixes: Option<SharedPrefixes>) -> Self {
        Conversations {
            kv: Mutex::new(kv),
            prefixes: prefixes.map(Mutex::new),
            saved: saved.map(|s| Arc::new(Mutex::new(s))),
        }
    }

    /// Whether a long prefix that conversations share is kept as a file.
    pub fn shares_prefixes(&self) -> bool {
        self.prefixes.is_some()
    }

    /// How the job holding the turn uses the caches: `None` runs it
    /// stateless (the cache is off, or the job has no token ids, or
    /// clearing failed).
    pub async fn plan(
        &self,
        rt: &Handle,
        tokens: Option<&[i32]>,
        hints: &CacheHints,
        lora: Option<&str>,
        max_new: u32,
    ) -> Option<Plan> {
        let kv = &self.kv;
        let Some(ids) = tokens else {
            // A stateless run leaves the cache in a state we do not track.
            self.forget();
            return None;
        };
        let context = rt.limits.max_context_len as usize;
        let mut plan = lock(kv).plan(ids, hints.resent.as_ref(), lora, max_new, context as u32);
        plan.key = hints.conversation.clone();
        let images = ids.iter().any(|&id| prompt::is_image(id));
        if let Some(saved) = &self.saved {
            let mut continues = if plan.cached > 0 { lock(saved).resident() } else { None };
            if plan.cached == 0 {
                let fits = |held: usize, rest: usize| kv::continuation_fits(held + rest, ids.len(), max_new, context);
                // A prompt with images is restored by sending it whole, as its
                // text and embeddings (prompt.rs): a file spares it only
                // the ids that text gives, so one holding a reply that stood
                // for the client's view of it is not loaded.
                let found = if images && !lock(saved).keeps_images() {
                    None
                } else {
                    lock(saved).find(ids, lora, fits, images)
                };
                match found {
                    Some(restore) if !lock(saved).costs.worth_restoring(restore.held, restore.on_disk) => {
                        // Prefilled instead; its new state replaces its file.
                        plan.miss = MissReason::Costlier;
                        continues = Some(restore.entry);
                    }
                    Some(restore) if self.load_saved(rt, saved, &restore).await => {
                        continues = Some(restore.entry);
                        plan.input = [&restore.held_ids[..], &ids[restore.client..]].concat();
                        plan.restore = Some(restore);
                    }
                    _ => {}
                }
            }
            if plan.cached == 0 && plan.restore.is_none() && plan.miss != MissReason::Costlier && !images {
                self.plan_shared(rt, &mut plan, ids, hints.stable, lora, saved).await;
            }
            if let Some(key) = plan.key.as_deref().filter(|_| plan.cached == 0 && plan.restore.is_none()) {
                // The client names a conversation the cache holds, but the
                // prompt does not continue it: an earlier turn was edited.
                // Its new state replaces the old one's file.
                let named = lock(saved).keyed(key);
                if named.is_some() || lock(kv).last_key() == Some(key) {
                    plan.miss = MissReason::Edited;
                }
                continues = continues.or(named);
            }
            if plan.restore.is_none() && plan.shared.is_none() && lock(saved).loaded.is_some() {
                // A loaded file would spare a later prompt that happens to
                // start like it: every run's prefill must be the planned one.
                if !matches!(rt.model.release_prompt_cache().await, Ok(Ok(()))) {
                    lock(saved).switch_off("rkllm_release_prompt_cache failed".into());
                }
                lock(saved).loaded = None;
            }
            plan.save = if images && !lock(saved).keeps_images() {
                lock(saved).displaced();
                None
            } else {
                lock(saved).save(continues)
            };
        }
        if plan.clear {
            if let Some(saved) = &self.saved {
                lock(saved).displaced();
            }
            match answered(rt.model.clear_kv_cache(false)).await {
                Ok(()) => lock(kv).cleared(),
                Err(why) => {
                    tracing::warn!("rkllm_clear_kv_cache failed ({why}); this run is stateless");
                    self.forget();
                    return None;
                }
            }
        }
        lock(kv).filled_with(lora);
        Some(plan)
    }

    /// Loads a saved conversation's file; a failure switches the files off.
    async fn load_saved(&self, rt: &Handle, saved: &Mutex<Saved>, restore: &Restore) -> bool {
        match self.load_file(rt, saved, &restore.file, restore.held, restore.on_disk).await {
            Ok(()) => true,
            Err(why) => {
                crate::metrics::observer().metrics.conversation_cache_off();
                lock(saved).switch_off(format!("rkllm_load_prompt_cache failed: {why}"));
                false
            }
        }
    }

    /// Loads a prompt-cache file of `held` ids (unless it is the one
    /// loaded), timing the load for the cost measurements; `Err`: the
    /// runtime's words.
    async fn load_file(
        &self,
        rt: &Handle,
        saved: &Mutex<Saved>,
        file: &Path,
        held: usize,
        on_disk: bool,
    ) -> Result<(), String> {
        if lock(saved).loaded.as_deref() == Some(file) {
            return Ok(());
        }
        let path = file.to_str().ok_or("the path is not UTF-8")?;
        let started = std::time::Instant::now();
        lock(saved).loading(Some(file));
        let loaded = answered(rt.model.load_prompt_cache(path)).await;
        lock(saved).loading(None);
        loaded?;
        let mut saved = lock(saved);
        saved.costs.measured_load(started.elapsed().as_secs_f64() * 1000.0, held, on_disk);
        saved.loaded = Some(file.to_owned());
        Ok(())
    }

    /// After a cached run (turn still held): checks the cache's size against
    /// what was sent and generated, and a restore's reuse against the
    /// runtime's prefill count; keeps the saved file. `failed`: the runtime
    /// ended the run with an error. Returns the tokens the run reused and
    /// how it found them.
    pub async fn settle(
        &self,
        rt: &Handle,
        job: &str,
        plan: &Plan,
        generated: &[i32],
        perf: Option<&RuntimePerf>,
        failed: bool,
    ) -> (u32, CacheUse) {
        let kv = &self.kv;
        let reported = match rt.model.kv_cache_size().await {
            Ok(Ok(sizes)) => sizes.first().and_then(|&s| usize::try_from(s).ok()),
            _ => None,
        };
        let metrics = &crate::metrics::observer().metrics;
        if let Some(size) = reported {
            rt.kv_size_reported(size as i64);
        }
        let (reused, found) = match (&plan.restore, &plan.shared) {
            (Some(restore), _) => self.check_restore(plan, restore, perf),
            (None, Some(shared)) => self.check_shared(plan, shared, perf),
            (None, None) => plan.found(),
        };
        let settled = lock(kv).after_run(job, plan, generated, reported);
        if let Err(d) = &settled {
            tracing::warn!(
                expected = d.expected,
                reported = ?d.reported,
                "the KV cache does not hold what was sent and generated; the next run starts clean"
            );
            metrics.kv_cache_mismatch();
        }
        if let (Some(saved), Some(perf)) = (&self.saved, perf) {
            let file = if plan.save.is_some() { plan.cached + plan.input.len() } else { 0 };
            lock(saved).costs.measured_prefill(perf.prefill_time_ms, perf.prefill_tokens, file);
        }
        if let (Some(saved), Some(save)) = (&self.saved, &plan.save) {
            let kept = {
                let kv = lock(kv);
                let lora = kv.lora().map(str::to_owned);
                kv.last_prompt().filter(|_| settled.is_ok()).map(|held| (held.to_vec(), lora))
            };
            let spills = {
                let mut saved = lock(saved);
                let was = (saved.is_off(), saved.keeps_images());
                match kept {
                    Some((held, lora)) => saved.saved(save, &held, &plan.prompt, lora.as_deref(), plan.key.as_deref()),
                    None => {
                        saved.abandoned(save);
                        // Whether the runtime saves a multimodal run at all is
                        // open: one that failed, or left a cache of another
                        // size, when asked to save is not asked again.
                        let images = plan.prompt.iter().any(|&id| prompt::is_image(id));
                        if images && saved.keeps_images() && (failed || settled.is_err()) {
                            saved.switch_off_images(format!(
                                "a run with images asked to save its prompt {}",
                                if failed { "ended with a runtime error" } else { "left a KV cache of another size" }
                            ));
                        }
                    }
                }
                if (saved.is_off(), saved.keeps_images()) != was {
                    metrics.conversation_cache_off();
                }
                saved.take_spills()
            };
            for spill in spills {
                // Copying to a slow disk takes long: not on the async threads.
                let saved = saved.clone();
                tokio::task::spawn_blocking(move || {
                    let copied = std::fs::copy(&spill.from, &spill.to).map(drop).map_err(|e| e.to_string());
                    lock(&saved).spilled(&spill, copied);
                });
            }
        }
        (u32::try_from(reused).unwrap_or(u32::MAX), found)
    }

    /// What a restoring run really reused, by the runtime's prefill count:
    /// anything but the file's ids switches the files off (those with
    /// images only, for a prompt with images).
    fn check_restore(&self, plan: &Plan, restore: &Restore, perf: Option<&RuntimePerf>) -> (usize, CacheUse) {
        let Some(perf) = perf else {
            return (0, CacheUse::Miss(MissReason::Unknown));
        };
        let prefilled = usize::try_from(perf.prefill_tokens).unwrap_or(0);
        let skipped = plan.input.len().saturating_sub(prefilled);
        if skipped == restore.held {
            return (skipped, CacheUse::Restored);
        }
        tracing::warn!(
            expected = restore.held,
            skipped,
            prefilled,
            "a restored conversation did not spare its prefill as its file should have"
        );
        if let Some(saved) = &self.saved {
            crate::metrics::observer().metrics.conversation_cache_off();
            let why = format!("a restore spared {skipped} prefilled tokens where its file holds {}", restore.held);
            // A prompt with images was sent whole, as text and embeddings:
            // that the runtime matches those against a file is what failed.
            if plan.prompt.iter().any(|&id| prompt::is_image(id)) {
                lock(saved).switch_off_images(why);
            } else {
                lock(saved).switch_off(why);
            }
        }
        (skipped, CacheUse::Miss(MissReason::Other))
    }

    /// How the client was shown the reply of `job`, `shown` tokens of it
    /// (see [`KvCache::seen`]).
    pub fn seen(&self, job: &str, view: String, reasoned: bool, shown: u32) {
        lock(&self.kv).seen(job, view, reasoned, shown);
    }

    /// What the KV cache holds is no longer known (a run ended without its
    /// events being read, or a stateless run).
    pub fn forget(&self) {
        lock(&self.kv).forget();
        if let Some(saved) = &self.saved {
            lock(saved).forget();
        }
    }

    /// The conversations kept warm now.
    pub fn warm(&self) -> WarmConversations {
        // Between runs only: a run holding the lock is brief (planning, settling).
        let resident_tokens = lock(&self.kv).last_prompt().map_or(0, <[i32]>::len);
        let ((saved, saved_bytes), (on_disk, on_disk_bytes), resident_saved) =
            self.saved.as_ref().map_or(((0, 0), (0, 0), false), |s| {
                let s = lock(s);
                (s.held(), s.on_disk(), s.resident().is_some())
            });
        // The resident conversation's latest prompt is one of the files, when saved.
        let warm = saved + usize::from(resident_tokens > 0 && !resident_saved);
        WarmConversations { warm, resident_tokens, saved, saved_bytes, on_disk, on_disk_bytes }
    }

    /// Whether a job of these ids, run with `lora`, extends the conversation
    /// the KV cache holds.
    pub fn is_warm(&self, ids: &[i32], lora: Option<&str>) -> bool {
        lock(&self.kv).plan(ids, None, lora, 0, u32::MAX).cached > 0
    }

    /// Before a run with images the conversation cache does not plan (its
    /// prompt has no ids): whether a `keep_history = 0` run starts from a
    /// KV cache a kept conversation filled is not stated by the manual, so
    /// the KV cache is cleared first.
    pub async fn clear_before_stateless_images(&self, rt: &Handle) -> Result<(), String> {
        self.forget();
        answered(rt.model.clear_kv_cache(false))
            .await
            .map_err(|why| format!("rkllm_clear_kv_cache before a run with images failed: {why}"))
    }

    /// A new conversation's run (nothing resident or saved continues it),
    /// turn held: starts from the longest shared prefix's file it begins
    /// with, or makes the file of its `stable` start first. Leaves `plan` a
    /// plain miss when neither applies.
    async fn plan_shared(
        &self,
        rt: &Handle,
        plan: &mut Plan,
        ids: &[i32],
        stable: Option<usize>,
        lora: Option<&str>,
        saved: &Mutex<Saved>,
    ) {
        let Some(prefixes) = &self.prefixes else { return };
        let found = lock(prefixes).find(ids, lora);
        // Restored (or made) only while loading measures cheaper than prefilling.
        let worth = |held: usize| lock(saved).costs.worth_restoring(held, false);
        let (file, held, made) = match found {
            Some((file, held)) if worth(held) => (file, held, None),
            Some(_) => return,
            None => {
                let made = stable.filter(|&n| lock(prefixes).worth_making(n, ids.len()) && worth(n));
                let Some(shared) = made else { return };
                // The prefix's run leaves the KV cache to be cleared before the job's own.
                plan.clear = true;
                match self.make_prefix(rt, saved, prefixes, &ids[..shared], lora).await {
                    Some((file, made)) => (file, shared, Some(made)),
                    None => return,
                }
            }
        };
        if let Err(why) = self.load_file(rt, saved, &file, held, false).await {
            lock(prefixes).switch_off(format!("rkllm_load_prompt_cache failed: {why}"));
            return;
        }
        lock(prefixes).used(&file);
        plan.shared = Some(Box::new(Shared { file, held, made }));
    }

    /// Runs `prefix` alone, stateless, saving its KV to a new file; `None`
    /// when that did not work (a WARN says why).
    async fn make_prefix(
        &self,
        rt: &Handle,
        saved: &Mutex<Saved>,
        prefixes: &Mutex<SharedPrefixes>,
        prefix: &[i32],
        lora: Option<&str>,
    ) -> Option<(PathBuf, Made)> {
        // The file must hold the prefix alone: no loaded file matched against
        // it, nothing before it in the KV cache.
        if lock(saved).loaded.take().is_some() && answered(rt.model.release_prompt_cache()).await.is_err() {
            lock(saved).switch_off("rkllm_release_prompt_cache failed".into());
            return None;
        }
        // Unknown until the job's run clears it (`plan.clear`), also if this
        // job is dropped meanwhile.
        self.forget();
        if let Err(why) = answered(rt.model.clear_kv_cache(false)).await {
            tracing::warn!("rkllm_clear_kv_cache failed ({why}); no shared prefix made");
            return None;
        }
        let file = lock(prefixes).next_file();
        let input = RunInput::Tokens(prefix.to_vec());
        let (request, aborts_at_first) = saving_request(rt.abi, input, lora.map(str::to_owned), &file);
        let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let control = rt.model.submit(request, tx).ok()?;
        let mut started = None;
        let finish = loop {
            match events.recv().await? {
                Event::Started { at, .. } => started = Some(at),
                Event::Token(_) if aborts_at_first => control.abort(),
                Event::Finished(finish) => break finish,
                Event::Token(_) => {}
            }
        };
        let spared_nothing = match saved_tokens(&finish, &file) {
            Ok(n) if n as usize == prefix.len() => None,
            Ok(n) => Some(format!("the run of a {}-token prefix prefilled {n} tokens", prefix.len())),
            Err(why) => Some(why),
        };
        if let Some(why) = spared_nothing {
            saved_dir::remove(&file, "a shared prefix's file");
            lock(prefixes).switch_off(why);
            return None;
        }
        if !lock(prefixes).made(&file, prefix, lora) {
            return None;
        }
        crate::metrics::observer().metrics.shared_prefix_made();
        tracing::info!(tokens = prefix.len(), file = %file.display(), "a prefix other conversations began with is kept as a file");
        let perf = finish.perf.map(RuntimePerf::from);
        let made = Made {
            started: started.unwrap_or(finish.at),
            prefill_time_ms: perf.map_or(0.0, |p| p.prefill_time_ms),
            prefill_tokens: perf.map_or(0, |p| p.prefill_tokens),
        };
        Some((file, made))
    }

    /// What a run from a shared prefix really reused, by the runtime's
    /// prefill count: anything but the prefix switches the files off. A
    /// run whose turn made the file reused nothing (its turn prefilled it).
    fn check_shared(&self, plan: &Plan, shared: &Shared, perf: Option<&RuntimePerf>) -> (usize, CacheUse) {
        let Some(perf) = perf else {
            return (0, CacheUse::Miss(MissReason::Unknown));
        };
        let prefilled = usize::try_from(perf.prefill_tokens).unwrap_or(0);
        let skipped = plan.input.len().saturating_sub(prefilled);
        if skipped == shared.held {
            return match shared.made {
                Some(_) => (0, CacheUse::Miss(plan.miss)),
                None => (skipped, CacheUse::Prefix),
            };
        }
        tracing::warn!(
            expected = shared.held,
            skipped,
            prefilled,
            "a run from a shared prefix's file did not spare its prefill as the file should have"
        );
        if let Some(prefixes) = &self.prefixes {
            lock(prefixes).switch_off(format!(
                "a run spared {skipped} prefilled tokens where its shared prefix's file holds {}",
                shared.held
            ));
        }
        (if shared.made.is_some() { 0 } else { skipped }, CacheUse::Miss(MissReason::Other))
    }
}
