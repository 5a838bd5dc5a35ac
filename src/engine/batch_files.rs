//! Batched runs' prompt-cache files: a conversation displaced from its
//! batch slot comes back from a file instead of being prefilled from zero.
//!
//! The runtime clears batch slots only all at once, so a conversation that
//! finds no slot of its own costs every slot its conversation (`slots.rs`).
//! With more live conversations than slots that happens every run. A run
//! with `save_prompt_cache = 1` writes its prompt KV to a file, and
//! `rkllm_load_prompt_cache` loads one that later inputs are matched
//! against from the start; what a *batched* run writes, and which slot a
//! loaded file serves, the manual leaves open. The guess made here: a
//! batched run's file holds every slot's prompt, and once loaded it spares
//! slot I the ids slot I saved. The probe at load ([`probe`]) tries it —
//! one saving run with distinct ids per slot, a clear, the load, one run
//! continuing each slot — and uses the files only when the runtime's own
//! `perf.prefill_tokens` says every slot was spared exactly its ids. Every
//! restoring run is checked the same way afterwards (`slots.rs`), and a
//! file the runtime did not write, or a restore that spared other than
//! planned, switches the files off for the model: WARN,
//! `rkllmd_conversation_cache_off_total`, and `/health`'s
//! `runtime.batch_files` says `switched_off`.
//!
//! So a run that must clear every slot loads the one file that serves most
//! of its jobs (`Slots::layout`), each in the slot it was saved from: the
//! group that was displaced together comes back together (the scheduler
//! takes the oldest waiting jobs first, so closed-loop clients keep their
//! groups). A restored conversation prefills its last reply and its new
//! message, as a `--batch 1` file does (`saved.rs`). A run saves its file
//! only when it clears the slots, when other jobs wait, or when it leaves
//! fewer clean slots than newcomers took in the recent runs (a chat UI's
//! side tasks between a conversation's turns), i.e. when the next run will
//! likely clear them: a closed group that keeps its slots writes nothing.
//! A job whose conversation only a file holds may also clear the slots to
//! be restored, when the file spares it more than the slots keep of what
//! came back before (`Slots::layout`): side tasks' slots are not. The files are one tier (no disk tier), under the saved
//! conversations' budgets: `conversation_cache_count` conversations and
//! `conversation_cache_mb`, least recently used files out.

use super::calls::wait_for;
use super::kv;
use super::saved::{Restore, SavedSettings};
use super::saved_dir::{self, make_dir};
use super::schedule::ScheduleSettings;
use super::short_batch::{self, Bounded, ProbeRun};
use super::slots::{GroupRestore, Member, Restores};
use rkllm_sys::{BatchInput, BatchRequest, Model, RunInput};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the probe at load found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFiles {
    /// A batched run's file restores every slot's prompt into its slot.
    Accepted,
    /// The saving run failed, wrote no file, or the file did not load.
    Refused,
    /// The file loaded but did not spare each slot exactly its own ids.
    Misplaced,
    /// Accepted at load, then a run's file or restore did not deliver.
    SwitchedOff,
}

impl BatchFiles {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchFiles::Accepted => "accepted",
            BatchFiles::Refused => "refused",
            BatchFiles::Misplaced => "misplaced",
            BatchFiles::SwitchedOff => "switched_off",
        }
    }
}

/// The probe's token ids: slot I saves `[BASE + 2I, BASE + 2I + 1]` and
/// continues with `BASE + 2N`; within any real vocabulary.
const PROBE_BASE: i32 = 100;

