//! What can go wrong driving a handle: shared by the model's thread, its
//! load calls (`adapters.rs`) and batched runs.

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model path contains a NUL byte")]
    BadPath,
    #[error("rkllm_init failed with code {code}{}", log_suffix(.log))]
    Init { code: i32, log: String },
    #[error("the runtime thread has stopped")]
    ThreadGone,
    #[error("{call} returned {code}")]
    Call { call: &'static str, code: i32 },
    /// A load call failed; `log` is what the runtime printed during it.
    #[error("{call} failed with code {code}{}", log_suffix(.log))]
    Said { call: &'static str, code: i32, log: String },
    #[error("text for {0} contains a NUL byte")]
    Nul(&'static str),
    #[error("a batched run needs exactly n_batch = {n_batch} inputs and channels, got {given}")]
    BatchSize { given: usize, n_batch: u8 },
}

fn log_suffix(log: &str) -> String {
    if log.trim().is_empty() {
        String::new()
    } else {
        format!("; runtime said: {}", log.trim())
    }
}
