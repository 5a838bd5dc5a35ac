//! The conversation cache: what the runtime's KV cache holds, known exactly.
//!
//! With a tokenizer the engine sends prompts as token ids (`RKLLM_INPUT_TOKEN`)
//! with `keep_history = 1`, so the cache holds exactly the ids sent plus the
//! ids the callback reported as generated. A new prompt that starts with that
//! sequence prefills only its rest; anything else clears the cache first.
//! After every run the sequence is checked against `rkllm_get_kv_cache_size`:
//! a disagreement (e.g. a token the runtime keeps but never reported, such as
//! an end-of-sequence token — the manual leaves that open) makes the cache
//! unknown, and the next run starts clean. Never a wrong answer to save time.

use super::Engine;
use rkllm_sys::RunInput;
use std::sync::{Mutex, MutexGuard};

/// The engine's record of the KV cache (only the job holding the turn reads
/// or writes it).
#[derive(Debug, Default)]
pub(super) struct KvCache {
    /// The exact ids in the cache; `None` = not known (start clean).
    tokens: Option<Vec<i32>>,
    /// The LoRA adapter the cached positions were computed with (`None`:
    /// the base model). An adapter changes the keys and values, so a run
    /// with another one (or none) cannot reuse them.
    lora: Option<String>,
}

/// How one run uses the cache.
#[derive(Debug, PartialEq)]
pub(super) struct Plan {
    /// Clear the cache before the run.
    pub clear: bool,
    /// Tokens already in the cache that the prompt reuses.
    pub cached: usize,
    /// The ids this run sends (the prompt's ids after `cached`).
    pub input: Vec<i32>,
}

/// Why a finished run's cache is not what the engine expected.
#[derive(Debug, PartialEq)]
pub(super) struct Disagreement {
    pub expected: usize,
    pub reported: Option<usize>,
}

impl KvCache {
    /// How a prompt of `ids`, run with the adapter `lora`, that may generate
    /// up to `max_new` tokens runs in a context of `context` positions.
    pub fn plan(&self, ids: &[i32], lora: Option<&str>, max_new: u32, context: u32) -> Plan {
        let reusable = self.tokens.as_deref().filter(|cached| {
            // At least one new token: a run needs input.
            self.lora.as_deref() == lora
                && cached.len() < ids.len()
                && ids.starts_with(cached)
                && ids.len() + max_new as usize <= context as usize
        });
        match reusable {
            Some(cached) => Plan { clear: false, cached: cached.len(), input: ids[cached.len()..].to_vec() },
            None => Plan { clear: self.tokens.as_ref().is_none_or(|t| !t.is_empty()), cached: 0, input: ids.to_vec() },
        }
    }

    /// The cache was cleared (`rkllm_clear_kv_cache` succeeded).
    pub fn cleared(&mut self) {
        self.tokens = Some(Vec::new());
    }

    /// The planned run is about to fill the (empty or reused) cache with `lora`.
    fn filled_with(&mut self, lora: Option<&str>) {
        self.lora = lora.map(str::to_owned);
    }

    /// Nothing is known about the cache any more (a run was abandoned, a
    /// clear failed, a check disagreed).
    pub fn forget(&mut self) {
        self.tokens = None;
    }

    /// A run of `plan` ended having generated `generated` ids; `reported` is
    /// the runtime's `rkllm_get_kv_cache_size` after it. Keeps the sequence
    /// when the sizes agree, otherwise forgets it.
    pub fn after_run(
        &mut self,
        plan: &Plan,
        generated: &[i32],
        reported: Option<usize>,
    ) -> Result<usize, Disagreement> {
        let Some(mut tokens) = self.tokens.take().filter(|t| t.len() == plan.cached) else {
            return Err(Disagreement { expected: plan.cached + plan.input.len() + generated.len(), reported });
        };
        tokens.extend_from_slice(&plan.input);
        tokens.extend_from_slice(generated);
        if reported != Some(tokens.len()) {
            return Err(Disagreement { expected: tokens.len(), reported });
        }
        let size = tokens.len();
        self.tokens = Some(tokens);
        Ok(size)
    }
}

impl Plan {
    pub fn input(&self) -> RunInput {
        RunInput::Tokens(self.input.clone())
    }
}

fn lock(kv: &Mutex<KvCache>) -> MutexGuard<'_, KvCache> {
    kv.lock().unwrap_or_else(|e| e.into_inner())
}

impl Engine {
    /// How the job holding the turn uses the cache: `None` runs it stateless
    /// (the cache is off, or the job has no token ids, or clearing failed).
    pub(super) async fn plan_kv(&self, ids: Option<&[i32]>, lora: Option<&str>, max_new: u32) -> Option<Plan> {
        let kv = self.kv.as_ref()?;
        let Some(ids) = ids else {
            // A stateless run leaves the cache in a state we do not track.
            lock(kv).forget();
            return None;
        };
        let plan = lock(kv).plan(ids, lora, max_new, self.limits.max_context_len);
        if plan.clear {
            match self.model.clear_kv_cache(false).await {
                Ok(Ok(())) => lock(kv).cleared(),
                outcome => {
                    let why = match outcome {
                        Ok(Err(e)) => e.to_string(),
                        _ => "the runtime thread is gone".into(),
                    };
                    tracing::warn!("rkllm_clear_kv_cache failed ({why}); this run is stateless");
                    lock(kv).forget();
                    return None;
                }
            }
        }
        lock(kv).filled_with(lora);
        Some(plan)
    }

