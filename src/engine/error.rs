//! How the engine fails to load a model or take a job; the api maps each
//! to its status (`api/status.rs`).

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the request queue is full")]
    QueueFull,
    /// An aborted run has not returned ([`halt`]): nothing can run until it does.
    #[error("the runtime did not return from an aborted run")]
    Unresponsive,
    // The registry says which model's load failed (`RegistryError::Load`).
    #[error(transparent)]
    Model(#[from] rkllm_sys::ModelError),
    #[error("loading the LoRA adapter `{name}` failed: {source}")]
    Adapter { name: String, source: rkllm_sys::ModelError },
    #[error("{0}")]
    PromptCache(String),
    #[error("{0}")]
    Vision(String),
    /// The runtime did not return from a probe's run at load
    /// (`short_batch.rs`, `batch_files.rs`): its thread is lost.
    #[error("the runtime did not come back from the {probe} probe: {why}")]
    ProbeWedged { probe: &'static str, why: String },
}
