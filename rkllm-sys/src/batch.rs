//! Batched runs (`n_batch` = N > 1): one `rkllm_run` with N inputs, one
//! callback per step carrying N results.
//!
//! The manual leaves three points open; this layer's reading of each, and
//! what happens when the runtime disagrees:
//! * fewer than N inputs: a slot without input is given as a token input of
//!   no ids (a valid pointer and a count of 0, the form least likely to
//!   crash a runtime that reads it; the array always has N entries: a
//!   shorter one would be read past its end). Whether the runtime accepts
//!   that is open; the
//!   engine probes it at load and otherwise fills every slot (a filler slot
//!   has no channel and its tokens are not even decoded);
//! * a slot whose `token_id` is negative has finished, and stays finished:
//!   its stream gets its `Finished` at once. A finished slot that delivers a
//!   token again is a surprise (reported in the run's `Finish::surprises`,
//!   the token is dropped);
//! * `perf` comes in `result[0]` for the whole batch (the simulator's
//!   choice). Figures found in another slot instead are used, and reported
//!   as a surprise; so are figures in several slots.
//!
//! Whether one slot can be stopped alone is not assumed: `rkllm_abort` ends
//! the whole run, and the caller decides when that is right. That the abort
//! does end it is checked: more than a couple of steps after it is a
//! surprise (the caller ends a batch's filler slots that way).

use crate::abi::Functions;
use crate::callback::{enter, leave, token, userdata, OnResult, Shared};
use crate::common::*;
use crate::event::{BatchEnd, Event, Finish, Perf};
use crate::marshal::{InferArgs, Marshal};
use crate::params::{BatchRequest, RunInput, SamplingParams};
use crate::utf8::Utf8Assembler;
use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc::UnboundedSender, oneshot};

/// A batched run as the runtime thread receives it.
pub(crate) struct BatchRun {
    pub req: BatchRequest,
    pub id: u64,
    pub cancelled: Arc<AtomicBool>,
    pub slots: Vec<Option<UnboundedSender<Event>>>,
    pub done: oneshot::Sender<BatchEnd>,
}

struct Slot {
    /// `None`: a filler input, or a slot whose reply has ended.
    events: Option<UnboundedSender<Event>>,
    /// Every id the slot generated.
    ids: Vec<i32>,
    utf8: Utf8Assembler,
    finished: bool,
    /// A surprise about this slot was reported already.
    reported: bool,
}

/// The callback's state for one batched run (its `userdata`).
struct BatchContext {
    slots: Vec<Slot>,
    perf: Option<Perf>,
    runtime_error: bool,
    surprises: Vec<String>,
    shared: Arc<Shared>,
    cancelled: Arc<AtomicBool>,
    /// The run's id, for a re-issued abort (see `model.rs`'s `RunContext`).
    id: u64,
    reissued_abort: bool,
    /// Steps delivered after the abort was re-issued.
    steps_after_abort: u32,
}

/// Steps a run may still deliver after its abort was re-issued (one under
/// way when it came, one more for slack): more means the abort did not end
/// the run, so its slots — fillers too — decode on at the NPU's cost.
const STEPS_AFTER_ABORT: u32 = 2;

pub(crate) fn run_batch<A: Marshal>(fns: &Functions<A>, shared: &Arc<Shared>, run: BatchRun) {
    let BatchRun { req, id, cancelled, slots, done } = run;
    let bytes = req.slots.iter().flatten().map(|s| s.input.text_bytes()).sum();
    if !enter(shared, id, &cancelled, bytes) {
        let skipped = Finish::skipped(Instant::now());
        for events in slots.iter().flatten() {
            let _ = events.send(Event::Finished(skipped.clone()));
        }
        let _ = done.send(BatchEnd { finish: skipped, slot_tokens: Vec::new() });
        return;
    }
    // Every buffer below outlives the blocking call.
    let mut buffers: Vec<(CString, Vec<i32>)> = req
        .slots
        .iter()
        .map(|slot| match slot.as_ref().map(|s| &s.input) {
            Some(RunInput::Prompt(text)) => (CString::new(text.replace('\0', "")).unwrap_or_default(), Vec::new()),
            Some(RunInput::Tokens(ids)) => (CString::default(), ids.clone()),
            // A real (one-id) buffer, so the pointer given with `n_tokens = 0`
            // is one a runtime may read without faulting (an empty Vec's is dangling).
            None => (CString::default(), vec![0]),
        })
        .collect();
    let role = c"user".as_ptr();
    let mut inputs: Vec<A::Input> = buffers
        .iter_mut()
        .zip(&req.slots)
        .map(|((prompt, ids), slot)| match slot {
            None => A::token_input(role, &mut ids[..0], false),
            Some(slot) if ids.is_empty() => A::prompt_input(role, prompt.as_ptr(), slot.enable_thinking),
            Some(slot) => A::token_input(role, ids, slot.enable_thinking),
        })
        .collect();
    let mut sampling = req.sampling.map(SamplingParams::to_ffi);
    let sampling_ptr = sampling.as_mut().map_or(std::ptr::null_mut(), |s| s as *mut _);
    let mut extras = crate::adapters::RunExtras::new(req.lora.as_deref(), req.save_prompt_cache.as_deref());
    let (lora, prompt_cache) = extras.pointers();
    let mut infer = A::infer_param(InferArgs {
        mode: RKLLMInferMode::Generate,
        keep_history: req.keep_history,
        max_new_tokens: req.max_new_tokens,
        sampling: sampling_ptr,
        lora,
        prompt_cache,
    });
    let mut ctx = BatchContext {
        slots: slots
            .into_iter()
            .map(|events| Slot {
                events,
                ids: Vec::new(),
                utf8: Utf8Assembler::new(),
                finished: false,
                reported: false,
            })
            .collect(),
        perf: None,
        runtime_error: false,
        surprises: Vec::new(),
        shared: shared.clone(),
        cancelled: cancelled.clone(),
        id,
        reissued_abort: false,
        steps_after_abort: 0,
    };
    let started = Instant::now();
    for events in ctx.slots.iter().filter_map(|s| s.events.as_ref()) {
        let _ = events.send(Event::Started { at: started, run: id });
    }
    let mut callback: &mut dyn OnResult = &mut ctx;
    // SAFETY: the N inputs, their strings and ids, sampling, infer and ctx
    // outlive the blocking call; the callback uses ctx only through userdata.
    let code = unsafe { (fns.run)(shared.handle, inputs.as_mut_ptr(), &mut infer, userdata(&mut callback)) };
    let at = leave(shared);
    let finish = Finish {
        at,
        started: true,
        code,
        runtime_error: ctx.runtime_error,
        aborted: cancelled.load(Ordering::SeqCst),
        perf: ctx.perf,
        output: None,
        tail: String::new(),
        surprises: std::mem::take(&mut ctx.surprises),
    };
    // Slots still running end with the run: its code, error and perf.
    for slot in &mut ctx.slots {
        if let Some(events) = slot.events.take() {
            let _ = events.send(Event::Finished(Finish { tail: slot.utf8.finish(), ..finish.clone() }));
        }
    }
    let slot_tokens = ctx.slots.iter_mut().map(|slot| std::mem::take(&mut slot.ids)).collect();
    let _ = done.send(BatchEnd { finish, slot_tokens });
}

