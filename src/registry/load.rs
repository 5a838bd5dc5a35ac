//! Loading one model: the runtime (`engine`), the chat template and
//! tokenizer (`conversation`), then the model itself (`engine`).

use super::{Loaded, ModelSpec};
use crate::conversation::{LoadError, Prompter};
use crate::engine::{BackendError, BackendKind, Engine, EngineError, EngineSettings, OpenedRuntime, RuntimeSettings};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum LoadFailure {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Prompt(#[from] LoadError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Blocks for as long as `rkllm_init` takes, on the runtime `open` gives
/// for the spec's runtime settings.
pub fn load(
    spec: &ModelSpec,
    open: impl FnOnce(&RuntimeSettings) -> Result<OpenedRuntime, BackendError>,
) -> Result<Loaded, LoadFailure> {
    let runtime = open(&spec.runtime)?;
    // The implicit `sim:PROFILE` model (no model configured) is no model for a real runtime.
    if spec.runtime.model.is_none() && runtime.kind == BackendKind::Rkllm {
        return Err(BackendError::NoModel.into());
    }
    // Before the (slow) model load, so a bad template fails fast.
    let prompter = Prompter::load(&spec.prompt, &spec.path)?;
    let (template, tokenizer) = prompter.describe();
    tracing::info!(model = %spec.id, %template, %tokenizer, "prompt rendering");
    if !prompter.renders() {
        tracing::warn!(
            model = %spec.id,
            "no chat template found: requests are limited to one user message; set `template` or `chat_template`"
        );
    }
    let settings = EngineSettings {
        model_path: spec.path.clone(),
        disable_runtime_template: prompter.renders(),
        ..spec.engine.clone()
    };
    let engine = Engine::load(runtime, settings)?;
    Ok(Loaded {
        engine: Arc::new(engine),
        prompter: Arc::new(prompter),
        model_id: spec.id.clone(),
        created: spec.modified,
    })
}
