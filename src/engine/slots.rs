//! The conversation cache in batched runs (`batch` = N > 1).
//!
//! Every slot of a batched run has its own KV cache and the run's
//! `keep_history` keeps them all, so each slot holds one conversation
//! exactly: the single run's record (`kv.rs`), one per slot. A job goes to
//! the slot whose conversation it continues (the longest reuse first). A job
//! that continues none needs an empty slot, and the runtime clears slots
//! only all at once (a range per slot is honoured only in single-turn mode):
//! when no slot is empty, every slot is cleared before the run and the whole
//! group prefills from the start. A slot no job fills gets a one-token filler
//! whose input and reply stay in it, so after a run with fillers those slots
//! hold nothing of use, and the next job that needs an empty slot clears them
//! all — unless the runtime takes short batches (`short_batch.rs`): then a
//! slot no job fills gets no input and keeps its conversation for when its
//! client comes back. Closed-loop clients that share every run (the
//! scheduler gathers them for as long as they take to come back,
//! `returns.rs`) keep their slots from run to run; more live conversations
//! than slots come back from the batched runs' files (`batch_files.rs`),
//! loaded after a clear. A job only a file holds has the slots cleared for
//! it also when no newcomer forces it, if the file spares it more than the
//! slots keep of conversations that came back before: a slot holding one
//! exchange (a chat UI's side task) is not kept for a return that does
//! not come.
//!
//! After every run each slot's size is checked against what was sent and
//! generated (`rkllm_get_kv_cache_size` gives one per slot), and the run's
//! prefill against what was sent (`perf.prefill_tokens`, the batch's sum): a
//! runtime that prefilled more did not keep the slots' history as the manual
//! says, and the slots are switched off for the model (WARN, metric).

use super::job::CacheHints;
use super::kv::{Disagreement, KvCache, Plan};
use super::outcome::MissReason;
use super::saved::Restore;
use std::collections::VecDeque;
use tokio::time::Instant;

/// What a run that clears every slot may restore from: the batched runs'
/// prompt-cache files (`batch_files.rs`, which implements it, so that this
/// module names none of its types).
pub(super) trait Restores {
    /// The file that spares `members` the most ids, each job in the slot it
    /// was saved from (at most one a slot); `context` is the model's.
    fn best(&self, members: &[Member], context: u32) -> Option<GroupRestore>;
}

/// The file a batched run restores and, per job, the slot and restore.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct GroupRestore {
    pub file: std::path::PathBuf,
    pub jobs: Vec<Option<(usize, Restore)>>,
}

/// The slots' records, and what the api said of replies not settled yet.
#[derive(Debug)]
pub(super) struct Slots {
    caches: Vec<KvCache>,
    /// Views named before their run was settled: a slot's reply ends, and
    /// its client may name what it saw, before the batched run does.
    early: Vec<Seen>,
    /// Each slot's size as the runtime last reported it (`None`: unknown):
    /// a filler's slot grows with every run it fills.
    sizes: Vec<Option<usize>>,
    /// Why the slots keep nothing any more (`None`: on).
    off: Option<String>,
    /// Per slot, when the reply of the conversation it holds ended (its
    /// client left the slot).
    ended: Vec<Option<Instant>>,
    /// Conversations lost to a filler or a clear (their prompt, and when
    /// their reply ended), the latest last: a job that continues one is its
    /// client come back too late, whose return the scheduler measures too
    /// (else only the returns a window caught would be measured, and the
    /// window could only shrink).
    departed: VecDeque<(Vec<i32>, Instant)>,
    /// Slots without a job get no input (a short batch), not a filler.
    short: bool,
    /// Per slot: its conversation came back at least once (a slot holding a
    /// single exchange, such as a chat UI's title task, is not expected back).
    continued: Vec<bool>,
    /// Jobs that took a clean slot, per recent run (the last `size` runs):
    /// how fast newcomers use up the clean slots.
    newcomers: VecDeque<usize>,
}

#[derive(Debug)]
struct Seen {
    job: String,
    view: String,
    reasoned: bool,
    shown: u32,
}

/// One job of a batch, as the cache places it.
pub(super) struct Member<'a> {
    /// Its prompt's ids (`None`: sent as text, it needs an empty slot and
    /// leaves its slot unknown).
    pub ids: Option<&'a [i32]>,
    pub hints: &'a CacheHints,
    pub lora: Option<&'a str>,
    pub max_new: u32,
}

