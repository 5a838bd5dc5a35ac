//! Prompt-cache files: the KV cache of a fixed prefix (e.g. a long system
//! prompt), saved once by the runtime and loaded at every model load, so a
//! prompt that starts with the prefix does not prefill it again — also the
//! first request after a restart.
//!
//! At load: if the file exists and its sidecar (`FILE.json`) says it was
//! made from this very prefix and model file, `rkllm_load_prompt_cache`;
//! otherwise a run of the prefix with `save_prompt_cache = 1` makes it
//! (and the sidecar), then it is loaded. A changed prefix or model file is
//! never silently reused.
//!
//! How the runtime uses a loaded cache is barely documented ("matches the
//! input against the cache from the start"), so nothing is assumed: after
//! every run, the tokens the runtime did not prefill are derived from its
//! own `perf.prefill_tokens` against the prompt's count, and a number that
//! is not the prefix's (for a prompt that starts with it) or not 0 (for one
//! that does not) is a WARN and `rkllmd_prompt_cache_mismatch`.
//!
//! Runs are stateless on a model with a prompt cache: the conversation
//! cache is off (`registry/load.rs`), because whether `rkllm_clear_kv_cache`
//! and `keep_history` keep or drop a loaded prompt cache is not documented.

use super::calls::wait_for;
use super::error::EngineError;
use super::plan::RunPlan;
use crate::metrics::RuntimePerf;
use rkllm_sys::{Abi, Event, Finish, Model, RunInput, RunRequest};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where a model's prompt cache comes from (the composition root fills it in).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptCacheSettings {
    /// The runtime's cache file.
    pub file: PathBuf,
    pub prefix: Prefix,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Prefix {
    Text(String),
    /// Read at each load.
    File(PathBuf),
}

/// The loaded prompt cache.
#[derive(Debug)]
pub(super) struct PromptCache {
    prefix: String,
    /// The prefix's tokens by the runtime's count (the saving run's
    /// `perf.prefill_tokens`): what a prompt starting with it should skip.
    tokens: u32,
}

/// What is known before a run about its use of the prompt cache.
#[derive(Debug, Clone, Copy)]
pub(super) struct Expect {
    starts_with_prefix: bool,
    prefix_tokens: u32,
}

/// What the sidecar records of the file it sits beside.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Sidecar {
    prefix: String,
    /// The runtime that wrote the file (version and library): the file's
    /// format is the runtime's own, and an upgrade may change it.
    runtime: String,
    model_path: String,
    model_size: u64,
    model_modified: u64,
    prefix_tokens: u32,
}

fn sidecar_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".json");
    PathBuf::from(name)
}

fn failed(file: &Path, why: impl std::fmt::Display) -> EngineError {
    EngineError::PromptCache(format!("prompt cache {}: {why}", file.display()))
}

impl Sidecar {
    fn describe(runtime: &str, model_path: &str, prefix: &str, prefix_tokens: u32) -> Sidecar {
        let meta = std::fs::metadata(model_path).ok();
        let modified = meta
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        Sidecar {
            prefix: prefix.to_owned(),
            runtime: runtime.to_owned(),
            model_path: model_path.to_owned(),
            model_size: meta.map_or(0, |m| m.len()),
            model_modified: modified,
            prefix_tokens,
        }
    }

    /// The prefix's token count if the file may be reused, else why not.
    fn reusable(file: &Path, runtime: &str, model_path: &str, prefix: &str) -> Result<u32, &'static str> {
        if !file.is_file() {
            return Err("there is no file yet");
        }
        let text = std::fs::read_to_string(sidecar_path(file)).map_err(|_| "there is no record of what it holds")?;
        let seen: Sidecar = serde_json::from_str(&text).map_err(|_| "its record is unreadable")?;
        if seen.prefix != prefix {
            return Err("the prefix changed since it was made");
        }
        if seen.runtime != runtime {
            return Err("another runtime made it");
        }
        if seen != Sidecar::describe(runtime, model_path, prefix, seen.prefix_tokens) {
            return Err("it was made for another model file");
        }
        Ok(seen.prefix_tokens)
    }
}

