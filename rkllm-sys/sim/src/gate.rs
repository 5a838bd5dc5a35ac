//! One handle runs one sequence: whether a run is in progress, the abort
//! request that reaches it from any thread, and whether a call comes from
//! inside the result callback (a re-entrant call).

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

#[derive(Debug, Default)]
struct Flags {
    running: bool,
    aborted: bool,
}

/// Both flags live under one lock, so an abort can never fall between a
/// run starting and its abort flag being reset.
#[derive(Debug, Default)]
pub(crate) struct RunGate {
    flags: Mutex<Flags>,
    wake: Condvar,
}

/// Held for the duration of a run; leaving the run clears the gate (also
/// if the run panics).
pub(crate) struct Running<'a>(&'a RunGate);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut flags = self.0.lock();
        flags.running = false;
        flags.aborted = false;
    }
}

impl RunGate {
    fn lock(&self) -> MutexGuard<'_, Flags> {
        self.flags.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a run, or `None` if one is already in progress.
    pub fn enter(&self) -> Option<Running<'_>> {
        let mut flags = self.lock();
        if flags.running {
            return None;
        }
        *flags = Flags { running: true, aborted: false };
        Some(Running(self))
    }

    pub fn is_running(&self) -> bool {
        self.lock().running
    }

    /// Asks the run in progress to stop at its next token boundary. Without
    /// a run in progress it does nothing: an abort never reaches a later run.
    pub fn abort(&self) {
        let mut flags = self.lock();
        if flags.running {
            flags.aborted = true;
            self.wake.notify_all();
        }
    }

    /// Sleeps until `deadline` unless an abort comes first; true if aborted.
    pub fn wait_until(&self, deadline: Instant) -> bool {
        let mut flags = self.lock();
        loop {
            if flags.aborted {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
                return false;
            };
            flags = self.wake.wait_timeout(flags, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

thread_local! {
    /// Set while this thread is inside the result callback.
    static IN_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(crate) fn in_callback<R>(f: impl FnOnce() -> R) -> R {
    IN_CALLBACK.with(|c| c.set(true));
    let result = f();
    IN_CALLBACK.with(|c| c.set(false));
    result
}

/// Whether the calling thread is inside the result callback (a re-entrant call).
pub(crate) fn inside_callback() -> bool {
    IN_CALLBACK.with(std::cell::Cell::get)
}
