//! LoRA adapters and prompt-cache files, simulated.
//!
//! * `rkllm_load_lora` checks the adapter's file exists (its content is not
//!   read) and keeps name, path and scale; a run naming a loaded adapter
//!   gets replies salted with its name and scale (so they differ from the
//!   base model's), a run naming another fails.
//! * A run with `save_prompt_cache = 1` writes the ids of the KV cache after
//!   its prefill to the file (the simulator's own JSON; a real runtime's
//!   file is binary and neither reads the other's). What a batched run
//!   writes is *open* in the manual: with `batch_cache=slots` (the default)
//!   the file holds every slot's ids, each slot's own; with
//!   `batch_cache=refuse` such a run fails (ERROR, -1), as a runtime that
//!   saves single runs only would.
//! * `rkllm_load_prompt_cache` reads such a file. A later run whose KV cache
//!   is empty and whose ids start with the cached ids (and go on past them)
//!   does not prefill those ids again: its prefill time and
//!   `perf.prefill_tokens` count only the rest. A single run's file serves
//!   any slot so; a batched run's serves each slot from that slot's ids. The
//!   loaded cache stays until
//!   released or another is loaded; clearing the KV cache does not drop it
//!   (both *open* on the real runtime). Loading takes `cache_file_ms` per
//!   1000 ids (× `time_scale`), and a run that saves adds as much to its
//!   prefill. With `cache_lies=1` a load succeeds but spares nothing.

use crate::call::InferOptions;
use crate::engine::{Lora, SimModel, State};
use crate::generate::fnv1a;
use crate::log;
use serde_json::json;
use std::ffi::c_int;

/// The format name a saved file starts with, so a foreign file is refused.
const FORMAT: &str = "rkllm-sim prompt cache";

impl SimModel {
    /// `rkllm_load_lora`: the three fields of the `RKLLMLoraAdapter`, `None` for NULL.
    pub fn load_lora(&self, adapter: Option<(Option<String>, Option<String>, f32)>) -> c_int {
        let Some((path, name, scale)) = adapter else {
            self.recorder.write(json!({"call": "load_lora", "adapter": null}));
            log::line("E rkllm: rkllm_load_lora: lora_adapter must not be NULL");
            return -1;
        };
        self.recorder.write(json!({"call": "load_lora", "path": path, "name": name, "scale": scale}));
        if let Err(code) = self.refuse_if_running("rkllm_load_lora") {
            return code;
        }
        let (Some(path), Some(name)) = (path, name.filter(|n| !n.is_empty())) else {
            log::line("E rkllm: rkllm_load_lora: lora_adapter_path and lora_adapter_name must be set");
            return -1;
        };
        if !std::path::Path::new(&path).is_file() {
            log::line(&format!("E rkllm: failed to open lora adapter file: {path}"));
            return -1;
        }
        let mut state = self.state();
        if state.loras.iter().any(|l| l.name == name) {
            log::line(&format!("E rkllm: lora adapter {name} is already loaded"));
            return -1;
        }
        state.loras.push(Lora { name, scale });
        0
    }

    /// A run's adapter: `Ok(None)` for the base model, `Ok(Some)` for a
    /// loaded one, the line to print for any other.
    pub(crate) fn lora(&self, state: &State, infer: &InferOptions) -> Result<Option<Lora>, String> {
        match &infer.lora_adapter {
            None => Ok(None),
            Some(name) => state
                .loras
                .iter()
                .find(|l| l.name == *name)
                .cloned()
                .map(Some)
                .ok_or_else(|| format!("E rkllm: lora adapter {name} is not loaded")),
        }
    }

    pub fn load_prompt_cache(&self, path: Option<String>) -> c_int {
        self.recorder.write(json!({"call": "load_prompt_cache", "path": path}));
        if let Err(code) = self.refuse_if_running("rkllm_load_prompt_cache") {
            return code;
        }
        let Some(path) = path else {
            log::line("E rkllm: rkllm_load_prompt_cache: prompt_cache_path must not be NULL");
            return -1;
        };
        match read_cache(&path) {
            Ok(ids) => {
                // Reading the file takes time by its size.
                let size: usize = ids.iter().map(Vec::len).sum();
                std::thread::sleep(self.scaled(self.config.cache_file_ms * size as f64 / 1000.0));
                // cache_lies: loaded, but it will spare nothing (rknn-llm #399).
                self.state().prompt_cache = (!self.config.cache_lies).then_some(ids);
                0
            }
            Err(why) => {
                log::line(&format!("E rkllm: failed to load prompt cache {path}: {why}"));
                -1
            }
        }
    }

    pub fn release_prompt_cache(&self) -> c_int {
        self.recorder.write(json!({"call": "release_prompt_cache"}));
        if let Err(code) = self.refuse_if_running("rkllm_release_prompt_cache") {
            return code;
        }
        self.state().prompt_cache = None;
        0
    }

