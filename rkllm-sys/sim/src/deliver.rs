//! Delivering a run's replies through the result callback, paced against
//! absolute deadlines from the run's start so sleeps never drift (a step
//! far behind restarts the schedule rather than starting a burst).
//!
//! With `n_batch` 1 every callback carries one `RKLLMResult`: a token with
//! state NORMAL or WAITING. With `n_batch` N > 1 every callback carries an
//! array of N results, one step of every slot: state NORMAL, a finished
//! slot's `token_id` -1 and `text` NULL, a slot's bytes possibly ending
//! inside a character (reassemble per slot; the one `state` cannot speak
//! for N slots). FINISH and ERROR carry N results too, all finished, the
//! run's `perf` in the first.

use crate::engine::{Reply, SimModel, SlotReply};
use rkllm_sys::common::*;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::time::{Duration, Instant};

/// How a run's delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Every slot's reply ended (EOS), or reached its limit.
    Finished,
    Aborted,
    /// The callback returned 1; the reply waits for the next `rkllm_run`.
    Paused,
    /// A simulated runtime error (`error_after`).
    Error,
}

/// `token_id` of a slot that has finished (the manual: "negative").
const FINISHED: i32 = -1;

/// The result callback with the run's `userdata`.
pub(crate) struct Caller {
    pub function: Option<LLMResultCallback>,
    pub userdata: *mut c_void,
    /// `n_batch`: how many results every callback carries.
    pub slots: usize,
    /// The `batch_perf_last` fault: FINISH's `perf` in the last result.
    pub perf_last: bool,
}

fn result(text: *const std::ffi::c_char, token_id: i32) -> RKLLMResult {
    RKLLMResult {
        text,
        token_id,
        last_hidden_layer: RKLLMResultLastHiddenLayer { hidden_states: ptr::null(), embd_size: 0, num_tokens: 0 },
        logits: RKLLMResultLogits { logits: ptr::null(), vocab_size: 0, num_tokens: 0 },
        perf: RKLLMPerfStat::default(),
    }
}

impl Caller {
    fn call(&self, results: &mut [RKLLMResult], state: c_int) -> c_int {
        let Some(function) = self.function else {
            return callback_return::CONTINUE;
        };
        // SAFETY: the caller registered this callback for exactly this
        // signature; `results` holds n_batch initialised results and outlives
        // the call.
        unsafe { function(results.as_mut_ptr(), self.userdata, state) }
    }

    /// One callback with one result (a hidden-layer or logits run); what it returned.
    pub fn call_one(&self, result: &mut RKLLMResult, state: c_int) -> c_int {
        self.call(std::slice::from_mut(result), state)
    }

    /// One step: the next token of every slot that has one. Advances them.
    fn step(&self, slots: &mut [SlotReply]) -> c_int {
        let mut waiting = false;
        let mut results: Vec<RKLLMResult> = slots
            .iter_mut()
            .map(|slot| match slot.pieces.get(slot.next) {
                Some(piece) => {
                    slot.next += 1;
                    waiting = piece.waiting;
                    result(piece.text.as_deref().map_or(ptr::null(), |t| t.as_ptr()), piece.token_id)
                }
                None => result(ptr::null(), FINISHED),
            })
            .collect();
        let state = if waiting && self.slots == 1 { call_state::WAITING } else { call_state::NORMAL };
        self.call(&mut results, state)
    }

    /// FINISH or ERROR: text NULL, `perf` in the first result (the last one
    /// under the `batch_perf_last` fault).
    pub fn end(&self, state: c_int, perf: RKLLMPerfStat) {
        // One slot keeps the single-sequence shape: token_id 0.
        let token_id = if self.slots == 1 { 0 } else { FINISHED };
        let mut results = vec![result(ptr::null(), token_id); self.slots];
        let at = if self.perf_last { self.slots - 1 } else { 0 };
        results[at].perf = perf;
        self.call(&mut results, state);
    }
}

impl SimModel {
    pub(crate) fn scaled(&self, ms: f64) -> Duration {
        Duration::from_secs_f64(ms * self.config.time_scale / 1000.0)
    }

    /// Sleeps through the prefill until `start + prefill` (an abort cannot interrupt it, as on the
    /// vendor runtime), then delivers a step per decode interval, checking
    /// for an abort at every token boundary. `hang_after` and `error_after`
    /// count steps (the tokens of a single sequence).
    pub(crate) fn deliver(
        &self,
        reply: &mut Reply,
        start: Instant,
        prefill: Duration,
        prefill_tokens: usize,
        caller: &Caller,
    ) -> (End, RKLLMPerfStat) {
        let mut due = start + prefill;
        if let Some(left) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        let decode = self.scaled(self.config.profile.decode_ms);
        let mut first_token = None;
        let mut generated = 0;
        let mut lag = self.config.abort_lag;
        let end = loop {
            let active = reply.slots.iter().filter(|s| !s.finished()).count();
            if active == 0 {
                break End::Finished;
            }
            // Before the abort check: a wedged runtime ignores aborts.
            if self.config.hang_after == Some(reply.steps) && self.hangs_again() {
                hang(self.config.hang_ms.map(Duration::from_millis));
            }
            // The `batch_abort_ignored` fault decodes on (unpaced) to the end.
            if self.gate.wait_until(due) && !(self.config.batch_abort_ignored && reply.slots.len() > 1) {
                if lag == 0 {
                    break End::Aborted;
                }
                // Noticed late (`abort_lag`): this token still comes, at its pace.
                lag -= 1;
                if let Some(left) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(left);
                }
            }
            if self.config.error_after == Some(reply.steps) {
                break End::Error;
            }
            first_token.get_or_insert_with(Instant::now);
            let answer = crate::gate::in_callback(|| caller.step(&mut reply.slots));
            generated += active;
            reply.steps += 1;
            // Absolute deadlines keep the pace exact; a step more than one
            // interval late (a slow machine, an emulator) restarts the
            // schedule from now, so the next ones do not come back to back.
            let interval = decode.mul_f64(1.0 + self.config.slot_cost * (active - 1) as f64);
            let now = Instant::now();
            due = if now > due + interval { now } else { due } + interval;
            if answer == callback_return::PAUSE {
                break End::Paused;
            }
        };
        let now = Instant::now();
        let perf = RKLLMPerfStat {
            prefill_time_ms: millis(first_token.unwrap_or(now) - start),
            prefill_tokens: prefill_tokens as i32,
            generate_time_ms: first_token.map_or(0.0, |t| millis(now - t)),
            generate_tokens: generated as i32,
            memory_usage_mb: peak_memory_mb(),
        };
        (end, perf)
    }

    /// Whether this run still hangs at `hang_after` (`hang_runs`: the first N runs only).
    fn hangs_again(&self) -> bool {
        let before = self.hung.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.config.hang_runs.is_none_or(|n| before < n)
    }
}

/// A wedged runtime (`hang_after`): no more callbacks, aborts ignored,
/// `rkllm_run` never returns. Only killing the process ends it, unless
/// `hang_ms` gave the hang an end: then the run goes on (an abort that came
/// meanwhile is seen at the next token boundary).
fn hang(lasting: Option<Duration>) {
    let Some(lasting) = lasting else {
        loop {
            std::thread::park();
        }
    };
    std::thread::sleep(lasting);
}

fn millis(d: Duration) -> f32 {
    (d.as_secs_f64() * 1000.0) as f32
}

/// The process's peak resident memory (VmHWM), MB; 0 if unknown.
fn peak_memory_mb() -> f32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
    kb.map_or(0.0, |kb| (kb / 1024.0) as f32)
}
