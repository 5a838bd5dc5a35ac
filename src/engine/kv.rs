//! The conversation cache: what the runtime's KV cache holds, known exactly.
//!
//! With a tokenizer the engine sends prompts as token ids (`RKLLM_INPUT_TOKEN`)
//! with `keep_history = 1`, so the cache holds exactly the ids sent plus the
//! ids the callback reported as generated. A new prompt that starts with that
//! sequence prefills only its rest; anything else clears the cache first.
//!
//! A client does not resend the ids the model generated but the reply it was
//! shown, which the template renders back: a reply cut inside a character
//! comes back with U+FFFD, a thinking model's reasoning is dropped by its
//! template, a client trims trailing whitespace. So the last run's reply is
//! also matched by what the client saw: the api names the reply's *view*
//! after it ended ([`KvCache::seen`]) and, in a new prompt, where the resent
//! assistant message lies and its view ([`Resent`]). When the ids before it
//! are the cached ones and the views agree, the cached reply (as generated)
//! stands for the resent one and only what follows it is sent.
//! After every run the sequence is checked against `rkllm_get_kv_cache_size`:
//! a disagreement (e.g. a token the runtime keeps but never reported, such as
//! an end-of-sequence token — the manual leaves that open) makes the cache
//! unknown, and the next run starts clean. Never a wrong answer to save time.

use super::job::Resent;
use super::outcome::{CacheUse, MissReason};
use super::prompt;
use super::saved::{Restore, Save};
use crate::metrics::RuntimePerf;
use rkllm_sys::RunInput;
use std::path::PathBuf;
use std::time::Instant;

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
    /// The last run, when the cache holds it.
    last: Option<LastRun>,
    /// A reply that reasoned may stand for the same reply resent without
    /// its reasoning (setting `reasoning_history = kept`).
    keep_reasoning: bool,
    /// Something ran or was forgotten since the model loaded (an unknown
    /// cache before that is the fresh one: a miss is `empty`, not `unknown`).
    used: bool,
}

/// The last run in the cache: its prompt as the client sent it, where its
/// reply begins in the cache, and how the client saw that reply. After a
/// reply matched by its view the cache holds the reply as generated where
/// the client's prompt holds it as resent, so the client's ids are kept.
#[derive(Debug)]
struct LastRun {
    /// The job that generated it.
    job: String,
    /// The prompt's ids as the client's request gave them.
    prompt: Vec<i32>,
    /// Positions in the cache before the reply.
    reply_start: usize,
    /// The reply as the client saw it, by the api's reckoning (empty until
    /// the api names it: a reply cut by a stop sequence never matches).
    views: Vec<String>,
    /// The client's name for the conversation.
    key: Option<String>,
}

/// How one run uses the cache.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Plan {
    /// Clear the cache before the run.
    pub clear: bool,
    /// Tokens already in the cache that the prompt reuses.
    pub cached: usize,
    /// The ids this run sends (the prompt's ids after `cached`, or after the
    /// resent reply the cached one stands for).
    pub input: Vec<i32>,
    /// The cached reply stands for the resent one (matched by its view).
    pub by_view: bool,
    /// The prompt's ids as the client's request gave them.
    pub prompt: Vec<i32>,
    /// The saved conversation the run restores (`saved.rs`).
    pub restore: Option<Restore>,
    /// The shared prefix a new conversation's run starts from (`shared_prefix.rs`).
    pub shared: Option<Box<Shared>>,
    /// Where the run saves its prompt.
    pub save: Option<Save>,
    /// Why the resident conversation is not reused (when `cached` is 0).
    pub miss: MissReason,
    /// The client's name for the conversation.
    pub key: Option<String>,
}

/// Why a finished run's cache is not what the engine expected.
#[derive(Debug, PartialEq)]
pub(super) struct Disagreement {
    pub expected: usize,
    pub reported: Option<usize>,
}

impl KvCache {
    pub fn new(keep_reasoning: bool) -> Self {
        KvCache { keep_reasoning, ..KvCache::default() }
    }