impl OnResult for BatchContext {
    fn on_result(&mut self, result: *mut RKLLMResult, state: c_int, at: Instant) -> c_int {
        self.on_results(result, state, at);
        callback_return::CONTINUE
    }
}

impl BatchContext {
    fn on_results(&mut self, result: *mut RKLLMResult, state: c_int, at: Instant) {
        let step = matches!(state, call_state::NORMAL | call_state::WAITING);
        self.shared.progress.callback(at, step);
        if state == call_state::ERROR {
            self.runtime_error = true;
        }
        if result.is_null() {
            return;
        }
        // SAFETY: in a batch the runtime passes n_batch results for the call's duration.
        let results = unsafe { std::slice::from_raw_parts(result, self.slots.len()) };
        if step {
            for (i, (slot, result)) in self.slots.iter_mut().zip(results).enumerate() {
                if let Some(surprise) = slot.step(result, state, at) {
                    self.surprises.push(format!("batch slot {i}: {surprise}"));
                }
            }
            if self.reissued_abort {
                self.steps_after_abort += 1;
                if self.steps_after_abort == STEPS_AFTER_ABORT + 1 {
                    self.surprises.push(format!(
                        "the run went on for more than {STEPS_AFTER_ABORT} steps after rkllm_abort: aborting does not end \
                         a batched run, so its slots (fillers too) decode on"
                    ));
                }
            } else if self.cancelled.load(Ordering::SeqCst) {
                self.reissued_abort = true;
                self.shared.reissue_abort(self.id);
            }
        } else if state == call_state::FINISH {
            self.perf = self.batch_perf(results);
        }
    }
}

impl BatchContext {
    /// The whole batch's figures: `result[0]`, or wherever they are.
    fn batch_perf(&mut self, results: &[RKLLMResult]) -> Option<Perf> {
        let filled: Vec<usize> = (0..results.len()).filter(|&i| results[i].perf != RKLLMPerfStat::default()).collect();
        let first = *filled.first()?;
        if first != 0 {
            self.surprises.push(format!("perf reported in result[{first}], not result[0]"));
        }
        if filled.len() > 1 {
            self.surprises.push(format!("perf reported in {} slots ({filled:?}); using result[{first}]", filled.len()));
        }
        Some(Perf { batch_size: results.len() as u32, ..Perf::from(results[first].perf) })
    }
}

impl Slot {
    /// One slot's share of a step; `Some`: a surprise to report.
    fn step(&mut self, result: &RKLLMResult, state: c_int, at: Instant) -> Option<String> {
        if result.token_id < 0 {
            if !self.finished {
                self.finished = true;
                if let Some(events) = self.events.take() {
                    // The reply ended by itself; the run's code and perf come later, to the caller.
                    let tail = self.utf8.finish();
                    let _ = events.send(Event::Finished(Finish {
                        started: true,
                        aborted: false,
                        tail,
                        ..Finish::skipped(at)
                    }));
                }
            }
            return None;
        }
        if self.finished {
            if self.reported {
                return None;
            }
            self.reported = true;
            return Some(format!("token {} after the slot had finished (token id < 0); dropped", result.token_id));
        }
        self.ids.push(result.token_id);
        let events = self.events.as_ref()?;
        let _ = events.send(Event::Token(token(result, state, at, &mut self.utf8)));
        None
    }
}
