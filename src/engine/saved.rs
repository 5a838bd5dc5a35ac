//! Conversations kept warm beyond the one the KV cache holds: every cached
//! run saves its prompt's KV as a prompt-cache file (`save_prompt_cache = 1`)
//! in a RAM directory (tmpfs), so a conversation that another one (or a side
//! task: a title, an embedding) displaced is restored with
//! `rkllm_load_prompt_cache` instead of prefilled again.
//!
//! A file holds the prompt of a conversation's latest run (the runtime
//! saves the prompt, not the reply — *open*, assumed): a return prefills
//! that run's reply and its own new message. Each entry keeps the exact ids
//! the file holds and the ids a client sends for them (they differ after a
//! reply matched by its view, `kv.rs`); a new prompt that starts with the
//! client's ids is sent as the file's ids and the rest.
//!
//! Conversations with images are saved too, so that a chat UI's side tasks
//! (Open WebUI's title, tags and follow-up prompts between every two turns)
//! do not cost an image conversation its prefill each turn. A file holds
//! its prompt's KV positions, the images' embeddings among them, which a
//! run cannot send as ids: a prompt with images loads the file and is sent
//! whole, as text and embeddings (from the encoder's cache), and the
//! runtime matches it against the file from the start as it does ids
//! (`generation.rs`), if the file holds the ids that text gives
//! (`conversations.rs` loads no other). The other design, keeping side
//! tasks out of the image conversation's KV cache, needs a second one (a
//! second handle, i.e. a second copy of the weights, or a batch slot) and
//! side tasks recognised by their text; a file serves any request between.
//!
//! Nothing about the files is assumed to work: a restoring run's reuse is
//! read from the runtime's own `perf.prefill_tokens`. A run that prefilled
//! other than the file's ids spared switches the files off for the model
//! (WARN, `rkllmd_conversation_cache_off_total`): the manual leaves open
//! whether a loaded cache combines with `keep_history` (rknn-llm #399).
//! For images the match itself is *open* too (whether the runtime compares
//! an embedding's positions with a file's): the same check switches the
//! files off when it does not.
//!
//! Budget: the files may add up to `max_bytes` and number `max_count`; past
//! either, the least recently used go — to the disk tier when there is one
//! (a slower directory with a bytes budget of its own, least recently used
//! out): the copy runs off the async threads ([`Spill`]), the entry stays
//! loadable from RAM until it is whole, and a conversation continued
//! meanwhile keeps its new RAM file (the copy is dropped). (Putting one-off requests such as
//! title tasks first was tried: with more live conversations than the count,
//! conversations that had come back once stayed forever while every new
//! one was evicted before its second turn — 0 of 40 follow-ups cached with
//! 8 conversations after a run of 4.)

use super::prompt;
use super::restore_costs::Costs;
use super::saved_dir::{self, make_dir};
use std::path::{Path, PathBuf};

/// Where conversations are saved and how much they may take.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedSettings {
    /// The directory for this model's files (made at load, removed at unload).
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub max_count: usize,
    /// Where the RAM tier's least recently used go instead of away.
    pub disk: Option<DiskTier>,
}

/// A slower directory (NVMe, eMMC) the RAM tier spills to.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskTier {
    /// This model's directory there (made at load, removed at unload).
    pub dir: PathBuf,
    pub max_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Ram,
    /// Being copied to the disk tier; loadable from RAM until it is whole.
    Spilling,
    Disk,
}

/// A RAM file to copy to the disk tier, off the async threads; its end is
/// [`Saved::spilled`].
#[derive(Debug, PartialEq)]
pub(super) struct Spill {
    pub entry: u64,
    pub from: PathBuf,
    pub to: PathBuf,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    file: PathBuf,
    /// The ids the file holds.
    held: Vec<i32>,
    /// The ids a client sends for them.
    client: Vec<i32>,
    lora: Option<String>,
    bytes: u64,
    /// A use counter value: the larger, the more recent.
    used: u64,
    /// The client's name for the conversation.
    key: Option<String>,
    tier: Tier,
}

