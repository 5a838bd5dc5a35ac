//! The safe layer: one runtime handle, owned by one dedicated OS thread.
//!
//! It lives in `rkllm-sys` (not in the daemon) because it is the only way to
//! use the binding correctly and is tested here against the simulated runtime
//! through the same C ABI; the daemon's `engine` adds policy on top (queue,
//! limits, sampling choices) and never touches FFI types.
//!
//! * Every handle operation (init, run, KV cache, templates, destroy) runs on
//!   the thread that owns the handle; `rkllm_abort` is the only call made from
//!   other threads ([`RunControl::abort`]).
//! * A run's events ([`Event`]) go to the caller's channel: `Started` just
//!   before `rkllm_run`, one `Token` per generated token (NORMAL and WAITING),
//!   and always a last `Finished` once `rkllm_run` has returned.
//! * The result callback copies bytes, stamps the time, reassembles UTF-8 and
//!   sends; it never blocks, never takes a lock and never unwinds.
//! * With `n_batch` > 1 a run is a batch ([`Model::submit_batch`], `batch.rs`):
//!   each slot's events go to that slot's own channel.

use crate::abi::{Abi, Functions, Listed, WithFunctions};
pub use crate::activity::Activity;
use crate::activity::Progress;
use crate::adapters::{Load, RunExtras};
use crate::callback::{enter, leave, on_result, token, userdata, OnResult, Shared};
use crate::capture::{capture_output, echo};
use crate::common::*;
pub use crate::error::ModelError;
pub use crate::event::{BatchEnd, Event, Finish, Perf, Token};
use crate::marshal::{self, ImagesArgs, InferArgs, Marshal};
use crate::output::{self, CaptureError, Matrix};
pub use crate::params::{
    BatchInput, BatchRequest, Capture, InitConfig, LoraAdapter, Role, RunInput, RunRequest, SamplingParams,
};
use crate::utf8::Utf8Assembler;
use crate::Runtime;
use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::{mpsc::UnboundedSender, oneshot};

/// Lets any thread abort one particular run.
#[derive(Clone)]
pub struct RunControl {
    id: u64,
    cancelled: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl RunControl {
    /// Aborts this run: skipped if it has not started, `rkllm_abort` if it is
    /// running, nothing if it has finished (so a late abort never hits the
    /// next run on the handle).
    pub fn abort(&self) {
        // Set first: `enter` checks it under the same lock `abort_run` takes.
        self.cancelled.store(true, Ordering::SeqCst);
        self.shared.abort_run(self.id);
    }
}

type Reply<T> = oneshot::Sender<Result<T, ModelError>>;

enum Command {
    Run { req: RunRequest, id: u64, cancelled: Arc<AtomicBool>, events: UnboundedSender<Event> },
    RunBatch { run: crate::batch::BatchRun },
    ClearKvCache { keep_system_prompt: bool, reply: Reply<()> },
    KvCacheSize { reply: Reply<Vec<i32>> },
    SetChatTemplate { parts: [CString; 3], reply: Reply<()> },
    SetFunctionTools { parts: [CString; 3], reply: Reply<()> },
    Ping { reply: Reply<()> },
    Load { what: Load, reply: Reply<()> },
}

/// A loaded model: the runtime thread and its handle. Dropping it aborts a
/// running generation, stops the thread and destroys the handle.
pub struct Model {
    commands: Option<mpsc::Sender<Command>>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    abi: Abi,
    n_batch: u8,
    init_log: String,
    thread: Option<JoinHandle<()>>,
}

impl Model {
    /// Starts the runtime thread and initialises the model on it. Blocks
    /// until `rkllm_init` has returned. What the runtime printed during init
    /// is captured and kept ([`Model::init_log`]); on failure it is in the error.
    pub fn load(runtime: Arc<Runtime>, cfg: InitConfig) -> Result<Model, ModelError> {
        let path = CString::new(cfg.model_path.clone()).map_err(|_| ModelError::BadPath)?;
        let (ready_tx, ready_rx) = mpsc::channel();
        let (cmd_tx, cmd_rx) = mpsc::channel();
        let abi = runtime.abi();
        let n_batch = cfg.n_batch;
        let thread = std::thread::Builder::new()
            .name("rkllm-runtime".into())
            .spawn(move || {
                runtime.table().dispatch(RuntimeThread { cfg: &cfg, path: &path, ready: ready_tx, commands: cmd_rx })
            })
            .map_err(|_| ModelError::ThreadGone)?;
        match ready_rx.recv() {
            Ok(Ok((shared, init_log))) => Ok(Model {
                commands: Some(cmd_tx),
                shared,
                next_id: AtomicU64::new(1),
                abi,
                n_batch,
                init_log,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(ModelError::ThreadGone)
            }
        }
    }

    pub fn abi(&self) -> Abi {
        self.abi
    }

    /// What the runtime printed while `rkllm_init` ran.
    pub fn init_log(&self) -> &str {
        &self.init_log
    }

    /// Whether a run is inside `rkllm_run` now.
    pub fn is_running(&self) -> bool {
        self.shared.active.lock().map(|a| a.is_some()).unwrap_or(false)
    }

    /// Signs of life of the runtime thread (see [`Activity`]).
    pub fn activity(&self) -> Activity {
        let run = self.shared.active.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(id, _)| *id);
        self.shared.progress.activity(run)
    }

