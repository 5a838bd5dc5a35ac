//! Shared prefixes: a new conversation that starts like others did (an
//! agent's system prompt and tools, 12–14k tokens; a chat UI's system
//! prompt) prefills only what follows that start.
//!
//! The saved conversations (`saved.rs`) restore a prompt that *continues*
//! one; a new conversation continues none, and a conversation's file holds
//! its whole prompt, which the runtime matches "from the start" as a whole
//! (the simulator: all of the file's ids or nothing; the manual says no
//! more). So a shared prefix needs a file of its own, holding exactly it.
//!
//! * **Found** by the api: on a conversation's first turn it says how many
//!   of the prompt's ids the leading system messages and tools render to
//!   (`CacheHints::stable`: the ids the prompt shares with that start and an
//!   empty user message, so the cut is at a message boundary whatever the
//!   template). What an agent sends first in every session is that start
//!   (Claude Code's per-session `x-anthropic-billing-header` block is kept
//!   out of the prompt by the Messages API).
//! * **Made** at first sight, when the start is at least `min_tokens` long
//!   and no file holds it, in the turn of the conversation that brings it,
//!   which prefills it anyway: a stateless run of the start alone with
//!   `save_prompt_cache = 1` (one generated token), then the file is loaded
//!   and the job's own run prefills only the rest. What that adds is one
//!   decoded token and the file's save and load (docs/performance.md), so
//!   a file is worth making before a second conversation shows it shared:
//!   the second conversation of an agent already starts warm. The making
//!   run's prefill count is checked against the start's length, and the job
//!   reports the prefill of both runs (a miss: its turn prefilled it all).
//! * **Restored** for each later conversation that starts with a file's ids
//!   (the longest such file), while loading measures cheaper than prefilling
//!   (`Costs::worth_restoring`, the saved conversations' own measurements).
//! * **Checked** by the runtime's prefill count, as every restore: a run
//!   that did not spare exactly the prefix switches the prefix files off
//!   for the model (WARN, `rkllmd_shared_prefix_off_total`); its reply is
//!   right all the same, the runtime having prefilled what it did not spare.
//! * **Bounded** by `max_bytes` (least recently used out, never the one just
//!   made); a prefix whose file would not fit, by the bytes per token files
//!   measured here, is not made.

use super::saved_dir;
use std::path::{Path, PathBuf};

/// When a shared prefix gets a file, and how much the files may take.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedPrefixSettings {
    /// The shortest prefix worth a file.
    pub min_tokens: usize,
    pub max_bytes: u64,
}

#[derive(Debug)]
struct Entry {
    ids: Vec<i32>,
    lora: Option<String>,
    file: PathBuf,
    bytes: u64,
    /// A use counter value: the larger, the more recent.
    used: u64,
}

/// A model's shared-prefix files (in its saved conversations' directory).
#[derive(Debug)]
pub(super) struct SharedPrefixes {
    settings: SharedPrefixSettings,
    dir: PathBuf,
    entries: Vec<Entry>,
    next: u64,
    clock: u64,
    /// Why the files were switched off, once they were.
    off: Option<String>,
    /// The largest bytes per token of a file made here: what a new one takes.
    bytes_per_token: Option<f64>,
    /// The file being made: left behind when its job went away mid-way
    /// (the runtime still writes it), removed at the next making or at the end.
    making: Option<PathBuf>,
}

impl SharedPrefixes {
    pub fn new(dir: PathBuf, settings: SharedPrefixSettings) -> Self {
        SharedPrefixes {
            settings,
            dir,
            entries: Vec::new(),
            next: 0,
            clock: 0,
            off: None,
            bytes_per_token: None,
            making: None,
        }
    }

    /// Files kept and their bytes.
    pub fn held(&self) -> (usize, u64) {
        (self.entries.len(), self.entries.iter().map(|e| e.bytes).sum())
    }

    /// The longest prefix file `ids` starts with and goes on past: its file
    /// and length.
    pub fn find(&self, ids: &[i32], lora: Option<&str>) -> Option<(PathBuf, usize)> {
        if self.off.is_some() {
            return None;
        }
        let fits = |e: &&Entry| e.lora.as_deref() == lora && e.ids.len() < ids.len() && ids.starts_with(&e.ids);
        let entry = self.entries.iter().filter(fits).max_by_key(|e| e.ids.len())?;
        Some((entry.file.clone(), entry.ids.len()))
    }

    /// Whether a prompt's `stable` start (its system messages and tools)
    /// is worth a file: at least `min_tokens`, short of the whole prompt
    /// (the job's run needs input of its own), and a file that fits the
    /// budget by the bytes per token measured here.
    pub fn worth_making(&self, stable: usize, prompt: usize) -> bool {
        let bytes = self.bytes_per_token.map_or(0.0, |b| b * stable as f64);
        self.off.is_none()
            && stable >= self.settings.min_tokens
            && stable < prompt
            && bytes <= self.settings.max_bytes as f64
    }

    /// The file the next prefix is saved to. Runtime calls are made one
    /// after another, so a file whose job went away is whole by now.
    pub fn next_file(&mut self) -> PathBuf {
        if let Some(left) = self.making.take() {
            remove(&left);
        }
        self.next += 1;
        let file = self.dir.join(format!("prefix-{}.cache", self.next));
        self.making = Some(file.clone());
        file
    }