/// A restore the next run makes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Restore {
    pub entry: u64,
    pub file: PathBuf,
    /// The ids the file spares the prefill.
    pub held: usize,
    /// Where the client's prompt goes on past the file's content.
    pub client: usize,
    pub held_ids: Vec<i32>,
    /// The file is on the disk tier.
    pub on_disk: bool,
}

/// What the next save writes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Save {
    pub entry: u64,
    pub file: PathBuf,
}

#[derive(Debug)]
pub(super) struct Saved {
    settings: SavedSettings,
    entries: Vec<Entry>,
    next: u64,
    clock: u64,
    /// The entry of the conversation the KV cache holds.
    resident: Option<u64>,
    /// The file the runtime has loaded (`rkllm_load_prompt_cache`).
    pub loaded: Option<PathBuf>,
    /// Why the files were switched off, once they were.
    off: Option<String>,
    /// Why conversations with images are no longer saved, once a restore
    /// of one did not deliver (the rest are kept: see the module's doc).
    images_off: Option<String>,
    /// The file the running run saves to.
    pending: Option<Save>,
    pub evictions: u64,
    /// What restoring and prefilling have cost here, per token.
    pub costs: Costs,
    /// Copies to the disk tier for the engine to start.
    spills: Vec<Spill>,
    /// The file `rkllm_load_prompt_cache` is reading now, and files a
    /// finished copy or the disk budget let go of meanwhile: removed once
    /// the load is over, so a copy never pulls a file from under a load.
    loading: Option<PathBuf>,
    stale: Vec<PathBuf>,
}

impl Saved {
    /// Makes the directory; `Err` says why the files cannot be kept.
    pub fn open(mut settings: SavedSettings) -> Result<Self, String> {
        make_dir(&settings.dir).map_err(|e| format!("{}: {e}", settings.dir.display()))?;
        if let Some(disk) = &settings.disk {
            if let Err(e) = make_dir(&disk.dir) {
                tracing::warn!(dir = %disk.dir.display(), error = %e, "no disk tier for saved conversations: the directory cannot be made");
                settings.disk = None;
            }
        }
        Ok(Saved {
            settings,
            entries: Vec::new(),
            next: 0,
            clock: 0,
            resident: None,
            loaded: None,
            off: None,
            images_off: None,
            pending: None,
            evictions: 0,
            costs: Costs::default(),
            spills: Vec::new(),
            loading: None,
            stale: Vec::new(),
        })
    }

    pub fn is_off(&self) -> bool {
        self.off.is_some()
    }

    /// Whether conversations with images are saved and restored.
    pub fn keeps_images(&self) -> bool {
        !self.is_off() && self.images_off.is_none()
    }

    /// Files kept and their bytes, on both tiers.
    pub fn held(&self) -> (usize, u64) {
        self.held_where(|_| true)
    }

    /// Files on the disk tier and their bytes.
    pub fn on_disk(&self) -> (usize, u64) {
        self.held_where(|t| t == Tier::Disk)
    }

    fn held_where(&self, tier: impl Fn(Tier) -> bool) -> (usize, u64) {
        let kept = self.entries.iter().filter(|e| tier(e.tier));
        kept.fold((0, 0), |(n, bytes), e| (n + 1, bytes + e.bytes))
    }

    /// The saved conversation a prompt of `ids` continues (the longest) that
    /// `room` fits in the context; with `same_ids`, only a file holding the ids the client sends.
    pub fn find(
        &self,
        ids: &[i32],
        lora: Option<&str>,
        room: impl Fn(usize, usize) -> bool,
        same_ids: bool,
    ) -> Option<Restore> {
        if self.is_off() {
            return None;
        }
        let entry = self
            .entries
            .iter()
            .filter(|e| e.lora.as_deref() == lora && e.client.len() < ids.len() && ids.starts_with(&e.client))
            .filter(|e| room(e.held.len(), ids.len() - e.client.len()) && (!same_ids || e.held == e.client))
            .max_by_key(|e| e.client.len())?;
        Some(Restore {
            entry: entry.id,
            file: entry.file.clone(),
            held: entry.held.len(),
            client: entry.client.len(),
            held_ids: entry.held.clone(),
            on_disk: entry.tier == Tier::Disk,
        })
    }

