//! The composition root: each layer built from its own narrow settings,
//! taken from the one [`Config`]. Only this module, `server`, `doctor` and
//! `main` read the whole configuration; below them every layer gets plain
//! values.
//!
//! Who builds what: [`load_model`] opens the runtime (`engine`), loads the
//! chat template and tokenizer (`conversation`), then the model (`engine`),
//! and hands the api a [`Loaded`] with the engine and the prompter side by
//! side; [`api_settings`] and [`metrics_settings`] give those layers theirs.

use crate::api::{self, Loaded};
use crate::config::{Backend, Config};
use crate::conversation::{LoadError, PromptSettings, Prompter};
use crate::engine::{
    self, BackendError, BackendKind, Engine, EngineError, EngineSettings, Limits, RuntimeChoice, RuntimeSettings,
};
use crate::metrics;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Prompt(#[from] LoadError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What the prompter needs: where the chat template and tokenizer come
/// from. `kind`: the in-process simulator brings its own tokenizer.json.
pub fn prompt_settings(config: &Config, kind: BackendKind) -> PromptSettings {
    PromptSettings {
        chat_template: config.chat_template.clone(),
        template: config.template,
        tokenizer: config.tokenizer.clone(),
        runtime_tokenizer: (kind == BackendKind::Sim).then(rkllm_sim::tokenizer_json),
    }
}

pub fn runtime_settings(config: &Config) -> RuntimeSettings {
    RuntimeSettings {
        choice: match config.backend {
            Backend::Auto => RuntimeChoice::Auto,
            Backend::Rkllm => RuntimeChoice::Rkllm,
            Backend::Sim => RuntimeChoice::Sim,
        },
        lib: config.lib.clone(),
        abi: config.runtime_abi(),
        model: config.model.clone(),
    }
}

pub fn limits(config: &Config) -> Limits {
    Limits {
        max_new_tokens: config.max_new_tokens,
        first_token_base: Duration::from_secs(config.first_token_timeout_secs),
        first_token_per_kib: Duration::from_millis(config.first_token_timeout_ms_per_kib),
        request_timeout: Duration::from_secs(config.request_timeout_secs),
        max_context_len: config.max_context_len,
    }
}

/// `prompter`: what the model's prompts are rendered and tokenized with.
pub fn engine_settings(config: &Config, model_path: String, prompter: &Prompter) -> EngineSettings {
    EngineSettings {
        model_path,
        limits: limits(config),
        queue_depth: config.queue_depth,
        batch: config.batch,
        base_domain_id: config.base_domain_id,
        sampling: config.sampling,
        disable_runtime_template: prompter.renders(),
        // Token input needs our own template and tokenizer: the runtime's
        // template is not applied to token ids. Batched runs keep no history.
        conversation_cache: config.conversation_cache
            && prompter.renders()
            && prompter.has_tokenizer()
            && config.batch == 1,
    }
}

pub fn metrics_settings(config: &Config) -> metrics::Settings {
    metrics::Settings { telemetry_root: config.telemetry_root.clone(), timings_log: config.timings_log.clone() }
}

pub fn api_settings(config: &Config) -> api::Settings {
    api::Settings {
        api_key: config.api_key.clone(),
        cors_origins: config.cors_origins.clone(),
        body_limit_bytes: config.body_limit_bytes,
        keepalive: Duration::from_secs(config.keepalive_secs),
        reasoning: config.reasoning,
        metrics_on_main_listener: config.metrics_addr.is_none(),
        max_new_tokens: config.max_new_tokens,
    }
}

pub fn listener_settings(config: &Config) -> crate::listener::Settings {
    crate::listener::Settings {
        header_read_timeout: Duration::from_secs(config.header_read_timeout_secs),
        body_idle_timeout: Duration::from_secs(config.body_idle_timeout_secs),
        max_connections: config.max_connections,
    }
}

/// The id the model is served as: configured, or `sim-PROFILE`, or the file's stem.
pub fn model_id(configured: Option<&str>, model_path: &str) -> String {
    if let Some(id) = configured {
        return id.to_owned();
    }
    if let Some(spec) = model_path.strip_prefix("sim:") {
        let profile = spec.split('?').next().unwrap_or_default();
        return format!("sim-{profile}");
    }
    std::path::Path::new(model_path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "model".into())
}

/// Opens the runtime, loads the prompter and then the model; blocks for as
/// long as `rkllm_init` takes. `on_fallback` receives the reason when `auto`
/// falls back to the simulator.
pub fn load_model(config: &Config, on_fallback: impl FnOnce(&str)) -> Result<Loaded, AppError> {
    let runtime = engine::open_runtime(&runtime_settings(config))?;
    if let Some(why) = &runtime.fallback {
        on_fallback(why);
    }
    let model_path = engine::model_path(config.model.as_deref(), &config.sim_profile, runtime.kind)?;
    // Before the (slow) model load, so a bad template fails fast.
    let prompter = Prompter::load(&prompt_settings(config, runtime.kind), &model_path)?;
    prompter.log_choice();
    let model_id = model_id(config.model_id.as_deref(), &model_path);
    let created = model_created(&model_path);
    let settings = engine_settings(config, model_path, &prompter);
    if config.conversation_cache && !settings.conversation_cache {
        if config.batch > 1 {
            tracing::info!(batch = config.batch, "conversation cache off: batched runs keep no history");
        } else {
            tracing::info!("conversation cache off: it needs the model's chat template and tokenizer.json");
        }
    }
    let engine = Engine::load(runtime, settings)?;
    Ok(Loaded { engine: Arc::new(engine), prompter: Arc::new(prompter), model_id, created })
}

/// The model file's mtime; for a simulated spec, now.
fn model_created(model_path: &str) -> u64 {
    std::fs::metadata(model_path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .unwrap_or_else(api::unix_now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids() {
        assert_eq!(model_id(None, "sim:qwen2.5-1.5b?time_scale=0.1"), "sim-qwen2.5-1.5b");
        assert_eq!(model_id(None, "/models/Qwen3-1.7B_w8a8.rkllm"), "Qwen3-1.7B_w8a8");
        assert_eq!(model_id(Some("mine"), "/x/y.rkllm"), "mine");
    }
}
