//! What happens when a consumer drops its generation early (a client went
//! away): the job leaves the queue, or its run is aborted and drained. Either
//! way the job's [`Outcome`] (reason [`EndReason::Abandoned`]) is handed, by
//! value, to whoever asked for it with `Generation::take_abandoned`; the
//! engine itself records nothing.

use super::batch::SlotControl;
use super::halt::ABORT_GRACE;
use super::outcome::{EndReason, Outcome};
use super::queue::Turn;
use super::state::Engine;
use crate::metrics::{RuntimePerf, Timeline};
use rkllm_sys::Event;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

/// Where an abandoned job's outcome goes (nowhere if nobody asked).
pub(super) type AbandonedTx = oneshot::Sender<Outcome>;

/// A job still waiting for its turn.
pub(super) struct WaitGuard {
    pub received: Instant,
    pub prompt_tokens: Option<u32>,
    /// `None` once the job has started (the run guard holds it then).
    pub abandoned: Option<AbandonedTx>,
}

impl WaitGuard {
    /// The job got its turn: hand the outcome's sender to the run guard.
    pub fn start(&mut self) -> Option<AbandonedTx> {
        self.abandoned.take()
    }
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if let Some(tx) = self.abandoned.take() {
            let outcome = Outcome::without_run(EndReason::Abandoned, Timeline::new(self.received), self.prompt_tokens);
            let _ = tx.send(outcome);
        }
    }
}

/// A job whose run was submitted: if dropped before `rkllm_run` returned,
/// aborts the run and keeps the turn until it has returned, so the next job
/// starts right after and the outcome carries the full timeline. A batch
/// slot is only left (`batch.rs`), and its outcome handed over at once.
pub(super) struct RunGuard {
    pub engine: Arc<Engine>,
    pub control: SlotControl,
    pub events: UnboundedReceiver<Event>,
    /// `None` for a batch slot: the scheduler holds the batch's turn.
    pub turn: Option<Turn>,
    pub timeline: Timeline,
    pub prompt_tokens: Option<u32>,
    /// Tokens received but not part of the reply ([`Outcome::dropped_tokens`]).
    pub dropped: u32,
    /// The run ended and its outcome was delivered.
    pub finished: bool,
    pub abandoned: Option<AbandonedTx>,
    /// When the run was told to end (abort), if it was.
    pub aborted_at: Option<Instant>,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.control.abort();
        let Some(turn) = self.turn.take() else {
            // A batch slot: left above (the batch runs on for the other
            // slots); its tokens are dropped unread, nothing to drain.
            if let Some(tx) = self.abandoned.take() {
                let mut outcome = Outcome::without_run(EndReason::Abandoned, self.timeline, self.prompt_tokens);
                outcome.dropped_tokens = self.dropped;
                let _ = tx.send(outcome);
            }
            return;
        };
        let (_, closed) = tokio::sync::mpsc::unbounded_channel();
        let mut events = std::mem::replace(&mut self.events, closed);
        let mut timeline = self.timeline;
        let mut dropped = self.dropped;
        let prompt_tokens = self.prompt_tokens;
        let abandoned = self.abandoned.take();
        let engine = self.engine.clone();
        let aborted_at = self.aborted_at.unwrap_or_else(Instant::now);
        let drain = async move {
            let mut perf = None;
            {
                let finished = async {
                    while let Some(event) = events.recv().await {
                        match event {
                            Event::Started { at, .. } => timeline.admitted = Some(at),
                            // Tokens after the client left are not part of any reply.
                            Event::Token(_) => dropped += 1,
                            Event::Finished(f) => {
                                timeline.finished = Some(f.at);
                                perf = f.perf.map(RuntimePerf::from);
                                break;
                            }
                        }
                    }
                };
                let grace_end = tokio::time::Instant::from_std(aborted_at + ABORT_GRACE);
                engine.handle.halt.aborted_run(grace_end, finished).await;
            }
            // A prefill aborted as stuck that then returned took that long.
            engine.handle.liveness.pace.measured(perf.as_ref());
            engine.forget_kv();
            engine.sample_kv_cache();
            let mut outcome = Outcome::without_run(EndReason::Abandoned, timeline, prompt_tokens);
            outcome.perf = perf;
            outcome.dropped_tokens = dropped;
            if let Some(tx) = abandoned {
                let _ = tx.send(outcome);
            }
            // The place last: until it is free the model is in use (the
            // registry's "idle"), and the outcome is recorded before that.
            drop(turn);
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(drain);
        }
    }
}