    /// Where the coming run saves its prompt: a fresh file (the entry's old
    /// one stays valid until the run succeeds) of the conversation it
    /// continues (`continues`: the resident one, or the one restored), or of
    /// a new entry.
    pub fn save(&mut self, continues: Option<u64>) -> Option<Save> {
        if self.is_off() {
            return None;
        }
        let entry = continues.filter(|id| self.entries.iter().any(|e| e.id == *id)).unwrap_or_else(|| {
            self.next += 1;
            self.next
        });
        self.next += 1;
        let file = self.settings.dir.join(format!("conversation-{entry}-{}.cache", self.next));
        self.pending = Some(Save { entry, file: file.clone() });
        Some(Save { entry, file })
    }

    /// The saved conversation the client named `key`.
    pub fn keyed(&self, key: &str) -> Option<u64> {
        self.entries.iter().find(|e| e.key.as_deref() == Some(key)).map(|e| e.id)
    }

    pub fn resident(&self) -> Option<u64> {
        self.resident
    }

    /// The KV cache no longer holds a saved conversation.
    pub fn displaced(&mut self) {
        self.resident = None;
    }

    /// The running run ended unread (its client went away): what it may
    /// have saved is not kept.
    pub fn forget(&mut self) {
        if let Some(save) = self.pending.take() {
            remove(&save.file);
        }
        self.resident = None;
    }

    /// A run that saved to `save` ended with the cache holding `held` ids
    /// for the client's `client` ids (its prompt). Keeps the file if the
    /// runtime wrote it.
    pub fn saved(&mut self, save: &Save, held: &[i32], client: &[i32], lora: Option<&str>, key: Option<&str>) {
        self.pending = None;
        let images = held.iter().any(|&id| prompt::is_image(id));
        if self.is_off() || (images && !self.keeps_images()) {
            // Switched off by this very run (its restore did not deliver).
            remove(&save.file);
            return;
        }
        let bytes = match std::fs::metadata(&save.file) {
            Ok(m) => m.len(),
            Err(e) => {
                let why = format!("the runtime wrote no prompt-cache file ({}: {e})", save.file.display());
                // A multimodal run's save is a guess apart from a token run's.
                if images {
                    self.switch_off_images(why);
                } else {
                    self.switch_off(why);
                }
                return;
            }
        };
        self.clock += 1;
        let old = self.entries.iter().position(|e| e.id == save.entry).map(|i| self.entries.remove(i));
        if let Some(old) = old {
            remove(&old.file);
        }
        self.entries.push(Entry {
            id: save.entry,
            file: save.file.clone(),
            held: held.to_vec(),
            client: client.to_vec(),
            lora: lora.map(str::to_owned),
            bytes,
            used: self.clock,
            key: key.map(str::to_owned),
            tier: Tier::Ram,
        });
        self.resident = Some(save.entry);
        self.evict();
    }

    /// A run that was to save did not end cleanly: its file is not kept.
    pub fn abandoned(&mut self, save: &Save) {
        self.pending = None;
        remove(&save.file);
        self.resident = None;
    }

    /// The least recently used RAM files go until the RAM budget holds —
    /// to the disk tier when there is one — never the one just saved; then
    /// the disk tier's own budget.
    fn evict(&mut self) {
        let over = |s: &Self| {
            let (count, bytes) = s.held_where(|t| t == Tier::Ram);
            count > s.settings.max_count || bytes > s.settings.max_bytes
        };
        while over(self) {
            let Some(i) = self.least_recent(Tier::Ram) else { break };
            match &self.settings.disk {
                Some(disk) => {
                    let entry = &mut self.entries[i];
                    entry.tier = Tier::Spilling;
                    let to = disk.dir.join(entry.file.file_name().unwrap_or_default());
                    self.spills.push(Spill { entry: entry.id, from: entry.file.clone(), to });
                }
                None => self.drop_entry(i),
            }
        }
        self.evict_disk();
    }

    /// The disk tier's least recently used go until its budget holds
    /// (copies under way count: they are on their way there).
    fn evict_disk(&mut self) {
        let Some(max_bytes) = self.settings.disk.as_ref().map(|d| d.max_bytes) else { return };
        while self.held_where(|t| t != Tier::Ram).1 > max_bytes {
            let Some(i) = self.least_recent(Tier::Disk) else { break };
            self.drop_entry(i);
        }
    }