    /// Answered by the runtime thread when it takes its next command: an
    /// idle thread answers at once; one stuck in a runtime call never does.
    pub fn ping(&self) -> oneshot::Receiver<Result<(), ModelError>> {
        self.request(|reply| Command::Ping { reply })
    }

    /// Queues a run on the runtime thread. Its events go to `events`; the
    /// returned control aborts it from any thread.
    pub fn submit(&self, req: RunRequest, events: UnboundedSender<Event>) -> Result<RunControl, ModelError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cancelled = Arc::new(AtomicBool::new(false));
        self.send(Command::Run { req, id, cancelled: cancelled.clone(), events })?;
        Ok(RunControl { id, cancelled, shared: self.shared.clone() })
    }

    /// Queues a batched run (`n_batch` > 1): `slots` has one channel per
    /// input, `None` for a filler input whose tokens nobody reads. Each slot
    /// gets `Started`, its tokens and its own `Finished` — as soon as its
    /// reply ends (token id < 0), or when `rkllm_run` returns. The receiver
    /// gets the run's own `Finished` (code, the batch's perf, surprises).
    pub fn submit_batch(
        &self,
        req: BatchRequest,
        slots: Vec<Option<UnboundedSender<Event>>>,
    ) -> Result<(RunControl, oneshot::Receiver<BatchEnd>), ModelError> {
        let n = usize::from(self.n_batch);
        if self.n_batch < 2 || req.slots.len() != n || slots.len() != n {
            return Err(ModelError::BatchSize { given: req.slots.len().min(slots.len()), n_batch: self.n_batch });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cancelled = Arc::new(AtomicBool::new(false));
        let (done, finished) = oneshot::channel();
        let run = crate::batch::BatchRun { req, id, cancelled: cancelled.clone(), slots, done };
        self.send(Command::RunBatch { run })?;
        Ok((RunControl { id, cancelled, shared: self.shared.clone() }, finished))
    }

    /// `rkllm_clear_kv_cache(h, keep_system_prompt, NULL, NULL)`.
    pub fn clear_kv_cache(&self, keep_system_prompt: bool) -> oneshot::Receiver<Result<(), ModelError>> {
        self.request(|reply| Command::ClearKvCache { keep_system_prompt, reply })
    }

    /// `rkllm_get_kv_cache_size`: tokens in the KV cache per batch slot.
    pub fn kv_cache_size(&self) -> oneshot::Receiver<Result<Vec<i32>, ModelError>> {
        self.request(|reply| Command::KvCacheSize { reply })
    }

    /// `rkllm_set_chat_template`; empty strings disable the runtime's template.
    pub fn set_chat_template(
        &self,
        system: &str,
        prefix: &str,
        postfix: &str,
    ) -> oneshot::Receiver<Result<(), ModelError>> {
        match cstrings([system, prefix, postfix], "the chat template") {
            Ok(parts) => self.request(|reply| Command::SetChatTemplate { parts, reply }),
            Err(e) => ready(Err(e)),
        }
    }

    /// `rkllm_set_function_tools`.
    pub fn set_function_tools(
        &self,
        system: &str,
        tools_json: &str,
        tool_response_tag: &str,
    ) -> oneshot::Receiver<Result<(), ModelError>> {
        match cstrings([system, tools_json, tool_response_tag], "the function tools") {
            Ok(parts) => self.request(|reply| Command::SetFunctionTools { parts, reply }),
            Err(e) => ready(Err(e)),
        }
    }

    /// `rkllm_load_lora`: afterwards a run may name the adapter ([`RunRequest::lora`]).
    pub fn load_lora(&self, adapter: &LoraAdapter) -> oneshot::Receiver<Result<(), ModelError>> {
        self.handle_load(Load::lora(adapter))
    }

    /// `rkllm_load_prompt_cache`: the runtime matches later inputs against it from the start.
    pub fn load_prompt_cache(&self, path: &str) -> oneshot::Receiver<Result<(), ModelError>> {
        self.handle_load(Load::prompt_cache(path))
    }

    /// `rkllm_release_prompt_cache`.
    pub fn release_prompt_cache(&self) -> oneshot::Receiver<Result<(), ModelError>> {
        self.handle_load(Ok(Load::ReleasePromptCache))
    }

    fn handle_load(&self, what: Result<Load, ModelError>) -> oneshot::Receiver<Result<(), ModelError>> {
        match what {
            Ok(what) => self.request(|reply| Command::Load { what, reply }),
            Err(e) => ready(Err(e)),
        }
    }

    fn send(&self, cmd: Command) -> Result<(), ModelError> {
        self.commands.as_ref().ok_or(ModelError::ThreadGone)?.send(cmd).map_err(|_| ModelError::ThreadGone)
    }

    fn request<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> oneshot::Receiver<Result<T, ModelError>> {
        let (tx, rx) = oneshot::channel();
        // If the thread is gone, the dropped reply sender makes the receiver fail.
        let _ = self.send(make(tx));
        rx
    }
}

fn ready<T>(value: Result<T, ModelError>) -> oneshot::Receiver<Result<T, ModelError>> {
    let (tx, rx) = oneshot::channel();
    let _ = tx.send(value);
    rx
}

/// Text for C: NUL characters cannot cross a C string and are dropped.
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "")).unwrap_or_default()
}