/// Runs the probe on a freshly loaded handle with `n` slots, its file in
/// `dir` (blocking; the KV cache is cleared and the file released after
/// it). Anything but `Accepted` is a WARN and counted. `Err`: a run of the
/// probe did not return after its abort (the handle is lost).
pub(super) fn probe(model: &Model, n: usize, dir: &Path, bound: Duration) -> Result<BatchFiles, String> {
    let file = dir.join("batch-probe.cache");
    let (found, why) = run_probe(model, n, &file, bound)?;
    if let Err(why) = wait_for(model.release_prompt_cache()) {
        tracing::warn!("rkllm_release_prompt_cache failed after the batch-file probe ({why})");
    }
    if let Err(why) = wait_for(model.clear_kv_cache(false)) {
        tracing::warn!("rkllm_clear_kv_cache failed after the batch-file probe ({why})");
    }
    saved_dir::remove(&file, "the batch-file probe's file");
    match found {
        BatchFiles::Accepted => tracing::info!(
            n_batch = n,
            "a batched run's prompt-cache file restores each slot: displaced conversations come back from files"
        ),
        _ => {
            crate::metrics::observer().metrics.conversation_cache_off();
            tracing::warn!(
                n_batch = n,
                found = found.as_str(),
                reason = %why,
                "batched runs save no prompt-cache files: a conversation displaced from its slot is prefilled again"
            );
        }
    }
    Ok(found)
}

/// The files of a model loaded with `batch` > 1, the conversation cache on
/// and conversations saved, when the probe finds them working, and what it
/// found (`None`: not asked). A model's own prompt-cache file
/// (`prompt_cache.rs`) stays loaded instead: a batched run's file would
/// replace it. `Err`: the probe's run did not come back (`probe`).
pub(super) fn at_load(
    model: &Model,
    schedule: &ScheduleSettings,
    conversation_cache: bool,
    saved: Option<&SavedSettings>,
    model_cache: bool,
    bound: Duration,
) -> Result<(Option<GroupFiles>, Option<BatchFiles>), String> {
    let Some(saved) = saved.filter(|_| schedule.batch > 1 && conversation_cache) else { return Ok((None, None)) };
    if model_cache {
        tracing::info!("batched runs save no prompt-cache files: the model's own prompt-cache file stays loaded");
        return Ok((None, None));
    }
    let files = match GroupFiles::open(saved) {
        Ok(files) => files,
        Err(why) => {
            tracing::warn!(reason = %why, "batched runs save no prompt-cache files: the directory cannot be made");
            return Ok((None, None));
        }
    };
    let found = probe(model, usize::from(schedule.batch), &saved.dir, bound)?;
    let files = (found == BatchFiles::Accepted).then_some(files);
    Ok((files, Some(found)))
}

/// What the probe found and why; `Err`: a run did not return after its abort.
fn run_probe(model: &Model, n: usize, file: &Path, bound: Duration) -> Result<(BatchFiles, String), String> {
    let Some(path) = file.to_str() else { return Ok((BatchFiles::Refused, "the directory is not UTF-8".into())) };
    let ids = |slot: usize| vec![PROBE_BASE + 2 * slot as i32, PROBE_BASE + 2 * slot as i32 + 1];
    if let Err(why) = probe_run(model, (0..n).map(ids).collect(), Some(path), bound)? {
        return Ok((BatchFiles::Refused, format!("a batched run asked to save its prompt cache: {why}")));
    }
    match std::fs::metadata(file) {
        Ok(m) if m.len() > 0 => {}
        _ => return Ok((BatchFiles::Refused, format!("a batched run asked to save wrote no file at {path}"))),
    }
    if let Err(why) = wait_for(model.clear_kv_cache(false)) {
        return Ok((BatchFiles::Refused, format!("rkllm_clear_kv_cache failed ({why})")));
    }
    if let Err(why) = wait_for(model.load_prompt_cache(path)) {
        return Ok((BatchFiles::Refused, format!("rkllm_load_prompt_cache of a batched run's file failed ({why})")));
    }
    let next = PROBE_BASE + 2 * n as i32;
    let continued = (0..n).map(|slot| [ids(slot), vec![next]].concat()).collect();
    Ok(match probe_run(model, continued, None, bound)? {
        Ok(Some(prefilled)) if prefilled == n as i64 => (BatchFiles::Accepted, String::new()),
        Ok(prefilled) => (
            BatchFiles::Misplaced,
            format!(
                "with the file loaded, a run continuing each of {n} slots by one id prefilled {} ids (expected {n})",
                prefilled.map_or("an unreported number of".into(), |p| p.to_string())
            ),
        ),
        Err(why) => (BatchFiles::Refused, format!("a run after loading a batched run's file: {why}")),
    })
}