    fn least_recent(&self, tier: Tier) -> Option<usize> {
        let candidates = self.entries.iter().enumerate().filter(|(_, e)| e.tier == tier && Some(e.id) != self.resident);
        candidates.min_by_key(|(_, e)| e.used).map(|(i, _)| i)
    }

    fn drop_entry(&mut self, i: usize) {
        let gone = self.entries.remove(i);
        self.discard(&gone.file);
        self.evictions += 1;
        crate::metrics::observer().metrics.conversation_evicted();
        tracing::debug!(file = %gone.file.display(), bytes = gone.bytes, "conversation evicted");
    }

    /// Removes `file`, or once the load reading it is over.
    fn discard(&mut self, file: &Path) {
        if self.loading.as_deref() == Some(file) {
            self.stale.push(file.to_owned());
        } else {
            remove(file);
        }
    }

    /// `rkllm_load_prompt_cache` is about to read `file` (`None`: it is over).
    pub fn loading(&mut self, file: Option<&Path>) {
        self.loading = file.map(Path::to_owned);
        if file.is_none() {
            self.stale.drain(..).for_each(|f| remove(&f));
        }
    }

    /// The copies to the disk tier to start now.
    pub fn take_spills(&mut self) -> Vec<Spill> {
        std::mem::take(&mut self.spills)
    }

    /// A copy to the disk tier ended (`copied`: the disk file is whole). A
    /// conversation continued, evicted or switched off meanwhile has no use
    /// for it.
    pub fn spilled(&mut self, spill: &Spill, copied: Result<(), String>) {
        let at =
            self.entries.iter().position(|e| e.id == spill.entry && e.file == spill.from && e.tier == Tier::Spilling);
        match (at, copied) {
            (Some(i), Ok(())) => {
                self.discard(&spill.from);
                let entry = &mut self.entries[i];
                entry.file = spill.to.clone();
                entry.tier = Tier::Disk;
                if self.loaded.as_ref() == Some(&spill.from) {
                    self.loaded = Some(spill.to.clone());
                }
                tracing::debug!(file = %spill.to.display(), "conversation moved to the disk tier");
                self.evict_disk();
            }
            (Some(i), Err(why)) => {
                tracing::warn!(file = %spill.to.display(), error = %why, "a saved conversation could not be moved to the disk tier");
                remove(&spill.to);
                self.drop_entry(i);
            }
            (None, copied) => {
                if copied.is_ok() {
                    remove(&spill.to);
                }
            }
        }
    }

    /// Files with images did not deliver: drop them and save no more. Text
    /// ones stay: how the runtime treats images in a file is a guess of its
    /// own, one their restores do not rest on.
    pub fn switch_off_images(&mut self, why: String) {
        tracing::warn!(reason = %why, "saved conversations with images switched off for this model");
        let (images, text) = self.entries.drain(..).partition(|e| e.held.iter().any(|&id| prompt::is_image(id)));
        self.entries = text;
        for e in images {
            if Some(e.id) == self.resident {
                self.resident = None;
            }
            self.discard(&e.file);
        }
        self.images_off = Some(why);
    }

    /// The files did not deliver: drop them all and save no more.
    pub fn switch_off(&mut self, why: String) {
        tracing::warn!(reason = %why, "saved conversations switched off for this model");
        for e in self.entries.drain(..) {
            remove(&e.file);
        }
        self.resident = None;
        self.off = Some(why);
    }
}

impl Drop for Saved {
    fn drop(&mut self) {
        for e in &self.entries {
            remove(&e.file);
        }
        let _ = std::fs::remove_dir(&self.settings.dir);
        if let Some(disk) = &self.settings.disk {
            let _ = std::fs::remove_dir(&disk.dir);
        }
    }
}

/// Removes a saved conversation's file.
fn remove(file: &Path) {
    saved_dir::remove(file, "a saved conversation");
}

#[cfg(test)]
#[path = "saved_tests.rs"]
mod tests;