    /// Keeps the file the runtime wrote of `ids`; the least recently used
    /// others go while over the budget. `false`: it alone is over the budget
    /// (removed).
    pub fn made(&mut self, file: &Path, ids: &[i32], lora: Option<&str>) -> bool {
        self.making = None;
        let bytes = std::fs::metadata(file).map_or(0, |m| m.len());
        let per_token = bytes as f64 / ids.len().max(1) as f64;
        self.bytes_per_token = Some(self.bytes_per_token.map_or(per_token, |b| b.max(per_token)));
        if bytes > self.settings.max_bytes {
            tracing::info!(
                tokens = ids.len(),
                bytes,
                "a shared prefix's file is larger than shared_prefix_mb: not kept"
            );
            remove(file);
            return false;
        }
        self.clock += 1;
        let entry =
            Entry { ids: ids.to_vec(), lora: lora.map(str::to_owned), file: file.to_owned(), bytes, used: self.clock };
        self.entries.push(entry);
        while self.held().1 > self.settings.max_bytes {
            let Some(i) = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.file != file)
                .min_by_key(|(_, e)| e.used)
                .map(|(i, _)| i)
            else {
                break;
            };
            let gone = self.entries.remove(i);
            tracing::debug!(file = %gone.file.display(), tokens = gone.ids.len(), "shared prefix evicted");
            remove(&gone.file);
        }
        true
    }

    pub fn used(&mut self, file: &Path) {
        self.clock += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.file == file) {
            e.used = self.clock;
        }
    }

    /// The files did not deliver: drop them all and make no more.
    pub fn switch_off(&mut self, why: String) {
        tracing::warn!(reason = %why, "shared-prefix files switched off for this model");
        crate::metrics::observer().metrics.shared_prefix_off();
        for e in self.entries.drain(..) {
            remove(&e.file);
        }
        self.off = Some(why);
    }
}

impl Drop for SharedPrefixes {
    fn drop(&mut self) {
        for file in self.entries.iter().map(|e| &e.file).chain(&self.making) {
            remove(file);
        }
    }
}

/// Removes a shared prefix's file.
fn remove(file: &Path) {
    saved_dir::remove(file, "a shared prefix's file");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixes(dir: &Path, min_tokens: usize, max_bytes: u64) -> SharedPrefixes {
        SharedPrefixes::new(dir.to_owned(), SharedPrefixSettings { min_tokens, max_bytes })
    }

    /// Keeps a file of `bytes` bytes for `ids`, as the runtime would write it.
    fn make(p: &mut SharedPrefixes, ids: &[i32], bytes: usize) -> (PathBuf, bool) {
        let file = p.next_file();
        std::fs::write(&file, vec![0u8; bytes]).unwrap();
        let kept = p.made(&file, ids, None);
        (file, kept)
    }

    #[test]
    fn a_stable_start_is_worth_a_file_from_min_tokens_and_short_of_the_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let p = prefixes(dir.path(), 3, 1 << 20);
        assert!(p.worth_making(4, 6));
        assert!(!p.worth_making(2, 6), "under min_tokens");
        assert!(!p.worth_making(6, 6), "the job's run needs an id of its own");
    }

    #[test]
    fn the_longest_file_a_prompt_starts_with_and_goes_past_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = prefixes(dir.path(), 3, 1 << 20);
        let (long, _) = make(&mut p, &[1, 2, 3, 4, 5], 50);
        assert_eq!(p.find(&[1, 2, 3, 4, 5, 6], None), Some((long.clone(), 5)));
        assert_eq!(p.find(&[1, 2, 3, 4, 5], None), None, "nothing left to run");
        assert_eq!(p.find(&[1, 2, 3, 4, 5, 6], Some("style")), None, "another adapter's keys and values");
        // Another agent's start is another file.
        let third = [1, 2, 3, 7, 8];
        assert_eq!(p.find(&third, None), None);
        let (short, _) = make(&mut p, &[1, 2, 3], 30);
        assert_eq!(p.find(&third, None), Some((short, 3)));
        assert_eq!(p.find(&[1, 2, 3, 4, 5, 6], None), Some((long, 5)), "the longest first");
    }

    #[test]
    fn over_the_budget_the_least_recently_used_go_and_one_too_large_is_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = prefixes(dir.path(), 2, 100);
        let (a, _) = make(&mut p, &[1, 1], 40);
        let (b, _) = make(&mut p, &[2, 2], 40);
        p.used(&a);
        let (c, kept) = make(&mut p, &[3, 3], 40);
        assert!(kept);
        assert_eq!(p.held(), (2, 80));
        assert!(a.exists() && !b.exists() && c.exists(), "b was the least recently used");
        // 20 bytes a token measured: a prefix of 6 would take 120 > 100.
        assert!(!p.worth_making(6, 10));
        assert!(p.worth_making(5, 10));
        let (d, kept) = make(&mut p, &[5, 5], 101);
        assert!(!kept && !d.exists());
        assert_eq!(p.held(), (2, 80));
    }

    #[test]
    fn a_file_whose_job_went_away_is_removed_at_the_next_making() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = prefixes(dir.path(), 2, 1 << 20);
        let left = p.next_file();
        std::fs::write(&left, b"kv").unwrap();
        let (next, kept) = make(&mut p, &[1, 2], 10);
        assert!(kept && next.exists() && !left.exists());
        drop(p);
        assert!(!next.exists(), "the files go with the model");
    }

    #[test]
    fn switched_off_they_are_removed_and_neither_found_nor_made() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = prefixes(dir.path(), 2, 1 << 20);
        let (a, _) = make(&mut p, &[1, 2], 10);
        p.switch_off("a restore spared nothing".into());
        assert!(!a.exists());
        assert_eq!(p.find(&[1, 2, 3], None), None);
        assert!(!p.worth_making(2, 3));
    }
}
