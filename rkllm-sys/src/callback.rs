//! What single and batched runs share on the runtime thread: the handle's
//! state shared with `RunControl`s ([`Shared`]), marking a run active (so
//! that its `RunControl` can abort it), and the one result callback
//! registered at init, which hands each call to the run's own context
//! ([`OnResult`]) through `userdata`.

use crate::activity::Progress;
use crate::common::*;
use crate::event::{Finish, Token};
use crate::utf8::Utf8Assembler;
use std::ffi::CStr;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

/// State shared between the runtime thread and [`RunControl`]s.
pub(crate) struct Shared {
    pub(crate) handle: LLMHandle,
    pub(crate) abort: unsafe extern "C" fn(LLMHandle) -> c_int,
    /// The id and abort flag of the run inside `rkllm_run`, if any. Held while
    /// calling `rkllm_abort` so the run cannot end and another begin in between.
    pub(crate) active: Mutex<Option<(u64, Arc<AtomicBool>)>>,
    /// Signs of life for a watchdog, as atomics so the callback takes no lock.
    pub(crate) progress: Progress,
}

impl Shared {
    /// Aborts run `id` if it is the one inside `rkllm_run`. Holds `active`
    /// meanwhile, so the run cannot end and another begin in between.
    pub(crate) fn abort_run(&self, id: u64) {
        let active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        if active.as_ref().is_some_and(|(running, _)| *running == id) {
            // SAFETY: the handle is alive while a run is active (it is destroyed
            // only after the runtime thread leaves its loop).
            unsafe { (self.abort)(self.handle) };
        }
    }

    /// Aborts run `id` again, from a thread of its own: called by the result
    /// callback, which must not call `rkllm_abort` itself. The manual allows
    /// an abort from another thread and says nothing of one from inside the
    /// callback, on the thread inside `rkllm_run` (a runtime that takes the
    /// same lock around the callback and in abort would deadlock there).
    pub(crate) fn reissue_abort(self: &Arc<Self>, id: u64) {
        let shared = self.clone();
        let spawned = std::thread::Builder::new().name("rkllm-abort".into()).spawn(move || shared.abort_run(id));
        if let Err(e) = spawned {
            tracing::warn!("cannot start a thread to re-issue an abort ({e}); the run goes on to its end");
        }
    }
}

// SAFETY: the handle is an opaque pointer the runtime allows `rkllm_abort`
// on from any thread; every other use stays on the runtime thread.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Finish {
    /// A run aborted before `rkllm_run` was called.
    pub(crate) fn skipped(at: Instant) -> Finish {
        Finish {
            at,
            started: false,
            code: 0,
            runtime_error: false,
            aborted: true,
            perf: None,
            tail: String::new(),
            output: None,
            surprises: Vec::new(),
        }
    }
}

/// Marks run `id` active (so its `RunControl` can abort it) unless it was
/// cancelled already; `false`: skip it.
pub(crate) fn enter(shared: &Shared, id: u64, cancelled: &Arc<AtomicBool>, input_bytes: usize) -> bool {
    let mut active = shared.active.lock().unwrap_or_else(|e| e.into_inner());
    if cancelled.load(Ordering::SeqCst) {
        return false;
    }
    *active = Some((id, cancelled.clone()));
    shared.progress.run_started(input_bytes);
    true
}

/// `rkllm_run` returned: no run is active any more.
pub(crate) fn leave(shared: &Shared) -> Instant {
    let at = Instant::now();
    shared.progress.stamp(at);
    *shared.active.lock().unwrap_or_else(|e| e.into_inner()) = None;
    at
}

/// What the callback does with one call, for a single or a batched run.
pub(crate) trait OnResult {
    /// `result` points at one result, or at `n_batch` of them in a batch (or
    /// is NULL). Returns the callback's answer to the runtime (e.g. 2 to
    /// release a hidden-layer or logits buffer at once).
    fn on_result(&mut self, result: *mut RKLLMResult, state: c_int, at: Instant) -> c_int;
}

/// The `userdata` for `rkllm_run`: a thin pointer to the context's fat one.
pub(crate) fn userdata(callback: &mut &mut dyn OnResult) -> *mut c_void {
    callback as *mut &mut dyn OnResult as *mut c_void
}

/// The result callback registered at init for both ABIs.
pub(crate) unsafe extern "C" fn on_result(result: *mut RKLLMResult, userdata: *mut c_void, state: c_int) -> c_int {
    let at = Instant::now();
    if userdata.is_null() {
        return callback_return::CONTINUE;
    }
    // Never unwind into the runtime: a panic here is swallowed (and the
    // run's events simply stop).
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: userdata is the `&mut dyn OnResult` passed to rkllm_run
        // (see `userdata`), alive and used by no one else while the run lasts.
        let ctx = unsafe { &mut *(userdata as *mut &mut dyn OnResult) };
        ctx.on_result(result, state, at)
    }))
    .unwrap_or(callback_return::CONTINUE)
}

/// One result's token: its bytes copied (a NULL `text` is none), completed
/// characters reassembled by the run's (or slot's) `utf8`.
pub(crate) fn token(result: &RKLLMResult, state: c_int, at: Instant, utf8: &mut Utf8Assembler) -> Token {
    let bytes = if result.text.is_null() {
        Vec::new()
    } else {
        // SAFETY: a non-NULL `text` is NUL-terminated for the call's duration.
        unsafe { CStr::from_ptr(result.text) }.to_bytes().to_vec()
    };
    let text = utf8.push(&bytes);
    let dropped_bytes = utf8.take_dropped();
    let split = utf8.pending_len() > 0;
    Token { text, bytes, token_id: result.token_id, waiting: state == call_state::WAITING, dropped_bytes, split, at }
}
