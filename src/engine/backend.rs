//! Choosing the runtime (real library or simulator).

use rkllm_sys::{find_library, Abi, Runtime};
use std::path::PathBuf;
use std::sync::Arc;

/// Which runtime to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// The real runtime if a library is found and loads, else the simulated one.
    Auto,
    /// The real runtime or fail.
    Rkllm,
    /// The simulated runtime.
    Sim,
}

/// Where the runtime comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeSettings {
    pub choice: RuntimeChoice,
    /// `librkllmrt.so` (default: `RKLLM_LIB`, then the usual directories).
    pub lib: Option<PathBuf>,
    /// Only for libraries without a version marker (and the simulator's ABI).
    pub abi: Option<Abi>,
    /// The configured model: a real file must never be served by the simulator.
    pub model: Option<String>,
}

/// Which kind of runtime is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// An opened runtime, ready for [`super::state::Engine::load`]; clones share the library.
#[derive(Clone)]
pub struct OpenedRuntime {
    pub runtime: Arc<Runtime>,
    pub kind: BackendKind,
    /// Why `auto` fell back to the simulator (the caller logs it as a warning).
    pub fallback: Option<String>,
    /// The runtime's own tokenizer, when it brings one (the simulator).
    pub tokenizer: Option<&'static tokenizers::Tokenizer>,
}

/// The tokenizer a runtime of this kind brings: the in-process simulator's,
/// shared as it runs it (a real library's tokenizer lives inside each model
/// file).
pub fn runtime_tokenizer(kind: BackendKind) -> Option<&'static tokenizers::Tokenizer> {
    (kind == BackendKind::Sim).then(rkllm_sim::tokenizer)
}

/// [`runtime_tokenizer`]'s `tokenizer.json` text, for `rkllmd tokenizer`.
pub fn runtime_tokenizer_json(kind: BackendKind) -> Option<String> {
    (kind == BackendKind::Sim).then(rkllm_sim::tokenizer_json)
}

/// Opens the runtime the settings ask for. With `auto`, a library that is
/// missing or fails to load falls back to the simulator, unless a real model
/// file is configured: then the loader's error is returned.
pub fn open_runtime(settings: &RuntimeSettings) -> Result<OpenedRuntime, BackendError> {
    let opened =
        |runtime, kind, fallback| OpenedRuntime { runtime, kind, fallback, tokenizer: runtime_tokenizer(kind) };
    match settings.choice {
        RuntimeChoice::Sim => Ok(opened(sim(settings), BackendKind::Sim, None)),
        RuntimeChoice::Rkllm => Ok(opened(Arc::new(real(settings)?), BackendKind::Rkllm, None)),
        RuntimeChoice::Auto => match real(settings) {
            Ok(runtime) => Ok(opened(Arc::new(runtime), BackendKind::Rkllm, None)),
            // A real model file must never be "served" by the simulator.
            Err(why) if settings.model.as_deref().is_some_and(|m| !m.starts_with("sim:")) => Err(why.into()),
            Err(why) => Ok(opened(sim(settings), BackendKind::Sim, Some(why.to_string()))),
        },
    }
}

fn real(settings: &RuntimeSettings) -> Result<Runtime, rkllm_sys::LoadError> {
    let path = find_library(settings.lib.as_deref())?;
    Runtime::load(&path, settings.abi)
}

fn sim(settings: &RuntimeSettings) -> Arc<Runtime> {
    // The simulator speaks either ABI; `abi` picks which (1.3 by default).
    Arc::new(rkllm_sim::runtime(settings.abi.unwrap_or(Abi::V1_3)))
}