/// How a batched run uses the slots.
#[derive(Debug, PartialEq)]
pub(super) struct Layout {
    /// Per job, in the group's order: its slot, and how it uses that slot's
    /// cache (`None`: a job without ids, run from its text).
    pub jobs: Vec<(usize, Option<Plan>)>,
    /// Per job that continues a conversation — the one its slot holds (also
    /// when the run clears every slot first), or one a slot lost — when that
    /// conversation's last reply ended: its client came back, and the
    /// scheduler measures how soon.
    pub home: Vec<Option<Instant>>,
    /// Every slot is cleared before the run.
    pub clear: bool,
    /// The batched run's file loaded after the clear (`batch_files.rs`).
    pub restore: Option<std::path::PathBuf>,
}

/// The job one slot of a finished run was given, and how it used the slot
/// (a slot without one had a filler, or a job run from its text: nothing
/// known is left in it).
pub(super) struct SlotJob {
    pub id: String,
    pub plan: Plan,
}

impl Slots {
    pub fn new(size: usize, keep_reasoning: bool) -> Self {
        Slots {
            caches: (0..size).map(|_| KvCache::new(keep_reasoning)).collect(),
            early: Vec::new(),
            sizes: vec![None; size],
            off: None,
            ended: vec![None; size],
            departed: VecDeque::new(),
            short: false,
            continued: vec![false; size],
            newcomers: VecDeque::with_capacity(size),
        }
    }

    /// Slots without a job get no input from now on (`true`), or a filler.
    pub fn set_short(&mut self, short: bool) {
        self.short = short;
    }

    pub fn is_off(&self) -> bool {
        self.off.is_some()
    }

    /// Where each member runs and what it sends; `context` is the model's.
    /// When every slot is cleared, `files` may restore some members, each in
    /// the slot its file saved it from.
    pub fn layout(&self, members: &[Member], context: u32, files: Option<&dyn Restores>) -> Layout {
        let size = self.caches.len();
        let plans: Vec<Vec<Plan>> = members
            .iter()
            .map(|m| match m.ids {
                Some(ids) => {
                    let resent = m.hints.resent.as_ref();
                    self.caches.iter().map(|c| c.plan(ids, resent, m.lora, m.max_new, context)).collect()
                }
                None => Vec::new(),
            })
            .collect();
        let mut hits: Vec<(usize, usize, usize)> = plans
            .iter()
            .enumerate()
            .flat_map(|(j, per_slot)| per_slot.iter().enumerate().map(move |(s, p)| (p.cached, j, s)))
            .filter(|(cached, _, _)| *cached > 0)
            .collect();
        hits.sort_by_key(|&(cached, _, _)| std::cmp::Reverse(cached));
        let mut slot_of: Vec<Option<usize>> = vec![None; members.len()];
        let mut taken = vec![false; size];
        for (_, j, s) in hits {
            if slot_of[j].is_none() && !taken[s] {
                slot_of[j] = Some(s);
                taken[s] = true;
            }
        }
        // Without clearing, the jobs that continue nothing take empty slots
        // and fillers the rest, which must have room for the run's reply.
        let homeless = slot_of.iter().filter(|s| s.is_none()).count();
        let empty: Vec<usize> = (0..size).filter(|&s| !taken[s] && self.caches[s].is_clean()).collect();
        let run_max = members.iter().map(|m| m.max_new as usize).max().unwrap_or(0);
        let crowded = |s: usize| self.sizes[s].is_none_or(|n| n + 1 + run_max > context as usize);
        let mut fillers = (0..size).filter(|&s| !taken[s] && !empty[..homeless.min(empty.len())].contains(&s));
        let forced = homeless > empty.len() || (!self.short && fillers.any(crowded));
        let restored = files.filter(|_| forced || homeless > 0).and_then(|f| f.best(members, context));
        // A job that continues no slot but a file: clearing every slot to
        // restore it pays when the file spares more than the slots would
        // keep — what this run reuses in them, and the conversations that
        // came back before (a slot holding one exchange, such as a chat UI's
        // title or tags task, is not expected back). So side tasks that took
        // the clean slots do not keep a conversation they displaced out.
        let worth_clearing = |r: &GroupRestore| {
            let spared: usize = r.jobs.iter().flatten().map(|(_, r)| r.held).sum();
            let reused: usize = slot_of.iter().zip(&plans).filter_map(|(s, p)| Some(p[(*s)?].cached)).sum();
            let live = (0..size).filter(|&s| !taken[s] && self.continued[s]);
            spared > reused + live.filter_map(|s| self.caches[s].last_prompt().map(<[i32]>::len)).sum::<usize>()
        };
        let clear = forced || restored.as_ref().is_some_and(worth_clearing);
        let restored = restored.filter(|_| clear);
        let restores = restored.as_ref().map_or_else(|| vec![None; members.len()], |r| r.jobs.clone());
        let mut placed = slot_of.clone();
        if restored.is_some() {
            // Every slot is cleared: the restored jobs take the slots they
            // were saved from, the others any free one.
            placed.fill(None);
            taken.fill(false);
            restores.iter().flatten().for_each(|(s, _)| taken[*s] = true);
        }
        // A job that continues nothing takes an empty slot, or, once every
        // slot is cleared, any free one.
        let mut free = (0..size).filter(|&s| !taken[s] && (clear || self.caches[s].is_clean()));
        let home = members
            .iter()
            .zip(&slot_of)
            .map(|(m, hit)| match hit {
                Some(s) => self.ended[*s],
                None => self.departed_from(m.ids?),
            })
            .collect();
        let jobs = members
            .iter()
            .zip(plans)
            .zip(slot_of.into_iter().zip(placed))
            .zip(restores)
            .map(|(((member, mut per_slot), (hit, placed)), restore)| {
                if let (Some(ids), Some((slot, restore))) = (member.ids, restore) {
                    return (slot, Some(Plan::restoring(ids, restore)));
                }
                let slot = placed.or_else(|| free.next()).expect("a batch has no more jobs than slots");
                let plan = member.ids.map(|ids| match hit {
                    Some(s) if !clear => per_slot.swap_remove(s),
                    Some(_) => Plan::fresh(ids, MissReason::Displaced),
                    None => Plan::fresh(ids, self.why_missed(&per_slot, member.hints)),
                });
                (slot, plan)
            })
            .collect();
        Layout { jobs, home, clear, restore: restored.map(|r| r.file) }
    }

