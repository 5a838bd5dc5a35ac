//! The NPU is one device: every model's runs take turns on it.
//!
//! Each engine's queue hands out one run at a time for its model; before
//! that run reaches its runtime thread it also takes the one shared
//! [`Npu`] turn. tokio's semaphore is fair (first come, first served), and a
//! model has at most one run waiting here (the one its own queue let
//! through), so models alternate run by run: a model with a long queue
//! cannot starve another. Measured on the simulator only; running two
//! models' generations at once is not done until a board shows it helps.

use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The shared NPU turn; clones are the same turn.
#[derive(Debug, Clone)]
pub struct Npu(Arc<Semaphore>);

impl Default for Npu {
    fn default() -> Self {
        Npu(Arc::new(Semaphore::new(1)))
    }
}

/// Holding the NPU for one run.
pub struct NpuTurn {
    _permit: OwnedSemaphorePermit,
}

impl Npu {
    /// Waits for the NPU, in arrival order across models.
    pub async fn take(&self) -> NpuTurn {
        // The semaphore is never closed, so acquire cannot fail.
        let permit = self.0.clone().acquire_owned().await.expect("the NPU semaphore is never closed");
        NpuTurn { _permit: permit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::poll;

    #[tokio::test]
    async fn one_run_at_a_time_in_arrival_order() {
        let npu = Npu::default();
        let running = npu.take().await;
        let mut a = Box::pin(npu.take());
        let mut b = Box::pin(npu.take());
        assert!(poll!(&mut a).is_pending() && poll!(&mut b).is_pending());
        drop(running);
        assert!(poll!(&mut b).is_pending(), "b came after a");
        assert!(poll!(&mut a).is_ready());
    }
}