    /// How a prompt of `ids`, run with the adapter `lora`, that may generate
    /// up to `max_new` tokens runs in a context of `context` positions;
    /// `resent` says where the prompt resends an earlier reply.
    pub fn plan(&self, ids: &[i32], resent: Option<&Resent>, lora: Option<&str>, max_new: u32, context: u32) -> Plan {
        let fits = |cached: usize, sent: usize| continuation_fits(cached + sent, ids.len(), max_new, context as usize);
        let plan = |clear, cached, from: usize, by_view, miss| Plan {
            clear,
            cached,
            input: ids[from..].to_vec(),
            by_view,
            prompt: ids.to_vec(),
            restore: None,
            shared: None,
            save: None,
            miss,
            key: None,
        };
        let clear = self.tokens.as_ref().is_none_or(|t| !t.is_empty());
        let Some(cached) = self.tokens.as_deref() else {
            let why = if self.used { MissReason::Unknown } else { MissReason::Empty };
            return plan(clear, 0, 0, false, why);
        };
        if cached.is_empty() {
            return plan(clear, 0, 0, false, MissReason::Empty);
        }
        let continued = [(self.resent_as_generated(cached, ids), false), (self.stands_for(ids, resent), true)];
        // At least one new token: a run needs input.
        let continued = continued
            .into_iter()
            .filter_map(|(from, by_view)| Some((from?, by_view)))
            .find(|(from, _)| *from < ids.len());
        match continued {
            None => plan(clear, 0, 0, false, MissReason::Other),
            Some(_) if self.lora.as_deref() != lora => plan(clear, 0, 0, false, MissReason::Adapter),
            Some((from, _)) if ids[from..].iter().any(|&id| prompt::is_image(id)) => {
                plan(clear, 0, 0, false, MissReason::Image)
            }
            Some((from, by_view)) if fits(cached.len(), ids.len() - from) => {
                plan(false, cached.len(), from, by_view, MissReason::Empty)
            }
            Some(_) => plan(clear, 0, 0, false, MissReason::Context),
        }
    }

    /// Where the cache's content ends in `ids` when the client resent it
    /// all: the last prompt as it sent it, then the reply as generated.
    fn resent_as_generated(&self, cached: &[i32], ids: &[i32]) -> Option<usize> {
        let (prompt, reply) = match &self.last {
            Some(last) => (last.prompt.as_slice(), &cached[last.reply_start..]),
            None => (&[][..], cached),
        };
        let rest = ids.strip_prefix(prompt)?;
        rest.starts_with(reply).then_some(prompt.len() + reply.len())
    }

    /// Where the resent reply ends in `ids` when the cached reply stands for
    /// it: the prompt before it is the last one as the client sent it (up to
    /// where the resent message begins, which may be before the reply did:
    /// a generation prompt the template does not repeat in history, e.g. an
    /// empty `<think></think>`) and the client saw the same reply.
    fn stands_for(&self, ids: &[i32], resent: Option<&Resent>) -> Option<usize> {
        let (last, resent) = (self.last.as_ref()?, resent?);
        let same_before = resent.start <= last.prompt.len()
            && resent.before == last.prompt.len()
            && resent.start <= resent.end
            && resent.end <= ids.len()
            && ids[..resent.start] == last.prompt[..resent.start];
        (same_before && last.views.contains(&resent.view)).then_some(resent.end)
    }

    /// The api's name for how the client saw the reply of `job`; `reasoned`:
    /// the reply held reasoning, which the client's view leaves out; `shown`:
    /// the reply's tokens the client was shown. Only a reply the cache holds
    /// exactly as shown can stand for its view: one with tokens the client
    /// never saw (generated past the client's limit in a batch, or before an
    /// abort landed) cannot. `false`: the cache's last run is not `job`'s.
    pub fn seen(&mut self, job: &str, view: String, reasoned: bool, shown: u32) -> bool {
        let Some(last) = self.last.as_mut().filter(|r| r.job == job) else { return false };
        let reply_len = self.tokens.as_ref().map_or(0, |t| t.len() - last.reply_start);
        // History as the template renders it: the cached reasoning must not
        // stay in the context unless the setting keeps it.
        if (!reasoned || self.keep_reasoning) && reply_len == shown as usize {
            last.views.push(view);
        }
        true
    }

    /// Known to hold nothing: a run may fill it without clearing.
    pub fn is_clean(&self) -> bool {
        self.tokens.as_ref().is_some_and(Vec::is_empty)
    }

    /// The cache was cleared (`rkllm_clear_kv_cache` succeeded).
    pub fn cleared(&mut self) {
        self.tokens = Some(Vec::new());
        self.last = None;
    }

    /// The ids of the last run's prompt as the cache holds them.
    pub fn last_prompt(&self) -> Option<&[i32]> {
        Some(&self.tokens.as_deref()?[..self.last.as_ref()?.reply_start])
    }