    /// When the reply ended of the lost conversation `ids` continues.
    fn departed_from(&self, ids: &[i32]) -> Option<Instant> {
        let continued = |(prompt, _): &&(Vec<i32>, Instant)| ids.len() > prompt.len() && ids.starts_with(prompt);
        self.departed.iter().rev().find(continued).map(|(_, ended)| *ended)
    }

    /// Slot `s` loses the conversation it holds.
    fn depart(&mut self, s: usize) {
        let Some(ended) = self.ended[s].take() else { return };
        if let Some(prompt) = self.caches[s].last_prompt() {
            if self.departed.len() == 2 * self.caches.len() {
                self.departed.pop_front();
            }
            self.departed.push_back((prompt.to_vec(), ended));
        }
    }

    /// The clients of these slots left them (their replies ended) at these times.
    pub fn left(&mut self, left: &[(usize, Instant)]) {
        for &(s, at) in left {
            if let Some(ended) = self.ended.get_mut(s) {
                *ended = Some(at);
            }
        }
    }

    /// The size the runtime last reported for slot `s`.
    pub fn size(&self, s: usize) -> Option<usize> {
        self.sizes.get(s).copied().flatten()
    }

    /// The prompt of the conversation slot `s` holds, as its cache holds the ids.
    pub fn held_prompt(&self, s: usize) -> Option<Vec<i32>> {
        self.caches.get(s)?.last_prompt().map(<[i32]>::to_vec)
    }

    /// Whether slot `s` holds a conversation a job may come back to.
    pub fn holds(&self, s: usize) -> bool {
        self.caches.get(s).is_some_and(|c| c.last_prompt().is_some())
    }

    /// Whether the clean slots `layout` leaves (its slots cleared, if it
    /// clears them) are fewer than the jobs that took clean slots in the
    /// recent runs: newcomers will likely clear every slot before this
    /// run's clients come back, so the run saves its file (`batch_files.rs`).
    pub fn likely_cleared(&self, layout: &Layout) -> bool {
        let newcomers: usize = self.newcomers.iter().sum();
        let clean = |s: &usize| self.caches[*s].is_clean();
        let taken = layout.jobs.iter().map(|(s, _)| *s).filter(clean).count();
        let left = (0..self.caches.len()).filter(clean).count() - taken;
        left < newcomers
    }

    /// Why a job continues no slot: a named conversation's slot holds an
    /// edited version of it; otherwise the most telling slot's reason.
    fn why_missed(&self, per_slot: &[Plan], hints: &CacheHints) -> MissReason {
        let key = hints.conversation.as_deref();
        if key.is_some() && self.caches.iter().any(|c| c.last_key() == key) {
            return MissReason::Edited;
        }
        let rank = |r: &MissReason| match r {
            MissReason::Context => 4,
            MissReason::Adapter => 3,
            MissReason::Other => 2,
            MissReason::Unknown => 1,
            _ => 0,
        };
        per_slot.iter().map(|p| p.miss).max_by_key(rank).unwrap_or(MissReason::Empty)
    }