/// One batched run of these ids per slot, one token generated, saving to
/// `save`: its prefill count, or why it failed; `Err`: it did not return
/// after its abort.
fn probe_run(
    model: &Model,
    slots: Vec<Vec<i32>>,
    save: Option<&str>,
    bound: Duration,
) -> Result<Result<Option<i64>, String>, String> {
    let n = slots.len();
    let slots = slots.into_iter().map(|ids| Some(BatchInput { input: RunInput::Tokens(ids), enable_thinking: false }));
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let mut channels = vec![None; n];
    channels[0] = Some(tx);
    let request = BatchRequest {
        slots: slots.collect(),
        max_new_tokens: Some(1),
        sampling: None,
        lora: None,
        keep_history: true,
        save_prompt_cache: save.map(str::to_owned),
    };
    let (control, done) = match model.submit_batch(request, channels) {
        Ok(run) => run,
        Err(e) => return Ok(Err(e.to_string())),
    };
    // Bounded, as the short-batch probe: a runtime that hangs saving or
    // loading a batched run's file must not hang the load.
    let finish = match short_batch::read_bounded(ProbeRun { control, events, done: Some(done) }, 1, bound)? {
        Bounded::Ended { finish: Some(finish), .. } => finish,
        Bounded::Ended { finish: None, .. } => return Ok(Err("the runtime thread is gone".into())),
        Bounded::Unread(why) => return Ok(Err(why)),
        Bounded::TimedOut => return Ok(Err(format!("its one-token run took longer than {bound:?} and was aborted"))),
    };
    if finish.is_error() || finish.code != 0 {
        return Ok(Err(format!("rkllm_run returned {} (see the runtime's log line)", finish.code)));
    }
    Ok(Ok(finish.perf.map(|p| p.prefill_tokens)))
}

/// One conversation in a file: the ids its slot holds and the ids a client
/// sends for them (they differ after a reply matched by its view, `kv.rs`).
#[derive(Debug)]
struct Entry {
    held: Vec<i32>,
    client: Vec<i32>,
}

#[derive(Debug)]
struct File {
    id: u64,
    path: PathBuf,
    bytes: u64,
    /// A use counter value: the larger, the more recent.
    used: u64,
    lora: Option<String>,
    /// Per slot.
    slots: Vec<Option<Entry>>,
}

/// The files of one model's batched runs.
#[derive(Debug)]
pub(super) struct GroupFiles {
    dir: PathBuf,
    max_bytes: u64,
    max_count: usize,
    files: Vec<File>,
    next: u64,
    clock: u64,
    /// The runtime has a batched run's file loaded.
    pub loaded: bool,
    /// Why the files were switched off, once they were.
    off: Option<String>,
}

impl GroupFiles {
    /// Makes the directory; `Err` says why the files cannot be kept.
    pub fn open(settings: &SavedSettings) -> Result<Self, String> {
        make_dir(&settings.dir).map_err(|e| format!("{}: {e}", settings.dir.display()))?;
        Ok(GroupFiles {
            dir: settings.dir.clone(),
            max_bytes: settings.max_bytes,
            max_count: settings.max_count,
            files: Vec::new(),
            next: 0,
            clock: 0,
            loaded: false,
            off: None,
        })
    }

    pub fn is_off(&self) -> bool {
        self.off.is_some()
    }

    fn restores(file: &File, members: &[Member], context: usize) -> Vec<Option<(usize, Restore)>> {
        let mut taken = vec![false; file.slots.len()];
        members
            .iter()
            .map(|m| {
                let ids = m.ids?;
                let fits = |e: &Entry| {
                    kv::continuation_fits(e.held.len() + ids.len() - e.client.len(), ids.len(), m.max_new, context)
                };
                let continued = |e: &Entry| e.client.len() < ids.len() && ids.starts_with(&e.client) && fits(e);
                let (slot, entry) = file.slots.iter().enumerate().find_map(|(s, e)| {
                    let e = e.as_ref().filter(|e| !taken[s] && continued(e))?;
                    Some((s, e))
                })?;
                taken[slot] = true;
                let restore = Restore {
                    entry: file.id,
                    file: file.path.clone(),
                    held: entry.held.len(),
                    client: entry.client.len(),
                    held_ids: entry.held.clone(),
                    on_disk: false,
                };
                Some((slot, restore))
            })
            .collect()
    }