    /// The client's name for the conversation the cache holds.
    pub fn last_key(&self) -> Option<&str> {
        self.last.as_ref()?.key.as_deref()
    }

    /// The LoRA adapter the cached positions were computed with.
    pub fn lora(&self) -> Option<&str> {
        self.lora.as_deref()
    }

    /// The planned run is about to fill the (empty or reused) cache with `lora`.
    pub fn filled_with(&mut self, lora: Option<&str>) {
        self.lora = lora.map(str::to_owned);
    }

    /// Nothing is known about the cache any more (a run was abandoned, a
    /// clear failed, a check disagreed).
    pub fn forget(&mut self) {
        self.used = true;
        self.tokens = None;
        self.last = None;
    }

    /// A run of `plan` ended having generated `generated` ids; `reported` is
    /// the runtime's `rkllm_get_kv_cache_size` after it. Keeps the sequence
    /// when the sizes agree, otherwise forgets it.
    pub fn after_run(
        &mut self,
        job: &str,
        plan: &Plan,
        generated: &[i32],
        reported: Option<usize>,
    ) -> Result<usize, Disagreement> {
        self.last = None;
        self.used = true;
        let Some(mut tokens) = self.tokens.take().filter(|t| t.len() == plan.cached) else {
            return Err(Disagreement { expected: plan.cached + plan.input.len() + generated.len(), reported });
        };
        tokens.extend_from_slice(&plan.input);
        let reply_start = tokens.len();
        tokens.extend_from_slice(generated);
        if reported != Some(tokens.len()) {
            return Err(Disagreement { expected: tokens.len(), reported });
        }
        let size = tokens.len();
        let prompt = plan.prompt.clone();
        let key = plan.key.clone();
        self.last = Some(LastRun { job: job.to_owned(), prompt, reply_start, views: Vec::new(), key });
        self.tokens = Some(tokens);
        Ok(size)
    }
}

/// Whether a run that continues cached positions, taking `positions` in
/// all, fits where a fresh prefill of the prompt's `prompt_len` ids would
/// run. The api admitted the prompt for a fresh run: with the client's
/// `max_tokens` when it set one, else with room for one token, the reply
/// then ending where the context does (`max_new` is then the server's
/// limit, which a long conversation leaves no room for). A continuation
/// that takes no more positions than the fresh run is admitted alike; one
/// that takes more (a cached reply longer than the resent one it stands
/// for, e.g. with its reasoning) must leave room for `max_new`.
pub(super) fn continuation_fits(positions: usize, prompt_len: usize, max_new: u32, context: usize) -> bool {
    positions <= prompt_len || positions + max_new as usize <= context
}

impl Plan {
    /// A clean start: every id sent.
    pub fn fresh(ids: &[i32], miss: MissReason) -> Plan {
        Plan {
            clear: false,
            cached: 0,
            input: ids.to_vec(),
            by_view: false,
            prompt: ids.to_vec(),
            restore: None,
            shared: None,
            save: None,
            miss,
            key: None,
        }
    }

    /// A clean start that restores a saved conversation: the file's ids
    /// sent for the client's, then the rest (the runtime spares the file's).
    pub fn restoring(ids: &[i32], restore: Restore) -> Plan {
        let input = [&restore.held_ids[..], &ids[restore.client..]].concat();
        Plan { input, restore: Some(restore), ..Plan::fresh(ids, MissReason::Displaced) }
    }

    /// How the run found its prompt as planned: the tokens it reuses from
    /// the resident conversation or a restored file, or why none. (A single
    /// run's restore is checked against the runtime's count instead,
    /// `conversations.rs`.)
    pub fn found(&self) -> (usize, CacheUse) {
        if let Some(restore) = &self.restore {
            (restore.held, CacheUse::Restored)
        } else if self.cached > 0 {
            (self.cached, CacheUse::Resident)
        } else {
            (0, CacheUse::Miss(self.miss))
        }
    }

    pub fn input(&self) -> RunInput {
        RunInput::Tokens(self.input.clone())
    }
}

/// A run that starts from a shared prefix's file (`shared_prefix.rs`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Shared {
    pub file: PathBuf,
    /// The prefix's ids: what the file spares the run's prefill.
    pub held: usize,
    /// The job's own turn made the file first (a run of the prefix alone).
    pub made: Option<Made>,
}

/// The run that made a prefix's file, in the turn of the job that uses it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Made {
    /// When it started: the job's admission (`timings.prompt_ms` covers both runs).
    pub started: Instant,
    pub prefill_time_ms: f64,
    pub prefill_tokens: i64,
}