impl PromptCache {
    /// Makes the file if it is missing or stale, then loads it; blocks (call
    /// on a blocking thread, like the model's load). Any failure fails the
    /// model's load with the reason (the runtime's words where it gave any).
    pub(super) fn prepare(
        model: &Model,
        settings: &PromptCacheSettings,
        runtime: &str,
        model_path: &str,
    ) -> Result<Self, EngineError> {
        let file = &settings.file;
        let prefix = match &settings.prefix {
            Prefix::Text(text) => text.clone(),
            Prefix::File(path) => std::fs::read_to_string(path)
                .map_err(|e| failed(file, format!("cannot read the prefix file {}: {e}", path.display())))?,
        };
        if prefix.is_empty() {
            return Err(failed(file, "the prefix is empty"));
        }
        let file_text = file.to_str().ok_or_else(|| failed(file, "the path is not UTF-8"))?;
        let tokens = match Sidecar::reusable(file, runtime, model_path, &prefix) {
            Ok(tokens) => {
                tracing::info!(file = %file.display(), prefix_tokens = tokens, "prompt cache file reused");
                tokens
            }
            Err(why) => {
                tracing::info!(file = %file.display(), reason = why, "making the prompt cache file");
                let tokens = save(model, file, &prefix)?;
                let sidecar = serde_json::to_string_pretty(&Sidecar::describe(runtime, model_path, &prefix, tokens))
                    .map_err(|e| failed(file, e))?;
                std::fs::write(sidecar_path(file), sidecar)
                    .map_err(|e| failed(file, format!("writing its record: {e}")))?;
                tokens
            }
        };
        wait_for(model.load_prompt_cache(file_text)).map_err(|e| failed(file, e))?;
        Ok(PromptCache { prefix, tokens })
    }

    pub(super) fn expect(&self, prompt: &str) -> Expect {
        Expect { starts_with_prefix: prompt.starts_with(&self.prefix), prefix_tokens: self.tokens }
    }
}

/// A run of the prefix alone that saves its KV cache to `file`; returns the
/// prefix's token count by the runtime. One token is generated (on ABI 1.2,
/// which has no per-run limit, the run is aborted at its first token).
fn save(model: &Model, file: &Path, prefix: &str) -> Result<u32, EngineError> {
    // A stale file must not pass for the new one if the runtime writes none.
    for stale in [file.to_path_buf(), sidecar_path(file)] {
        match std::fs::remove_file(&stale) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(&stale, format!("cannot replace it: {e}"))),
        }
    }
    let (request, aborts_at_first) = saving_request(model.abi(), RunInput::Prompt(prefix.to_owned()), None, file);
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let control = model.submit(request, tx)?;
    let finish = loop {
        match events.blocking_recv() {
            Some(Event::Token(_)) if aborts_at_first => control.abort(),
            Some(Event::Finished(finish)) => break finish,
            Some(_) => {}
            None => return Err(rkllm_sys::ModelError::ThreadGone.into()),
        }
    };
    saved_tokens(&finish, file).map_err(|why| failed(file, why))
}

/// A stateless run of `input` alone (with the adapter `lora`) that saves
/// its KV cache to `file` and generates one token; `true`: the ABI takes no
/// per-run limit (1.2), so the caller aborts it at its first token.
pub(super) fn saving_request(abi: Abi, input: RunInput, lora: Option<String>, file: &Path) -> (RunRequest, bool) {
    let plan = RunPlan::plain(abi, "", 1);
    let request =
        RunRequest { save_prompt_cache: Some(file.to_string_lossy().into_owned()), lora, ..plan.request(input, false) };
    (request, plan.aborts_at_limit())
}

/// What a saving run's end says: the tokens the file holds by the
/// runtime's own count, or why it cannot be used.
pub(super) fn saved_tokens(finish: &Finish, file: &Path) -> Result<u32, String> {
    if finish.is_error() {
        return Err(format!("the run that saves it failed (rkllm_run returned {})", finish.code));
    }
    if !file.is_file() {
        return Err("the runtime wrote no file (save_prompt_cache = 1)".into());
    }
    let tokens = finish.perf.map(|p| p.prefill_tokens).filter(|&n| n > 0);
    let tokens = tokens.ok_or("the saving run reported no prefilled tokens")?;
    Ok(u32::try_from(tokens).unwrap_or(u32::MAX))
}