    /// Where the coming run saves; `None` with the files off.
    pub fn next_file(&mut self) -> Option<PathBuf> {
        if self.is_off() {
            return None;
        }
        self.next += 1;
        Some(self.dir.join(format!("batch-{}.cache", self.next)))
    }

    /// A run that saved to `path` ended; `slots` says what each slot's
    /// conversation holds (held, client ids; `None`: nothing known). Keeps
    /// the file if the runtime wrote it (else the files are switched off),
    /// drops what its conversations left in older files, and keeps the
    /// budget. Returns whether the files are on still.
    pub fn saved(&mut self, path: PathBuf, lora: Option<&str>, slots: Vec<Option<(Vec<i32>, Vec<i32>)>>) -> bool {
        if self.is_off() {
            saved_dir::remove(&path, "a batched run's file");
            return false;
        }
        let bytes = match std::fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) => {
                self.switch_off(format!(
                    "the runtime wrote no prompt-cache file for a batched run ({}: {e})",
                    path.display()
                ));
                return false;
            }
        };
        let slots: Vec<Option<Entry>> =
            slots.into_iter().map(|s| s.map(|(held, client)| Entry { held, client })).collect();
        // A conversation continued here is restored from this file from now on.
        for old in &mut self.files {
            for entry in &mut old.slots {
                let superseded = |e: &Entry| slots.iter().flatten().any(|new| new.client.starts_with(&e.client));
                if entry.as_ref().is_some_and(superseded) {
                    *entry = None;
                }
            }
        }
        self.clock += 1;
        self.next += 1;
        let file = File { id: self.next, path, bytes, used: self.clock, lora: lora.map(str::to_owned), slots };
        self.files.push(file);
        self.drop_where(|f| f.slots.iter().all(Option::is_none));
        while self.over_budget() {
            let Some(oldest) = self.files.iter().min_by_key(|f| f.used).map(|f| f.id) else { break };
            crate::metrics::observer().metrics.conversation_evicted();
            self.drop_where(|f| f.id == oldest);
        }
        true
    }

    fn over_budget(&self) -> bool {
        let count: usize = self.files.iter().map(|f| f.slots.iter().flatten().count()).sum();
        let bytes: u64 = self.files.iter().map(|f| f.bytes).sum();
        self.files.len() > 1 && (count > self.max_count || bytes > self.max_bytes)
    }

    fn drop_where(&mut self, gone: impl Fn(&File) -> bool) {
        let (dropped, kept) = std::mem::take(&mut self.files).into_iter().partition(|f| gone(f));
        self.files = kept;
        for f in dropped {
            saved_dir::remove(&f.path, "a batched run's file");
        }
    }

    /// A run restored from `path`.
    pub fn used(&mut self, path: &Path) {
        self.clock += 1;
        if let Some(f) = self.files.iter_mut().find(|f| f.path == path) {
            f.used = self.clock;
        }
    }

    /// The files did not deliver: drop them all and save no more.
    pub fn switch_off(&mut self, why: String) {
        tracing::warn!(reason = %why, "batched runs' prompt-cache files switched off for this model");
        crate::metrics::observer().metrics.conversation_cache_off();
        self.drop_where(|_| true);
        self.off = Some(why);
    }

    /// Files kept, and the conversations they hold.
    #[cfg(test)]
    pub fn held(&self) -> (usize, usize) {
        (self.files.len(), self.files.iter().map(|f| f.slots.iter().flatten().count()).sum())
    }
}