fn cstrings(parts: [&str; 3], what: &'static str) -> Result<[CString; 3], ModelError> {
    let [a, b, c] = parts.map(CString::new);
    Ok([
        a.map_err(|_| ModelError::Nul(what))?,
        b.map_err(|_| ModelError::Nul(what))?,
        c.map_err(|_| ModelError::Nul(what))?,
    ])
}

impl Model {
    /// Aborts whatever run is inside `rkllm_run` now (shutdown); runs still
    /// queued on the thread are not affected.
    pub fn abort_active(&self) {
        let active = self.shared.active.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, cancelled)) = active.as_ref() {
            // Marked like any abort, so the run's `Finish::aborted` says so.
            cancelled.store(true, Ordering::SeqCst);
            // SAFETY: a run is active, so the handle is alive.
            unsafe { (self.shared.abort)(self.shared.handle) };
        }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        self.abort_active();
        // Closing the command channel ends the thread's loop after the
        // current command; it then destroys the handle.
        self.commands.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type Ready = mpsc::Sender<Result<(Arc<Shared>, String), ModelError>>;

/// `runtime_thread` with the loaded runtime's ABI.
struct RuntimeThread<'a> {
    cfg: &'a InitConfig,
    path: &'a CString,
    ready: Ready,
    commands: mpsc::Receiver<Command>,
}

impl WithFunctions for RuntimeThread<'_> {
    type Output = ();
    fn call<A: Listed>(self, fns: Functions<A>) {
        runtime_thread(fns, self.cfg, self.path, self.ready, self.commands)
    }
}