    /// Whether a job of these ids, run with `lora`, extends the conversation
    /// the KV cache holds: the one question the scheduler asks of the cache
    /// (`schedule.rs` lets such a job go first, its prefill mostly done).
    pub(super) fn is_warm(&self, ids: Option<&[i32]>, lora: Option<&str>) -> bool {
        let (Some(kv), Some(ids)) = (self.kv.as_ref(), ids) else { return false };
        lock(kv).plan(ids, lora, 0, u32::MAX).cached > 0
    }

    /// After a cached run (turn still held): check the cache's size against
    /// what was sent and generated. Returns the tokens the run reused.
    pub(super) async fn settle_kv(&self, plan: &Plan, generated: &[i32]) -> u32 {
        let Some(kv) = self.kv.as_ref() else { return 0 };
        let reported = match self.model.kv_cache_size().await {
            Ok(Ok(sizes)) => sizes.first().and_then(|&s| usize::try_from(s).ok()),
            _ => None,
        };
        if let Some(size) = reported {
            self.kv_tokens.store(size as i64, std::sync::atomic::Ordering::Relaxed);
        }
        match lock(kv).after_run(plan, generated, reported) {
            Ok(_) => {}
            Err(d) => {
                tracing::warn!(
                    expected = d.expected,
                    reported = ?d.reported,
                    "the KV cache does not hold what was sent and generated; the next run starts clean"
                );
                crate::metrics::observer().metrics.kv_cache_mismatch();
            }
        }
        u32::try_from(plan.cached).unwrap_or(u32::MAX)
    }

    /// A run ended without its events being read (its client went away).
    pub(super) fn forget_kv(&self) {
        if let Some(kv) = &self.kv {
            lock(kv).forget();
        }
    }

    /// Asks the runtime thread for the KV cache's size (it answers between
    /// runs) and keeps it for `/metrics` when it comes; nothing waits for it.
    pub(super) fn sample_kv_cache(&self) {
        let size = self.model.kv_cache_size();
        let kv_tokens = self.kv_tokens.clone();
        let publish = async move {
            if let Ok(Ok(sizes)) = size.await {
                kv_tokens.store(sizes.iter().map(|&s| i64::from(s)).sum(), std::sync::atomic::Ordering::Relaxed);
            }
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(publish);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follow_up_reuses_the_exact_prefix_and_anything_else_starts_clean() {
        let mut kv = KvCache::default();
        let first = kv.plan(&[1, 2, 3], None, 10, 100);
        assert_eq!(first, Plan { clear: true, cached: 0, input: vec![1, 2, 3] }, "unknown at start: clear");
        kv.cleared();
        assert_eq!(kv.after_run(&first, &[7, 8], Some(5)), Ok(5));

        let follow = kv.plan(&[1, 2, 3, 7, 8, 9], None, 10, 100);
        assert_eq!(follow, Plan { clear: false, cached: 5, input: vec![9] });
        assert_eq!(kv.after_run(&follow, &[4], Some(7)), Ok(7));

        // An edited earlier turn: no prefix, clear and send everything.
        let edited = kv.plan(&[1, 2, 6, 7, 8, 9, 4, 5], None, 10, 100);
        assert_eq!(edited, Plan { clear: true, cached: 0, input: vec![1, 2, 6, 7, 8, 9, 4, 5] });
        // The same prompt again has no new token: start clean.
        assert!(kv.plan(&[1, 2, 3, 7, 8, 9, 4], None, 10, 100).clear);
        // Cached + new + max_tokens over the context: start clean.
        assert!(kv.plan(&[1, 2, 3, 7, 8, 9, 4, 5], None, 93, 100).clear);
        assert!(!kv.plan(&[1, 2, 3, 7, 8, 9, 4, 5], None, 92, 100).clear);
    }

    #[test]
    fn a_size_that_disagrees_forgets_the_cache() {
        let mut kv = KvCache::default();
        kv.cleared();
        let plan = kv.plan(&[1, 2], None, 10, 100);
        assert!(!plan.clear, "an empty cache needs no clearing");
        // One more position than sent + generated (e.g. an unreported EOS).
        assert_eq!(kv.after_run(&plan, &[3], Some(4)), Err(Disagreement { expected: 3, reported: Some(4) }));
        assert!(kv.plan(&[1, 2, 3, 4], None, 10, 100).clear, "unknown: start clean");
        kv.forget();
        let plan = kv.plan(&[1], None, 10, 100);
        assert!(plan.clear);
    }

    #[test]
    fn a_run_with_another_adapter_starts_clean() {
        let mut kv = KvCache::default();
        kv.cleared();
        let base = kv.plan(&[1, 2], None, 10, 100);
        kv.filled_with(None);
        assert_eq!(kv.after_run(&base, &[3], Some(3)), Ok(3));
        let adapter = kv.plan(&[1, 2, 3, 4], Some("style"), 10, 100);
        assert_eq!(adapter, Plan { clear: true, cached: 0, input: vec![1, 2, 3, 4] }, "base-model positions");
        kv.cleared();
        kv.filled_with(Some("style"));
        assert_eq!(kv.after_run(&adapter, &[5], Some(5)), Ok(5));
        assert!(!kv.plan(&[1, 2, 3, 4, 5, 6], Some("style"), 10, 100).clear, "the same adapter reuses");
        assert!(kv.plan(&[1, 2, 3, 4, 5, 6], Some("terse"), 10, 100).clear, "another adapter does not");
        assert!(kv.plan(&[1, 2, 3, 4, 5, 6], None, 10, 100).clear, "nor the base model");
    }
}