impl Plan {
    /// When the job was admitted, its own run starting `at`: when the run
    /// that made its shared prefix's file started, if its turn made one.
    pub fn admitted(&self, at: Instant) -> Instant {
        self.shared.as_ref().and_then(|s| s.made.as_ref()).map_or(at, |m| m.started)
    }

    /// The job's runtime figures, its own run's `perf`: with the prefill of
    /// the run that made its shared prefix's file added, if its turn made
    /// one (`timings.prompt_n` is then the whole prompt).
    pub fn job_perf(&self, perf: RuntimePerf) -> RuntimePerf {
        match self.shared.as_ref().and_then(|s| s.made.as_ref()) {
            Some(m) => RuntimePerf {
                prefill_time_ms: perf.prefill_time_ms + m.prefill_time_ms,
                prefill_tokens: perf.prefill_tokens + m.prefill_tokens,
                ..perf
            },
            None => perf,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(plan: &Plan) -> (bool, usize, Vec<i32>, bool) {
        (plan.clear, plan.cached, plan.input.clone(), plan.by_view)
    }

    #[test]
    fn a_follow_up_reuses_the_exact_prefix_and_anything_else_starts_clean() {
        let mut kv = KvCache::default();
        let first = kv.plan(&[1, 2, 3], None, None, 10, 100);
        assert_eq!(shape(&first), (true, 0, vec![1, 2, 3], false), "unknown at start: clear");
        kv.cleared();
        assert_eq!(kv.after_run("j", &first, &[7, 8], Some(5)), Ok(5));

        let follow = kv.plan(&[1, 2, 3, 7, 8, 9], None, None, 10, 100);
        assert_eq!(shape(&follow), (false, 5, vec![9], false));
        assert_eq!(kv.after_run("j", &follow, &[4], Some(7)), Ok(7));

        // An edited earlier turn: no prefix, clear and send everything.
        let edited = kv.plan(&[1, 2, 6, 7, 8, 9, 4, 5], None, None, 10, 100);
        assert_eq!(shape(&edited), (true, 0, vec![1, 2, 6, 7, 8, 9, 4, 5], false));
        // The same prompt again has no new token: start clean.
        assert!(kv.plan(&[1, 2, 3, 7, 8, 9, 4], None, None, 10, 100).clear);
        // No more positions than a fresh prefill takes: as admissible as it,
        // even when the reply's limit reaches past the context (a request
        // without max_tokens gets the server's limit).
        assert!(!kv.plan(&[1, 2, 3, 7, 8, 9, 4, 5], None, None, 93, 100).clear);
        assert!(!kv.plan(&[1, 2, 3, 7, 8, 9, 4, 5], None, None, 2048, 100).clear);
    }

    #[test]
    fn a_size_that_disagrees_forgets_the_cache() {
        let mut kv = KvCache::default();
        kv.cleared();
        let plan = kv.plan(&[1, 2], None, None, 10, 100);
        assert!(!plan.clear, "an empty cache needs no clearing");
        // One more position than sent + generated (e.g. an unreported EOS).
        assert_eq!(kv.after_run("j", &plan, &[3], Some(4)), Err(Disagreement { expected: 3, reported: Some(4) }));
        assert!(kv.plan(&[1, 2, 3, 4], None, None, 10, 100).clear, "unknown: start clean");
        kv.forget();
        let plan = kv.plan(&[1], None, None, 10, 100);
        assert!(plan.clear);
    }

    #[test]
    fn a_run_with_another_adapter_starts_clean() {
        let mut kv = KvCache::default();
        kv.cleared();
        let base = kv.plan(&[1, 2], None, None, 10, 100);
        kv.filled_with(None);
        assert_eq!(kv.after_run("j", &base, &[3], Some(3)), Ok(3));
        let adapter = kv.plan(&[1, 2, 3, 4], None, Some("style"), 10, 100);
        assert_eq!(shape(&adapter), (true, 0, vec![1, 2, 3, 4], false), "base-model positions");
        kv.cleared();
        kv.filled_with(Some("style"));
        assert_eq!(kv.after_run("j", &adapter, &[5], Some(5)), Ok(5));
        assert!(!kv.plan(&[1, 2, 3, 4, 5, 6], None, Some("style"), 10, 100).clear, "the same adapter reuses");
        assert!(kv.plan(&[1, 2, 3, 4, 5, 6], None, Some("terse"), 10, 100).clear, "another adapter does not");
        assert!(kv.plan(&[1, 2, 3, 4, 5, 6], None, None, 10, 100).clear, "nor the base model");
    }

    #[test]
    fn a_resent_reply_the_client_saw_the_same_stands_for_the_generated_one() {
        let mut kv = KvCache::default();
        kv.cleared();
        // Prompt [1 2 3] (3 = the generation prompt), reply [7 8] shown as "seven eight".
        let first = kv.plan(&[1, 2, 3], None, None, 10, 100);
        assert_eq!(kv.after_run("a", &first, &[7, 8], Some(5)), Ok(5));
        assert!(!kv.seen("other job", "not this one".into(), false, 2));
        assert!(kv.seen("a", "seven eight".into(), false, 2));
        // Resent re-tokenized differently ([70]) then the new turn [9 4].
        let ids = [1, 2, 3, 70, 9, 4];
        let resent = |start, view: &str| Resent { start, end: 4, view: view.into(), before: 3 };
        let hit = kv.plan(&ids, Some(&resent(3, "seven eight")), None, 10, 100);
        assert_eq!(shape(&hit), (false, 5, vec![9, 4], true));
        // The resent message may begin before the reply did (a generation
        // prompt the history does not repeat), never after it.
        assert!(
            kv.plan(
                &[1, 2, 70, 9, 4],
                Some(&Resent { start: 2, end: 3, view: "seven eight".into(), before: 3 }),
                None,
                10,
                100
            )
            .by_view
        );
        assert!(kv.plan(&ids, Some(&resent(3, "seven eight!")), None, 10, 100).clear, "another view");
        // The same view, resent after a shorter prompt than the cached one (an
        // earlier reply that ends like the cached one, the cache a turn ahead).
        let earlier = Resent { before: 2, ..resent(3, "seven eight") };
        assert!(kv.plan(&ids, Some(&earlier), None, 10, 100).clear, "another turn's reply");
        assert!(kv.plan(&[1, 5, 3, 70, 9, 4], Some(&resent(3, "seven eight")), None, 10, 100).clear, "an edited turn");
        assert!(kv.plan(&[1, 2, 3, 70], Some(&resent(3, "seven eight")), None, 10, 100).clear, "nothing new");
        // The cached reply [7 8] stands for the resent [70]: one position
        // more than a fresh prefill, so the reply's limit must still fit.
        assert!(kv.plan(&ids, Some(&resent(3, "seven eight")), None, 94, 100).clear, "over the context");
        assert!(!kv.plan(&ids, Some(&resent(3, "seven eight")), None, 93, 100).clear, "within it");
        assert!(kv.plan(&ids, Some(&resent(3, "seven eight")), Some("style"), 10, 100).clear, "another adapter");
        // After the hit the next reply is the one that can be stood for,
        // after the prompt as the client sent it (its reply [70], not [7 8]).
        assert_eq!(kv.after_run("b", &hit, &[5], Some(8)), Ok(8));
        let third = |reply: &[i32]| [&ids[..], reply, &[2]].concat();
        let by_view = |view: &str| Resent { start: 6, end: 7, view: view.into(), before: 6 };
        assert!(kv.plan(&third(&[60]), Some(&by_view("seven eight")), None, 10, 100).clear);
        assert!(
            kv.plan(
                &[1, 2, 3, 7, 8, 9, 4, 60, 2],
                Some(&Resent { start: 7, end: 8, view: "five".into(), before: 6 }),
                None,
                10,
                100
            )
            .clear
        );
        kv.seen("b", "five".into(), false, 1);
        assert_eq!(shape(&kv.plan(&third(&[60]), Some(&by_view("five")), None, 10, 100)), (false, 8, vec![2], true));
        // The reply resent exactly as generated needs no view.
        assert_eq!(shape(&kv.plan(&third(&[5]), None, None, 10, 100)), (false, 8, vec![2], false));
    }

    #[test]
    fn a_reply_that_reasoned_stands_for_its_view_only_when_reasoning_is_kept() {
        for keep in [true, false] {
            let mut kv = KvCache::new(keep);
            kv.cleared();
            let first = kv.plan(&[1, 2, 3], None, None, 10, 100);
            assert_eq!(kv.after_run("a", &first, &[7, 8], Some(5)), Ok(5));
            kv.seen("a", "eight".into(), true, 2);
            let resent = Resent { start: 3, end: 4, view: "eight".into(), before: 3 };
            assert_eq!(kv.plan(&[1, 2, 3, 80, 9], Some(&resent), None, 10, 100).by_view, keep);
        }
    }
}