fn runtime_thread<A: Marshal>(
    fns: Functions<A>,
    cfg: &InitConfig,
    path: &CString,
    ready: Ready,
    commands: mpsc::Receiver<Command>,
) {
    // SAFETY: calling the runtime's own constructor for its param struct.
    let mut param = unsafe { (fns.create_default_param)() };
    // The tags live on this frame, past rkllm_destroy: on ABI 1.2 the
    // runtime may keep the pointers it was given at init.
    let tags = cfg.image_tags.as_ref().map(|t| [&t.start, &t.end, &t.content].map(|s| c_string(s)));
    let tag_pointers = tags.as_ref().map_or([std::ptr::null(); 3], |t| [t[0].as_ptr(), t[1].as_ptr(), t[2].as_ptr()]);
    marshal::apply_config::<A>(&mut param, cfg, path.as_ptr(), tag_pointers);
    let mut storage = A::callback_storage(on_result);
    let mut handle: LLMHandle = std::ptr::null_mut();
    // SAFETY: param and storage outlive the handle (they live on this frame
    // until after rkllm_destroy); the path CString outlives init.
    let (code, log) = capture_output(|| unsafe { A::init(&fns, &mut handle, &mut param, &mut storage) });
    if code != 0 || handle.is_null() {
        let _ = ready.send(Err(ModelError::Init { code, log }));
        return;
    }
    echo(&log);
    let shared = Arc::new(Shared { handle, abort: fns.abort, active: Mutex::new(None), progress: Progress::new() });
    if ready.send(Ok((shared.clone(), log))).is_err() {
        // SAFETY: the handle was initialised above and is not used after this.
        unsafe { (fns.destroy)(handle) };
        return;
    }
    while let Ok(cmd) = commands.recv() {
        match cmd {
            Command::Run { req, id, cancelled, events } => run_one(&fns, &shared, req, id, &cancelled, events),
            Command::RunBatch { run } => crate::batch::run_batch(&fns, &shared, run),
            Command::ClearKvCache { keep_system_prompt, reply } => {
                // SAFETY: valid handle; NULL range pointers are allowed.
                let code = unsafe {
                    (fns.clear_kv_cache)(
                        handle,
                        c_int::from(keep_system_prompt),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                };
                let _ = reply.send(checked("rkllm_clear_kv_cache", code));
            }
            Command::KvCacheSize { reply } => {
                // One entry per batch slot (n_batch ≤ 100, the runtime's bound).
                let mut sizes = vec![0 as c_int; 100];
                // SAFETY: valid handle; the buffer holds more than n_batch entries.
                let code = unsafe { (fns.get_kv_cache_size)(handle, sizes.as_mut_ptr()) };
                sizes.truncate(usize::from(cfg.n_batch.max(1)));
                let _ = reply.send(checked("rkllm_get_kv_cache_size", code).map(|_| sizes));
            }
            Command::SetChatTemplate { parts: [a, b, c], reply } => {
                // SAFETY: valid handle and NUL-terminated strings.
                let code = unsafe { (fns.set_chat_template)(handle, a.as_ptr(), b.as_ptr(), c.as_ptr()) };
                let _ = reply.send(checked("rkllm_set_chat_template", code));
            }
            Command::SetFunctionTools { parts: [a, b, c], reply } => {
                // SAFETY: valid handle and NUL-terminated strings.
                let code = unsafe { (fns.set_function_tools)(handle, a.as_ptr(), b.as_ptr(), c.as_ptr()) };
                let _ = reply.send(checked("rkllm_set_function_tools", code));
            }
            Command::Ping { reply } => {
                let _ = reply.send(Ok(()));
            }
            Command::Load { what, reply } => {
                let _ = reply.send(what.call(&fns, handle));
            }
        }
    }
    // SAFETY: no run is active and no command can arrive any more.
    unsafe { (fns.destroy)(handle) };
}

fn checked(call: &'static str, code: c_int) -> Result<(), ModelError> {
    if code == 0 {
        Ok(())
    } else {
        Err(ModelError::Call { call, code })
    }
}

/// What the callback works with during one run (its `userdata`).
struct RunContext {
    events: UnboundedSender<Event>,
    utf8: Utf8Assembler,
    perf: Option<RKLLMPerfStat>,
    runtime_error: bool,
    shared: Arc<Shared>,
    /// The run's abort flag: an abort that arrived between marking the run
    /// active and the runtime entering it may have been ignored by the
    /// runtime, so the first token re-issues it (from another thread).
    cancelled: Arc<AtomicBool>,
    /// The run's id, for that re-issued abort.
    id: u64,
    reissued_abort: bool,
    /// A hidden-layer or logits run: what to copy, and the copy.
    capture: Option<Capture>,
    output: Option<Result<Matrix, CaptureError>>,
}

fn run_one<A: Marshal>(
    fns: &Functions<A>,
    shared: &Arc<Shared>,
    req: RunRequest,
    id: u64,
    cancelled: &Arc<AtomicBool>,
    events: UnboundedSender<Event>,
) {
    if !enter(shared, id, cancelled, req.input.text_bytes()) {
        let _ = events.send(Event::Finished(Finish::skipped(Instant::now())));
        return;
    }
    // Both buffers outlive the blocking call below.
    let (prompt, mut ids) = match req.input {
        RunInput::Prompt(text) => (CString::new(text.replace('\0', "")).unwrap_or_default(), Vec::new()),
        RunInput::Tokens(ids) => (CString::default(), ids),
    };
    let role = req.role.as_cstr().as_ptr();
    // A multimodal run's buffers (embeddings, tags) outlive the blocking call too.
    let mut images = req.images.map(|images| {
        let tags = [&images.tags.start, &images.tags.end, &images.tags.content].map(|s| c_string(s));
        (images, tags)
    });
    let mut input = if let Some((images, tags)) = images.as_mut() {
        let args = ImagesArgs {
            // The header's `char*`: the runtime reads the prompt, never writes it.
            prompt: prompt.as_ptr().cast_mut(),
            embed: images.embeddings.as_mut_ptr(),
            n_image: images.n_image,
            n_image_tokens: images.n_image_tokens,
            width: images.width,
            height: images.height,
            tags: Some([tags[0].as_ptr(), tags[1].as_ptr(), tags[2].as_ptr()]),
        };
        A::multimodal_input(role, &args, req.enable_thinking)
    } else if ids.is_empty() {
        A::prompt_input(role, prompt.as_ptr(), req.enable_thinking)
    } else {
        A::token_input(role, &mut ids, req.enable_thinking)
    };
    let mut sampling = req.sampling.map(SamplingParams::to_ffi);
    let sampling_ptr = sampling.as_mut().map_or(std::ptr::null_mut(), |s| s as *mut _);
    let mode = match &req.capture {
        None => RKLLMInferMode::Generate,
        Some(Capture::HiddenLayer { .. }) => RKLLMInferMode::GetLastHiddenLayer,
        Some(Capture::Logits { .. }) => RKLLMInferMode::GetLogits,
    };
    let mut extras = RunExtras::new(req.lora.as_deref(), req.save_prompt_cache.as_deref());
    let (lora, prompt_cache) = extras.pointers();
    let mut infer = A::infer_param(InferArgs {
        mode,
        keep_history: req.keep_history,
        max_new_tokens: req.max_new_tokens,
        sampling: sampling_ptr,
        lora,
        prompt_cache,
    });
    let mut ctx = RunContext {
        capture: req.capture,
        output: None,
        events,
        utf8: Utf8Assembler::new(),
        perf: None,
        runtime_error: false,
        shared: shared.clone(),
        cancelled: cancelled.clone(),
        id,
        reissued_abort: false,
    };
    let _ = ctx.events.send(Event::Started { at: Instant::now(), run: id });
    let mut callback: &mut dyn OnResult = &mut ctx;
    // SAFETY: every pointer (input, prompt, sampling, extras, infer, ctx) outlives the
    // blocking call; the callback only uses ctx through this userdata.
    let code = unsafe { (fns.run)(shared.handle, &mut input, &mut infer, userdata(&mut callback)) };
    let at = leave(shared);
    let finish = Finish {
        at,
        started: true,
        code,
        runtime_error: ctx.runtime_error,
        aborted: cancelled.load(Ordering::SeqCst),
        perf: ctx.perf.map(Perf::from),
        tail: ctx.utf8.finish(),
        output: ctx.output.take(),
        surprises: Vec::new(),
    };
    let _ = ctx.events.send(Event::Finished(finish));
}

impl OnResult for RunContext {
    fn on_result(&mut self, result: *mut RKLLMResult, state: c_int, at: Instant) -> c_int {
        // SAFETY: the runtime passes a valid result (or NULL) for the call's duration.
        self.on_callback(unsafe { result.as_ref() }, state, at)
    }
}

impl RunContext {
    /// A hidden-layer or logits run's buffer: copied once, then released.
    fn on_output(&mut self, result: Option<&RKLLMResult>) -> Option<c_int> {
        let (capture, result) = (self.capture.as_ref()?, result?);
        let copied = output::copy(capture, result)?;
        self.output.get_or_insert(copied);
        Some(callback_return::RELEASE)
    }

    fn on_callback(&mut self, result: Option<&RKLLMResult>, state: c_int, at: Instant) -> c_int {
        if state != call_state::ERROR {
            if let Some(answer) = self.on_output(result) {
                self.shared.progress.callback(at, false);
                if state == call_state::FINISH {
                    self.perf = result.map(|r| r.perf);
                }
                return answer;
            }
        }
        self.on_token_or_end(result, state, at);
        callback_return::CONTINUE
    }

    fn on_token_or_end(&mut self, result: Option<&RKLLMResult>, state: c_int, at: Instant) {
        self.shared.progress.callback(at, matches!(state, call_state::NORMAL | call_state::WAITING));
        match state {
            call_state::NORMAL | call_state::WAITING => {
                let Some(result) = result else { return };
                let _ = self.events.send(Event::Token(token(result, state, at, &mut self.utf8)));
                if !self.reissued_abort && self.cancelled.load(Ordering::SeqCst) {
                    self.reissued_abort = true;
                    self.shared.reissue_abort(self.id);
                }
            }
            call_state::FINISH => self.perf = result.map(|r| r.perf),
            call_state::ERROR => self.runtime_error = true,
            _ => {}
        }
    }
}