    /// `rkllm_clear_kv_cache` emptied every slot.
    pub fn cleared(&mut self) {
        (0..self.caches.len()).for_each(|s| self.depart(s));
        self.caches.iter_mut().for_each(KvCache::cleared);
        self.sizes.fill(Some(0));
        self.continued.fill(false);
    }

    /// Nothing is known of slot `s` any more.
    pub fn forget_slot(&mut self, s: usize) {
        if let (Some(cache), Some(size)) = (self.caches.get_mut(s), self.sizes.get_mut(s)) {
            cache.forget();
            *size = None;
        }
    }

    /// Nothing is known of any slot any more.
    pub fn forget(&mut self) {
        self.caches.iter_mut().for_each(KvCache::forget);
        self.sizes.fill(None);
        self.early.clear();
    }

    /// A batched run ended: `used` says what each slot was given (in slot
    /// order), `absent` which slots had no input at all (a short batch: they
    /// hold what they held, their sizes checked by the caller), `generated`
    /// each slot's ids, `reported` the runtime's sizes. Returns each slot
    /// whose size disagreed (that slot is then unknown).
    pub fn settle(
        &mut self,
        used: &[Option<SlotJob>],
        absent: &[bool],
        lora: Option<&str>,
        generated: &[Vec<i32>],
        reported: Option<&[i32]>,
    ) -> Vec<(usize, Disagreement)> {
        let mut disagreements = Vec::new();
        let absent = |s: usize| absent.get(s).copied().unwrap_or(false);
        for (s, used) in used.iter().enumerate() {
            if used.is_none() && !absent(s) {
                self.depart(s);
            }
            if !absent(s) {
                self.continued[s] = used.as_ref().is_some_and(|u| u.plan.cached > 0 || u.plan.restore.is_some());
            }
        }
        let fresh = |u: &&SlotJob| u.plan.cached == 0 && u.plan.restore.is_none();
        if self.newcomers.len() == self.caches.len() {
            self.newcomers.pop_front();
        }
        self.newcomers.push_back(used.iter().flatten().filter(fresh).count());
        for (s, (cache, used)) in self.caches.iter_mut().zip(used).enumerate() {
            let size = reported.and_then(|r| r.get(s)).and_then(|&n| usize::try_from(n).ok());
            if absent(s) {
                continue;
            }
            self.sizes[s] = size;
            let Some(SlotJob { id, plan }) = used else {
                cache.forget();
                continue;
            };
            let ids = generated.get(s).map_or(&[][..], Vec::as_slice);
            cache.filled_with(lora);
            match cache.after_run(id, plan, ids, size) {
                Ok(_) => {
                    for seen in self.early.iter().filter(|seen| seen.job == *id) {
                        cache.seen(id, seen.view.clone(), seen.reasoned, seen.shown);
                    }
                }
                Err(d) => disagreements.push((s, d)),
            }
        }
        self.early.clear();
        disagreements
    }

    /// How the client was shown the reply of `job` (`KvCache::seen`); kept
    /// until its run is settled when that has not happened yet.
    pub fn seen(&mut self, job: &str, view: String, reasoned: bool, shown: u32) {
        let known = self.caches.iter_mut().any(|c| c.seen(job, view.clone(), reasoned, shown));
        if !known {
            self.early.push(Seen { job: job.to_owned(), view, reasoned, shown });
        }
    }

    /// The runtime did not keep what the slots should hold: no batched run
    /// keeps history from now on.
    pub fn switch_off(&mut self, why: String) {
        tracing::warn!(reason = %why, "the conversation cache in batched runs is switched off for this model");
        self.forget();
        self.off = Some(why);
    }

    /// Whether a job of these ids continues some slot's conversation.
    pub fn is_warm(&self, ids: &[i32], lora: Option<&str>) -> bool {
        !self.is_off() && self.caches.iter().any(|c| c.plan(ids, None, lora, 0, u32::MAX).cached > 0)
    }

    /// The conversations held, and their prompt tokens.
    pub fn held(&self) -> (usize, usize) {
        let prompts: Vec<usize> = self.caches.iter().filter_map(|c| c.last_prompt().map(<[i32]>::len)).collect();
        (prompts.len(), prompts.iter().sum())
    }
}

/// What a batched run that keeps history gave its slots, for settling.
pub(super) struct Kept {
    /// Per slot.
    pub used: Vec<Option<SlotJob>>,
    /// Ids sent to all slots (`None`: some slot was sent text).
    pub sent: Option<usize>,
    /// Per slot: given no input (a short batch).
    pub absent: Vec<bool>,
    pub lora: Option<String>,
    /// The file the run saves its slots' prompts to (`batch_files.rs`).
    pub save: Option<std::path::PathBuf>,
}

#[cfg(test)]
#[path = "slots_tests.rs"]
mod tests;