/// The prompt tokens a run did not prefill thanks to the prompt cache,
/// derived from the runtime's own count: `None` when the model has no
/// prompt cache or the count cannot be derived (no tokenizer, no perf).
/// A number other than the expected one is a WARN and a counted mismatch.
pub(super) fn reused(expect: Option<Expect>, prompt_tokens: Option<u32>, perf: Option<&RuntimePerf>) -> Option<u32> {
    let expect = expect?;
    let (Some(prompt), Some(perf)) = (prompt_tokens, perf) else {
        tracing::debug!("whether the prompt cache was used is unknown: no prompt token count or no perf");
        return None;
    };
    let skipped = i64::from(prompt).saturating_sub(perf.prefill_tokens).max(0);
    let skipped = u32::try_from(skipped).unwrap_or(u32::MAX);
    let expected = if expect.starts_with_prefix { expect.prefix_tokens } else { 0 };
    if skipped != expected {
        tracing::warn!(
            prompt_tokens = prompt,
            prefilled = perf.prefill_tokens,
            skipped,
            expected,
            starts_with_prefix = expect.starts_with_prefix,
            "the runtime's prefill does not match the prompt cache: the prompt-cache figures are the runtime's, not the expected ones"
        );
        crate::metrics::observer().metrics.prompt_cache_mismatch();
    }
    Some(skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    const RT: &str = "1.3.0 /usr/lib/librkllmrt.so";

    fn perf(prefill_tokens: i64) -> RuntimePerf {
        RuntimePerf {
            prefill_time_ms: 1.0,
            prefill_tokens,
            generate_time_ms: 1.0,
            generate_tokens: 1,
            memory_usage_mb: 0.0,
            batch_size: 1,
        }
    }

    #[test]
    fn reuse_is_derived_from_the_runtimes_prefill_count() {
        let hit = Some(Expect { starts_with_prefix: true, prefix_tokens: 40 });
        assert_eq!(reused(hit, Some(50), Some(&perf(10))), Some(40));
        assert_eq!(reused(hit, Some(50), Some(&perf(50))), Some(0), "not used: shown as 0, not as expected");
        assert_eq!(reused(hit, None, Some(&perf(10))), None, "no tokenizer: unknown");
        assert_eq!(reused(None, Some(50), Some(&perf(10))), None, "no prompt cache");
        let miss = Some(Expect { starts_with_prefix: false, prefix_tokens: 40 });
        assert_eq!(reused(miss, Some(50), Some(&perf(50))), Some(0));
        assert_eq!(reused(miss, Some(50), Some(&perf(60))), Some(0), "more prefilled than counted is no reuse");
    }

    #[test]
    fn a_changed_prefix_or_model_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.cache");
        let model = dir.path().join("m.rkllm");
        std::fs::write(&model, "model").unwrap();
        let model = model.to_str().unwrap();
        assert_eq!(Sidecar::reusable(&file, RT, model, "sys"), Err("there is no file yet"));
        std::fs::write(&file, "kv").unwrap();
        assert_eq!(Sidecar::reusable(&file, RT, model, "sys"), Err("there is no record of what it holds"));
        let record = serde_json::to_string(&Sidecar::describe(RT, model, "sys", 7)).unwrap();
        std::fs::write(sidecar_path(&file), record).unwrap();
        assert_eq!(Sidecar::reusable(&file, RT, model, "sys"), Ok(7));
        assert_eq!(
            Sidecar::reusable(&file, "1.3.1 /usr/lib/librkllmrt.so", model, "sys"),
            Err("another runtime made it")
        );
        assert_eq!(Sidecar::reusable(&file, RT, model, "sys2"), Err("the prefix changed since it was made"));
        assert_eq!(Sidecar::reusable(&file, RT, "sim:other", "sys"), Err("it was made for another model file"));
    }
}
