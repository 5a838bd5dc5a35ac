//! Short batches: a batched run that gives some slots no input. The manual
//! leaves open whether the runtime accepts fewer than `n_batch` inputs, so
//! the engine asks it at load ([`probe`]): one run with the last slot's
//! input alone (the others given a token input of no ids), then
//! every slot's size. Accepted — the run succeeded, only the last slot
//! grew, so slot I's input went to slot I — a slot without a job gets no
//! input: it costs no prefill and no decode step (a lone request runs as
//! fast as it would alone, where the runtime's cost follows the inputs it
//! was given), and a slot whose conversation is away keeps it. Refused, or
//! another slot grew: fillers as before (`batch.rs`), with a WARN, the
//! metric `rkllmd_batch_short_off_total` and `short_batches` in `/health`
//! (with `batch = "auto"`: one slot instead, `slot_count.rs`). The probe's
//! run is bounded by a request's first-token allowance
//! (`slot_count::probe_bound`): past it the run is aborted and counts as
//! refused (`timed_out`); a runtime that does not return within
//! `ABORT_GRACE` of that abort fails the load, and the registry refuses the
//! model until a restart.
//! After every short run the slots without input are checked to hold what
//! they held (`slots.rs`); one that changed switches short batches off the
//! same way.

use super::calls::wait_for;
use super::halt::ABORT_GRACE;
use rkllm_sys::{BatchEnd, BatchInput, BatchRequest, Event, Finish, Model, RunControl, RunInput};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc::UnboundedReceiver, oneshot};

/// What the probe at load found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShortBatches {
    /// Slots without a job get no input.
    Accepted,
    /// The runtime failed the run: fillers.
    Refused,
    /// The run succeeded but the input did not land in its own slot alone: fillers.
    Misplaced,
    /// The probe's run gave no token within its bound and was aborted: fillers.
    TimedOut,
    /// `batch_short_probe = false`: fillers, the runtime not asked.
    NotProbed,
    /// Accepted at load, then a short run failed or changed a slot it gave
    /// no input ([`Engine::short_batch_broken`]): fillers.
    SwitchedOff,
}

impl ShortBatches {
    pub fn as_str(self) -> &'static str {
        match self {
            ShortBatches::Accepted => "accepted",
            ShortBatches::Refused => "refused",
            ShortBatches::Misplaced => "misplaced",
            ShortBatches::TimedOut => "timed_out",
            ShortBatches::NotProbed => "not_probed",
            ShortBatches::SwitchedOff => "switched_off",
        }
    }
}

/// The text of the probe's one input.
pub(super) const PROBE: &str = " ";

/// Runs the probe on a freshly loaded handle with `n` slots (blocking; the
/// KV cache is cleared after it): what it found and why, or `Err` when the
/// runtime did not return from the probe's run (the handle is lost).
pub(super) fn probe(model: &Model, n: usize, bound: Duration) -> Result<(ShortBatches, String), String> {
    let found = run_probe(model, n, bound)?;
    if let Err(why) = wait_for(model.clear_kv_cache(false)) {
        tracing::warn!("rkllm_clear_kv_cache failed after the short-batch probe ({why})");
    }
    Ok(found)
}

/// With `batch = N` configured: logs what the probe found; anything but
/// `Accepted` is a WARN and counted (the model keeps its N slots, with fillers).
pub(super) fn report(found: ShortBatches, why: &str, n: u8) -> ShortBatches {
    if found == ShortBatches::Accepted {
        tracing::info!(n_batch = n, "the runtime takes batched runs with slots left without input: no fillers");
    } else {
        crate::metrics::observer().metrics.batch_short_off();
        tracing::warn!(
            n_batch = n,
            found = found.as_str(),
            reason = %why,
            "batched runs fill every slot without a job with a filler (a lone request runs at the batch's speed)"
        );
    }
    found
}

