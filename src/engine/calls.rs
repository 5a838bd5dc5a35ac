//! How the engine's parts call the runtime thread (a handle call's answer,
//! awaited or waited for) and take their record locks.

/// Takes one of the engine's record locks, also one a panic poisoned: what
/// the records hold is checked against the runtime after every run anyway.
pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The runtime thread's answer to a handle call, awaited: the runtime's
/// error, or the thread's absence, as words for a log line.
pub(super) async fn answered<T>(
    answer: tokio::sync::oneshot::Receiver<Result<T, rkllm_sys::ModelError>>,
) -> Result<T, String> {
    match answer.await {
        Ok(answer) => answer.map_err(|e| e.to_string()),
        Err(_) => Err("the runtime thread is gone".into()),
    }
}

/// The runtime thread's answer to a handle call, waited for on a blocking
/// thread (a model load); a thread that went away is `ThreadGone`.
pub(super) fn wait_for<T>(
    answer: tokio::sync::oneshot::Receiver<Result<T, rkllm_sys::ModelError>>,
) -> Result<T, rkllm_sys::ModelError> {
    answer.blocking_recv().unwrap_or(Err(rkllm_sys::ModelError::ThreadGone))
}
