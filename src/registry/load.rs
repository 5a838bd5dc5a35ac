//! Loading one model: the runtime (`engine`), the chat template and
//! tokenizer (`conversation`), then the model itself (`engine`).

use super::{Loaded, ModelSpec};
use crate::conversation::{LoadError, PromptSettings, Prompter};
use crate::engine::{
    AutoBatch, BackendError, BackendKind, DiskTier, Engine, EngineError, EngineSettings, OpenedRuntime,
    RuntimeSettings, SavedSettings,
};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum LoadFailure {
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// No runtime to load with, and no file to load either: both are said,
    /// or fixing the library would only uncover the second problem.
    #[error("{source}; the model file {model} does not exist either")]
    NothingToLoad { source: BackendError, model: String },
    #[error(transparent)]
    Prompt(#[from] LoadError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("{0}")]
    PromptCache(String),
    /// `usage.prompt_tokens` must be a number, and the runtime counts only
    /// a whole batch's prefill: each request's count is the daemon's own.
    #[error(
        "batch = {0} needs the model's tokenizer.json: the runtime counts the prompt tokens of a whole batch, not each request's (usage.prompt_tokens)"
    )]
    BatchWithoutTokenizer(u8),
}

impl LoadFailure {
    /// Why the load left the runtime stuck, when it did (`registry/mod.rs`).
    pub fn wedged(&self) -> Option<String> {
        matches!(self, LoadFailure::Engine(EngineError::ProbeWedged { .. })).then(|| self.to_string())
    }
}

/// Why `batch = "auto"` gives a model without a tokenizer 1 slot.
pub const AUTO_WITHOUT_TOKENIZER: &str =
    "no tokenizer.json: each request's usage.prompt_tokens in a batch is the daemon's count";

/// Blocks for as long as `rkllm_init` takes, on the runtime `open` gives
/// for the spec's runtime settings.
pub fn load(
    spec: &ModelSpec,
    open: impl FnOnce(&RuntimeSettings) -> Result<OpenedRuntime, BackendError>,
) -> Result<Loaded, LoadFailure> {
    let runtime = open(&spec.runtime).map_err(|source| match spec.runtime.model.as_deref() {
        Some(model) if !model.starts_with("sim:") && !std::path::Path::new(model).exists() => {
            LoadFailure::NothingToLoad { source, model: model.to_owned() }
        }
        _ => LoadFailure::Backend(source),
    })?;
    // The implicit `sim:PROFILE` model (no model configured) is no model for a real runtime.
    if spec.runtime.model.is_none() && runtime.kind == BackendKind::Rkllm {
        return Err(BackendError::NoModel.into());
    }
    // Before the (slow) model load, so a bad template fails fast.
    let prompt = PromptSettings { runtime_tokenizer: runtime.tokenizer, ..spec.prompt.clone() };
    let prompter = Prompter::load(&prompt, &spec.path)?;
    prompter.log_choice();
    // Token input needs our own template and tokenizer: the runtime's
    // template is not applied to token ids.
    let prompt_cache = spec.engine.prompt_cache.is_some();
    if prompt_cache && !(prompter.renders() && prompter.has_tokenizer()) {
        // The file is made from the prefix as the daemon renders it, and
        // whether a run used it is read from our token count against the
        // runtime's prefill: with the runtime's own template, or without a
        // tokenizer, neither holds.
        return Err(LoadFailure::PromptCache(
            "a prompt cache needs the model's chat template rendered by the daemon and its tokenizer.json".into(),
        ));
    }
    if spec.engine.schedule.batch > 1 && !prompter.has_tokenizer() {
        return Err(LoadFailure::BatchWithoutTokenizer(spec.engine.schedule.batch));
    }
    // `batch = "auto"` without a tokenizer: one slot (the reason above).
    let auto_batch = spec.engine.auto_batch.clone().map(|auto| match prompter.has_tokenizer() {
        true => auto,
        false => AutoBatch { single: Some(AUTO_WITHOUT_TOKENIZER.into()), ..auto },
    });
    let conversation_cache =
        spec.engine.conversation_cache && prompter.renders() && prompter.has_tokenizer() && !prompt_cache;
    if spec.engine.conversation_cache && !conversation_cache {
        if prompt_cache {
            // Whether clearing or keeping the KV cache keeps a loaded prompt cache is undocumented.
            tracing::info!(model = %spec.id, "conversation cache off: the model has a prompt-cache file (engine/prompt_cache.rs)");
        } else {
            tracing::info!(model = %spec.id, "conversation cache off: it needs the model's chat template and tokenizer.json");
        }
    }
    // Each load saves conversations in a directory of its own: a model
    // reloaded while its last load's directory is being removed, or two
    // engines of one id in one process (in-process tests), never share files.
    // The pid comes first: the start-up sweep reads it.
    static LOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let saved = spec.engine.saved.clone().map(|s| {
        let name: String =
            spec.id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
        let load = LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let own = format!("rkllmd-{}-{load}-{name}", std::process::id());
        let disk = s.disk.map(|d| DiskTier { dir: d.dir.join(&own), ..d });
        SavedSettings { dir: s.dir.join(&own), disk, ..s }
    });
    let settings = EngineSettings {
        model_path: spec.path.clone(),
        disable_runtime_template: prompter.renders(),
        conversation_cache,
        saved,
        auto_batch,
        ..spec.engine.clone()
    };
    let engine = Engine::load(runtime, settings)?;
    if let Some(vocab) = prompter.vocab_size() {
        // One file per spec: every load of it reads the same vocabulary.
        let _ = spec.learned.vocab.set(vocab);
    }
    Ok(Loaded {
        engine: Arc::new(engine),
        prompter: Arc::new(prompter),
        model_id: spec.id.clone(),
        created: spec.modified,
        embed: spec.embed,
        learned: spec.learned.clone(),
    })
}

/// The one `model loaded` line of a load (at start or on demand): what runs it and with which limits.
pub fn log_loaded(loaded: &Loaded, took: std::time::Duration) {
    let (info, limits, s) = (loaded.engine.info(), loaded.engine.limits(), loaded.engine.sampling_defaults());
    tracing::info!(
        model = %loaded.model_id,
        load_ms = took.as_millis() as u64,
        backend = info.backend.as_str(),
        runtime = info.version.as_deref().unwrap_or("unknown"),
        abi = %info.abi,
        library = %info.origin,
        path = %info.model_path,
        max_context_len = limits.max_context_len,
        max_new_tokens = limits.max_new_tokens,
        batch = info.batch.slots,
        batch_chosen_by = info.batch.chosen_by.as_str(),
        batch_reason = %info.batch.reason,
        sampling = crate::sampling::named(&s).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
        "model loaded"
    );
}