impl Restores for GroupFiles {
    /// The file that spares `members` the most ids, each job in the slot it
    /// was saved from (at most one a slot); `context` is the model's.
    fn best(&self, members: &[Member], context: u32) -> Option<GroupRestore> {
        if self.is_off() {
            return None;
        }
        let lora = members.first()?.lora;
        let candidates = self.files.iter().filter(|f| f.lora.as_deref() == lora);
        let restores = candidates.map(|f| (f, Self::restores(f, members, context as usize)));
        let spared = |jobs: &Vec<Option<(usize, Restore)>>| jobs.iter().flatten().map(|(_, r)| r.held).sum::<usize>();
        let (file, jobs) =
            restores.filter(|(_, jobs)| spared(jobs) > 0).max_by_key(|(f, jobs)| (spared(jobs), f.used))?;
        Some(GroupRestore { file: file.path.clone(), jobs })
    }
}

impl Drop for GroupFiles {
    fn drop(&mut self) {
        self.drop_where(|_| true);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::job::CacheHints;

    fn files(dir: &Path, max_count: usize) -> GroupFiles {
        let settings = SavedSettings { dir: dir.to_owned(), max_bytes: 1 << 20, max_count, disk: None };
        GroupFiles::open(&settings).unwrap()
    }

    /// A run's file as the runtime writes it, with each slot's (held, client) ids.
    fn save(files: &mut GroupFiles, slots: &[Option<&[i32]>]) -> PathBuf {
        let path = files.next_file().unwrap();
        std::fs::write(&path, "kv").unwrap();
        let entries = slots.iter().map(|s| s.map(|ids| (ids.to_vec(), ids.to_vec()))).collect();
        assert!(files.saved(path.clone(), None, entries));
        path
    }

    fn member<'a>(ids: &'a [i32], hints: &'a CacheHints) -> Member<'a> {
        Member { ids: Some(ids), hints, lora: None, max_new: 8 }
    }

    #[test]
    fn the_file_that_spares_the_most_restores_each_job_into_its_saved_slot() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = files(&dir.path().join("m"), 8);
        let first = save(&mut files, &[Some(&[1, 2]), Some(&[5, 6, 7]), None]);
        let second = save(&mut files, &[Some(&[8, 9]), None, None]);
        let hints = CacheHints::default();
        // 5 6 7's conversation goes on, and 1 2's; 8 9's is not back.
        let ids = [[5, 6, 7, 3, 4].as_slice(), &[1, 2, 3], &[8, 8]];
        let members: Vec<Member> = ids.iter().map(|ids| member(ids, &hints)).collect();
        let best = files.best(&members, 100).unwrap();
        assert_eq!(best.file, first);
        let placed: Vec<Option<(usize, usize)>> =
            best.jobs.iter().map(|j| j.as_ref().map(|(s, r)| (*s, r.held))).collect();
        assert_eq!(placed, vec![Some((1, 3)), Some((0, 2)), None]);
        assert!(files.best(&members[2..], 100).is_none(), "nothing a file holds");
        assert!(files.best(&[member(&[8, 9], &hints)], 100).is_none(), "no new token: nothing to restore");

        // The run that restored them saves their new prompts: the first file
        // holds nothing of use any more and goes; the second stays.
        save(&mut files, &[Some(&[1, 2, 3]), Some(&[5, 6, 7, 3, 4]), None]);
        assert!(!first.exists());
        assert!(second.exists());
        assert_eq!(files.held(), (2, 3));
    }

    #[test]
    fn past_the_budget_the_least_recently_used_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = files(&dir.path().join("m"), 2);
        let a = save(&mut files, &[Some(&[1]), Some(&[2])]);
        let b = save(&mut files, &[Some(&[3]), None]);
        assert!(!a.exists(), "3 conversations, 2 allowed");
        assert_eq!(files.held(), (1, 1));
        assert!(b.exists());
    }

    #[test]
    fn a_file_the_runtime_did_not_write_switches_the_files_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = files(&dir.path().join("m"), 8);
        let kept = save(&mut files, &[Some(&[1, 2]), None]);
        let missing = files.next_file().unwrap();
        assert!(!files.saved(missing, None, vec![Some((vec![4], vec![4])), None]));
        assert!(files.is_off());
        assert!(!kept.exists(), "every file goes");
        assert!(files.next_file().is_none(), "no more saves");
        let hints = CacheHints::default();
        assert!(files.best(&[member(&[1, 2, 3], &hints)], 100).is_none());
    }
}
