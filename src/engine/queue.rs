//! The bounded FIFO in front of the runtime thread.
//!
//! Two semaphores: `capacity` (queue depth + the one running) is taken with
//! `try_acquire` so a full queue is refused at once; `turn` (one permit) is
//! awaited, and tokio's semaphore is fair, so waiters run in arrival order:
//! the scheduler task (`schedule.rs`, which picks among the generations) and
//! embedding/rerank jobs. A place is dropped with whatever holds it (a
//! job whose client went away); nothing else has to clean up. A run whose
//! turn came also takes the NPU ([`super::npu`]), shared with every other
//! model's queue. A batched run's turn holds the places of all its jobs
//! until the run returns.

use super::npu::{Npu, NpuTurn};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct Queue {
    capacity: Arc<Semaphore>,
    turn: Arc<Semaphore>,
    npu: Npu,
    depth: usize,
    running: Arc<AtomicUsize>,
    /// Tokens generated so far by the running job (0 while it prefills).
    progress: Arc<AtomicU32>,
}

/// A place in the queue (taken at submission).
pub struct Place {
    _capacity: OwnedSemaphorePermit,
}

/// The right to run (taken when the job's turn comes). Holds the places of
/// the jobs in the run (one, or a batch's).
pub struct Turn {
    places: Vec<Place>,
    _turn: OwnedSemaphorePermit,
    _npu: NpuTurn,
    running: Arc<AtomicUsize>,
}

/// The turn (and the NPU), taken before the jobs that will share it are chosen.
pub struct Permit {
    turn: OwnedSemaphorePermit,
    npu: NpuTurn,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.running.fetch_sub(self.places.len(), Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy)]
pub struct QueueState {
    /// Generations on the NPU now (0 or 1; up to `batch` in a batched run).
    pub running: usize,
    /// Requests waiting for their turn.
    pub waiting: usize,
    /// How many may wait before new ones are refused.
    pub capacity: usize,
    /// Tokens the running request (batch: requests) has generated so far (0 while it prefills).
    pub running_tokens: u32,
}

impl Queue {
    pub fn new(depth: usize, npu: Npu) -> Self {
        Queue {
            capacity: Arc::new(Semaphore::new(depth + 1)),
            turn: Arc::new(Semaphore::new(1)),
            npu,
            depth,
            running: Arc::new(AtomicUsize::new(0)),
            progress: Arc::new(AtomicU32::new(0)),
        }
    }

    /// A place, or `None` when `depth` requests already wait behind a running one.
    pub fn try_enter(&self) -> Option<Place> {
        self.capacity.clone().try_acquire_owned().ok().map(|p| Place { _capacity: p })
    }

    /// Waits for the turn, in arrival order, then for the NPU.
    pub async fn wait_turn(&self, place: Place) -> Turn {
        let permit = self.wait_permit().await;
        self.start(permit, vec![place])
    }

    /// Waits for the turn before knowing who will use it (the batch scheduler).
    pub async fn wait_permit(&self) -> Permit {
        // The semaphore is never closed, so acquire cannot fail.
        let turn = self.turn.clone().acquire_owned().await.expect("queue semaphore is never closed");
        let npu = self.npu.take().await;
        Permit { turn, npu }
    }

    /// The turn, for the jobs holding these places.
    pub fn start(&self, permit: Permit, places: Vec<Place>) -> Turn {
        self.running.fetch_add(places.len(), Ordering::Relaxed);
        self.progress.store(0, Ordering::Relaxed);
        Turn { places, _turn: permit.turn, _npu: permit.npu, running: self.running.clone() }
    }

    /// Counts one generated token of the running job(s).
    pub fn token(&self) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }

    pub fn state(&self) -> QueueState {
        let held = self.depth + 1 - self.capacity.available_permits();
        let running = self.running.load(Ordering::Relaxed);
        let running_tokens = if running > 0 { self.progress.load(Ordering::Relaxed) } else { 0 };
        QueueState { running, waiting: held.saturating_sub(running), capacity: self.depth, running_tokens }
    }

    pub fn is_full(&self) -> bool {
        self.capacity.available_permits() == 0
    }

    /// Some place is held (waiting, running, or draining an aborted run).
    pub fn in_use(&self) -> bool {
        self.capacity.available_permits() < self.depth + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn full_queue_refuses_and_a_dropped_waiter_frees_its_place() {
        let q = Queue::new(1, Npu::default());
        let first = q.wait_turn(q.try_enter().unwrap()).await;
        let second = q.try_enter().unwrap();
        assert!(q.try_enter().is_none(), "one running + one waiting = full");
        assert_eq!((q.state().running, q.state().waiting), (1, 1));
        drop(second);
        assert!(q.try_enter().is_some(), "a dropped waiter leaves the queue");
        drop(first);
        assert_eq!(q.state().running, 0);
    }

    #[tokio::test]
    async fn turns_are_given_in_arrival_order() {
        use futures_util::poll;
        use std::task::Poll;
        let q = Queue::new(4, Npu::default());
        let running = q.wait_turn(q.try_enter().unwrap()).await;
        let mut waiters: Vec<_> = (0..3).map(|_| Box::pin(q.wait_turn(q.try_enter().unwrap()))).collect();
        for w in waiters.iter_mut() {
            assert!(poll!(w).is_pending(), "registers in this order");
        }
        drop(running);
        for next in 0..3 {
            for (later, waiter) in waiters.iter_mut().enumerate().skip(next + 1) {
                assert!(poll!(waiter).is_pending(), "{later} must not overtake {next}");
            }
            let Poll::Ready(turn) = poll!(&mut waiters[next]) else { panic!("{next} should have its turn") };
            drop(turn);
        }
    }
}