    /// `abort_unsaved`: the file a run aborted in its prefill asked for is not there.
    pub(crate) fn unsave_prompt_cache(&self, infer: &InferOptions) {
        if let Some((save, Some(path))) = &infer.prompt_cache {
            if *save != 0 {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// A run's prompt KV (`slots`: each slot's ids) to the file it asked
    /// for, if it asked; the error is the line to print.
    pub(crate) fn save_prompt_cache(&self, slots: &[Vec<u32>], infer: &InferOptions) -> Result<(), String> {
        let Some((save, path)) = &infer.prompt_cache else { return Ok(()) };
        if *save == 0 {
            return Ok(());
        }
        let Some(path) = path else {
            return Err("E rkllm: save_prompt_cache is set but prompt_cache_path is NULL".into());
        };
        let text = match slots {
            [ids] => json!({"format": FORMAT, "ids": ids}),
            _ if !self.config.batch_cache => {
                return Err("E rkllm: saving a prompt cache from a batched run is refused (batch_cache=refuse)".into())
            }
            _ => json!({"format": FORMAT, "slots": slots}),
        };
        std::fs::write(path, text.to_string())
            .map_err(|e| format!("E rkllm: failed to save prompt cache to {path}: {e}"))
    }
}

impl State {
    /// How many of `ids` the loaded prompt cache spares this slot's prefill:
    /// all of the cache's ids (a single run's, or this slot's of a batched
    /// run's) when the slot's KV cache is empty and `ids` starts with them
    /// and goes on past them, else none.
    pub(crate) fn prompt_cache_hit(&self, slot: usize, ids: &[u32]) -> usize {
        let cached = match self.prompt_cache.as_deref() {
            Some([one]) => one,
            Some(slots) => match slots.get(slot) {
                Some(own) => own,
                None => return 0,
            },
            None => return 0,
        };
        if self.kv[slot].is_empty() && !cached.is_empty() && ids.len() > cached.len() && ids.starts_with(cached) {
            cached.len()
        } else {
            0
        }
    }
}

/// What a loaded adapter adds to a reply's seed.
pub(crate) fn lora_salt(lora: Option<&Lora>) -> u64 {
    lora.map_or(0, |l| fnv1a(format!("{}:{}", l.name, l.scale).as_bytes()))
}

/// A file's ids: one prompt, or one per slot of a batched run.
fn read_cache(path: &str) -> Result<Vec<Vec<u32>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|_| "not a prompt cache file".to_owned())?;
    if value["format"] != FORMAT {
        return Err("not a prompt cache file".into());
    }
    let read = match value.get("slots") {
        Some(slots) => serde_json::from_value(slots.clone()),
        None => serde_json::from_value(value["ids"].clone()).map(|ids| vec![ids]),
    };
    read.map_err(|_| "not a prompt cache file".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_spares_only_a_prefix_of_an_empty_slot() {
        let mut state = State { kv: vec![Vec::new()], prompt_cache: Some(vec![vec![1, 2, 3]]), ..State::default() };
        assert_eq!(state.prompt_cache_hit(0, &[1, 2, 3, 4]), 3);
        assert_eq!(state.prompt_cache_hit(0, &[1, 2, 3]), 0, "nothing left to prefill: no reuse");
        assert_eq!(state.prompt_cache_hit(0, &[1, 2, 4, 5]), 0);
        state.kv[0] = vec![9];
        assert_eq!(state.prompt_cache_hit(0, &[1, 2, 3, 4]), 0, "a kept history is not the cache's start");
    }

    #[test]
    fn a_batched_runs_cache_spares_each_slot_its_own_ids() {
        let state = State {
            kv: vec![Vec::new(), Vec::new(), Vec::new()],
            prompt_cache: Some(vec![vec![1, 2], vec![5, 6], vec![]]),
            ..State::default()
        };
        assert_eq!(state.prompt_cache_hit(0, &[1, 2, 3]), 2);
        assert_eq!(state.prompt_cache_hit(1, &[5, 6, 7]), 2);
        assert_eq!(state.prompt_cache_hit(1, &[1, 2, 3]), 0, "another slot's ids");
        assert_eq!(state.prompt_cache_hit(2, &[1, 2, 3]), 0, "a slot that held nothing spares nothing");
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("rkllm-sim-cache-{}", std::process::id()));
        std::fs::write(&dir, "{\"ids\": [1]}").unwrap();
        assert_eq!(read_cache(dir.to_str().unwrap()), Err("not a prompt cache file".into()));
        std::fs::write(&dir, json!({"format": FORMAT, "ids": [4, 5]}).to_string()).unwrap();
        assert_eq!(read_cache(dir.to_str().unwrap()), Ok(vec![vec![4, 5]]));
        std::fs::write(&dir, json!({"format": FORMAT, "slots": [[4], [5, 6]]}).to_string()).unwrap();
        assert_eq!(read_cache(dir.to_str().unwrap()), Ok(vec![vec![4], vec![5, 6]]));
        std::fs::remove_file(&dir).unwrap();
    }
}
