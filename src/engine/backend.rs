//! Choosing the runtime (real library or simulator) and the model to load.

use crate::config::{Backend, Config};
use rkllm_sys::{find_library, Abi, Runtime};
use std::sync::Arc;

/// Which kind of runtime is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Rkllm,
    Sim,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Rkllm => "rkllm",
            BackendKind::Sim => "sim",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Load(#[from] rkllm_sys::LoadError),
    #[error("no model configured: pass --model /path/to/model.rkllm (or set model in the config file)")]
    NoModel,
}

/// Opens the runtime the configuration asks for. With `auto`, a library that
/// is missing or fails to load falls back to the simulator, and `fallback`
/// says why (the caller logs it as a warning) — unless a real model file is
/// configured: then the loader's error is returned.
pub fn open(config: &Config) -> Result<(Arc<Runtime>, BackendKind, Option<String>), BackendError> {
    match config.backend {
        Backend::Sim => Ok((sim(config), BackendKind::Sim, None)),
        Backend::Rkllm => Ok((Arc::new(real(config)?), BackendKind::Rkllm, None)),
        Backend::Auto => match real(config) {
            Ok(runtime) => Ok((Arc::new(runtime), BackendKind::Rkllm, None)),
            // A real model file must never be "served" by the simulator.
            Err(why) if config.model.as_deref().is_some_and(|m| !m.starts_with("sim:")) => Err(why.into()),
            Err(why) => Ok((sim(config), BackendKind::Sim, Some(why.to_string()))),
        },
    }
}

fn real(config: &Config) -> Result<Runtime, rkllm_sys::LoadError> {
    let path = find_library(config.lib.as_deref())?;
    Runtime::load(&path, config.runtime_abi())
}

fn sim(config: &Config) -> Arc<Runtime> {
    // The simulator speaks either ABI; `runtime_abi` picks which (1.3 by default).
    Arc::new(rkllm_sim::runtime(config.runtime_abi().unwrap_or(Abi::V1_3)))
}

/// The `model_path` given to `rkllm_init`.
pub fn model_path(config: &Config, kind: BackendKind) -> Result<String, BackendError> {
    match (&config.model, kind) {
        (Some(model), _) => Ok(model.clone()),
        (None, BackendKind::Sim) => Ok(format!("sim:{}", config.sim_profile)),
        (None, BackendKind::Rkllm) => Err(BackendError::NoModel),
    }
}

/// The id the model is served as: configured, or `sim-PROFILE`, or the file's stem.
pub fn model_id(config: &Config, model_path: &str) -> String {
    if let Some(id) = &config.model_id {
        return id.clone();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids() {
        let c = Config::default();
        assert_eq!(model_id(&c, "sim:qwen2.5-1.5b?time_scale=0.1"), "sim-qwen2.5-1.5b");
        assert_eq!(model_id(&c, "/models/Qwen3-1.7B_w8a8.rkllm"), "Qwen3-1.7B_w8a8");
        let c = Config { model_id: Some("mine".into()), ..Config::default() };
        assert_eq!(model_id(&c, "/x/y.rkllm"), "mine");
    }

    #[test]
    fn sim_without_model_serves_the_profile_and_real_needs_a_model() {
        let c = Config::default();
        assert_eq!(model_path(&c, BackendKind::Sim).unwrap(), "sim:qwen2.5-1.5b");
        assert!(matches!(model_path(&c, BackendKind::Rkllm), Err(BackendError::NoModel)));
    }
}
