//! When waiting on the runtime must stop: the shutdown's abort, and a
//! runtime that does not honour an abort (a wedged NPU driver, a deadlock in
//! the library).
//!
//! A run that was aborted (time-out, stop sequence, shutdown) gets
//! [`ABORT_GRACE`] to return. If it does not, its client gets its ending
//! anyway, the run is drained in the background (still holding the turn),
//! and until it returns the engine counts as *unresponsive*: queued jobs end
//! with [`EndReason::Unresponsive`] and new ones are refused, instead of
//! waiting behind a run that may never end. Both conditions are
//! `watch` channels so that any number of waiters wake at once.

use super::outcome::EndReason;
use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;

/// How long an aborted run may take to return before the runtime counts as
/// unresponsive. An abort is honoured at the next token boundary, and a
/// decode step takes well under 100 ms on a board. A prefill is not
/// interruptible (shared/rkllm-runtime.md), but one that outlasted its
/// first-token time-out, which grows with the prompt, is itself trouble:
/// the waiting clients are better told (503, retry) than held for minutes.
pub const ABORT_GRACE: Duration = Duration::from_secs(1);

pub(super) struct Halt {
    /// Set at the end of the shutdown grace period.
    closing: watch::Sender<bool>,
    /// Set while an aborted run has not returned after [`ABORT_GRACE`].
    unresponsive: watch::Sender<bool>,
}

impl Default for Halt {
    fn default() -> Self {
        Halt { closing: watch::Sender::new(false), unresponsive: watch::Sender::new(false) }
    }
}

impl Halt {
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    pub fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }

    pub fn is_unresponsive(&self) -> bool {
        *self.unresponsive.borrow()
    }

    /// Marks the runtime (un)responsive; returns whether that changed it.
    pub fn set_unresponsive(&self, unresponsive: bool) -> bool {
        self.unresponsive.send_replace(unresponsive) != unresponsive
    }

    /// Resolves once the shutdown's abort came.
    pub async fn closed(&self) {
        // The sender lives as long as `self`, so `wait_for` cannot fail.
        let _ = self.closing.subscribe().wait_for(|closing| *closing).await;
    }

    /// Waits for an aborted run to return (`returned`), the runtime counting
    /// as unresponsive from `grace_end` until it does.
    pub async fn aborted_run<T>(&self, grace_end: tokio::time::Instant, returned: impl Future<Output = T>) -> T {
        let mut returned = std::pin::pin!(returned);
        if let Ok(out) = tokio::time::timeout_at(grace_end, &mut returned).await {
            return out;
        }
        self.set_unresponsive(true);
        tracing::error!(
            "the runtime has not returned from an aborted run after {} ms: queued requests end with 503 and new ones are refused until it does",
            ABORT_GRACE.as_millis()
        );
        let out = returned.await;
        self.set_unresponsive(false);
        tracing::warn!("the runtime returned from the aborted run; requests are accepted again");
        out
    }

    /// Resolves once a job still waiting for its turn must give up.
    pub async fn halted(&self) -> EndReason {
        let mut unresponsive = self.unresponsive.subscribe();
        tokio::select! {
            () = self.closed() => EndReason::ShuttingDown,
            _ = unresponsive.wait_for(|u| *u) => EndReason::Unresponsive,
        }
    }
}