fn run_probe(model: &Model, n: usize, bound: Duration) -> Result<(ShortBatches, String), String> {
    let mut slots: Vec<Option<BatchInput>> = vec![None; n];
    slots[n - 1] = Some(BatchInput { input: RunInput::Prompt(PROBE.into()), enable_thinking: false });
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let mut channels = vec![None; n];
    channels[n - 1] = Some(tx);
    let request = BatchRequest {
        slots,
        max_new_tokens: Some(1),
        sampling: None,
        lora: None,
        keep_history: true,
        save_prompt_cache: None,
    };
    let (control, done) = match model.submit_batch(request, channels) {
        Ok(run) => run,
        Err(e) => return Ok((ShortBatches::Refused, e.to_string())),
    };
    let finish = match read_bounded(ProbeRun { control, events, done: Some(done) }, 1, bound)? {
        Bounded::Ended { finish: Some(finish), .. } => finish,
        Bounded::Ended { finish: None, .. } => return Ok((ShortBatches::Refused, "the runtime thread is gone".into())),
        Bounded::Unread(why) => return Ok((ShortBatches::Refused, why)),
        Bounded::TimedOut => {
            return Ok((
                ShortBatches::TimedOut,
                format!("its one-token run took longer than {bound:?} and was aborted"),
            ))
        }
    };
    if finish.is_error() || finish.code != 0 {
        return Ok((ShortBatches::Refused, format!("rkllm_run returned {} (see the runtime's log line)", finish.code)));
    }
    Ok(match wait_for(model.kv_cache_size()) {
        Ok(sizes) if sizes.len() == n && sizes[n - 1] > 0 && sizes[..n - 1].iter().all(|&s| s == 0) => {
            (ShortBatches::Accepted, String::new())
        }
        Ok(sizes) => (
            ShortBatches::Misplaced,
            format!("after a run with slot {} given input alone the slots' sizes are {sizes:?}", n - 1),
        ),
        Err(e) => (ShortBatches::Misplaced, format!("rkllm_get_kv_cache_size failed ({e})")),
    })
}

/// A probe's run at load, to be read: its control, the events of the slot
/// given input, and for a batched run the batch's end.
pub(super) struct ProbeRun {
    pub control: RunControl,
    pub events: UnboundedReceiver<Event>,
    pub done: Option<oneshot::Receiver<BatchEnd>>,
}

/// How a probe's run ended, read with a bound.
pub(super) enum Bounded {
    /// It ended: how (`None` when the runtime thread is gone), and when
    /// each of its tokens came.
    Ended { finish: Option<Finish>, tokens: Vec<Instant> },
    /// It ran past the bound, was aborted, and returned.
    TimedOut,
    /// No thread could read it (it was aborted).
    Unread(String),
}

/// Reads a probe's run on a thread of its own, so that waiting for it has
/// a bound, and aborts it at its `tokens`-th token (ABI 1.2 takes no
/// per-run limit); past `bound` it is aborted. `Err`: it had not returned
/// `ABORT_GRACE` after the abort (a stuck runtime).
pub(super) fn read_bounded(run: ProbeRun, tokens: usize, bound: Duration) -> Result<Bounded, String> {
    let ProbeRun { control, mut events, done } = run;
    let (ended_tx, ended) = std::sync::mpsc::channel();
    let reader = control.clone();
    // The thread ends with the run (or with the process, if the run never does).
    let spawned = std::thread::Builder::new().name("rkllmd-probe".into()).spawn(move || {
        let mut stamps = Vec::with_capacity(tokens);
        let mut finish = None;
        while let Some(event) = events.blocking_recv() {
            match event {
                Event::Token(_) => {
                    stamps.push(Instant::now());
                    if stamps.len() == tokens {
                        reader.abort();
                    }
                }
                Event::Finished(end) => {
                    finish = Some(end);
                    break;
                }
                Event::Started { .. } => {}
            }
        }
        // A batched run's end is the batch's, once `rkllm_run` returned.
        if let Some(done) = done {
            finish = done.blocking_recv().ok().map(|end| end.finish);
        }
        let _ = ended_tx.send((finish, stamps));
    });
    if let Err(e) = spawned {
        control.abort();
        return Ok(Bounded::Unread(format!("no thread to read the probe with ({e})")));
    }
    match ended.recv_timeout(bound) {
        Ok((finish, tokens)) => Ok(Bounded::Ended { finish, tokens }),
        Err(RecvTimeoutError::Disconnected) => Err("the probe's reader is gone".into()),
        Err(RecvTimeoutError::Timeout) => {
            control.abort();
            match ended.recv_timeout(ABORT_GRACE) {
                Ok(_) => Ok(Bounded::TimedOut),
                Err(_) => Err(format!(
                    "its one-token run took longer than {bound:?}, and rkllm_run had not returned {:?} after its abort",
                    ABORT_GRACE
                )),
            }
        }
    }
}
