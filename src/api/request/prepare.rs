//! Where a request's preparation runs: rendering and tokenizing its prompt
//! and decoding its images — the one step of a request whose cost grows
//! with its size — on the blocking pool, as many at once as the machine has
//! cores.
//!
//! The daemon serves on one async thread, so that a streamed token wakes one
//! thread (`main.rs`); a long prompt prepared on it would hold up every
//! other stream's tokens meanwhile. Unbounded, a burst of requests started a
//! pool thread for each (64 streams: up to 64 threads), each with its own
//! malloc arena keeping what its preparation used, while the work is CPU
//! time that more threads than cores only share (docs/performance.md,
//! "Memory: preparations at one a core"). The gate is fair: preparations start
//! in the order they asked.

use crate::api::error::ApiError;
use crate::registry::{Lease, Loaded};
use std::cell::RefCell;
use std::sync::{Arc, LazyLock};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One place per core.
static GATE: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get()))));

thread_local! {
    /// The place of the preparation running on this pool thread.
    static PLACE: RefCell<Option<OwnedSemaphorePermit>> = const { RefCell::new(None) };
}

/// Runs `work` on the blocking pool once a place is free.
pub async fn prepare<T: Send + 'static>(
    model: &Lease,
    work: impl FnOnce(&Loaded) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let model = model.shared();
    let place = Arc::clone(&GATE).acquire_owned().await.expect("the gate is never closed");
    let run = move || {
        PLACE.with_borrow_mut(|p| *p = Some(place));
        let _given_back = GiveBack;
        work(&model)
    };
    match tokio::task::spawn_blocking(run).await {
        Ok(prepared) => prepared,
        Err(e) => Err(ApiError::runtime(format!("preparing the request failed: {e}"))),
    }
}

/// Frees this thread's place however its preparation ends, a panic
/// included (the pool thread lives on, and would keep it).
struct GiveBack;

impl Drop for GiveBack {
    fn drop(&mut self) {
        PLACE.with_borrow_mut(Option::take);
    }
}

/// Waits for `future` (an image URL's fetch) from inside a preparation,
/// giving its place to the next one meanwhile: a slow server would
/// otherwise hold a core's place while using none of it, and text requests
/// would wait behind it. The place is taken again, in turn, after.
pub fn off_the_gate<T>(future: impl std::future::Future<Output = T>) -> T {
    let runtime = tokio::runtime::Handle::current();
    // Dropped here: the place is free while the future runs.
    let held = PLACE.with_borrow_mut(Option::take).is_some();
    let out = runtime.block_on(future);
    if held {
        let place = runtime.block_on(Arc::clone(&GATE).acquire_owned()).expect("the gate is never closed");
        PLACE.with_borrow_mut(|p| *p = Some(place));
    }
    out
}
