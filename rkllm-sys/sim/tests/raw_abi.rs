//! The C functions called directly through the in-process table, for what
//! `Model` never does: concurrent runs, pausing, aborting idle or during
//! prefill, bad handles and bad parameters.

use rkllm_sys::common::*;
use rkllm_sys::{capture_output, v1_3, Abi, Functions, V1_3};
use std::ffi::{c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

fn functions() -> Functions<V1_3> {
    rkllm_sim::table(Abi::V1_3).functions::<V1_3>().expect("asked for 1.3")
}

/// What one run's callbacks saw.
#[derive(Default)]
struct Probe {
    /// (state, bytes, perf) per callback.
    seen: Mutex<Vec<(c_int, Vec<u8>, RKLLMPerfStat)>>,
    /// Return PAUSE after this many tokens.
    pause_after: Option<usize>,
    /// Told the token count after every token.
    tokens: Mutex<Option<mpsc::Sender<usize>>>,
}

impl Probe {
    fn states(&self) -> Vec<c_int> {
        self.seen.lock().unwrap().iter().map(|s| s.0).collect()
    }
    fn tokens(&self) -> Vec<Vec<u8>> {
        self.seen.lock().unwrap().iter().filter(|s| s.0 <= call_state::WAITING).map(|s| s.1.clone()).collect()
    }
    fn finish_perf(&self) -> Option<RKLLMPerfStat> {
        self.seen.lock().unwrap().iter().find(|s| s.0 == call_state::FINISH).map(|s| s.2)
    }
}

unsafe extern "C" fn on_result(result: *mut RKLLMResult, userdata: *mut c_void, state: c_int) -> c_int {
    let probe = unsafe { &*(userdata as *const Probe) };
    let result = unsafe { &*result };
    let bytes =
        if result.text.is_null() { Vec::new() } else { unsafe { CStr::from_ptr(result.text) }.to_bytes().to_vec() };
    let mut seen = probe.seen.lock().unwrap();
    seen.push((state, bytes, result.perf));
    let count = seen.iter().filter(|s| s.0 <= call_state::WAITING).count();
    if let Some(tx) = &*probe.tokens.lock().unwrap() {
        let _ = tx.send(count);
    }
    let token = state <= call_state::WAITING;
    c_int::from(token && probe.pause_after == Some(count))
}

/// An initialised handle (or the init code) for `model_path`.
struct Raw {
    fns: Functions<V1_3>,
    handle: LLMHandle,
}

// The handle is an opaque address; the simulator allows calls from any thread.
unsafe impl Send for Raw {}
unsafe impl Sync for Raw {}

fn param(model_path: &CStr) -> v1_3::RKLLMParam {
    let fns = functions();
    let mut param = unsafe { (fns.create_default_param)() };
    param.model_path = model_path.as_ptr();
    param
}

fn init_with(param: &mut v1_3::RKLLMParam, result_userdata: *mut c_void) -> (c_int, Raw) {
    let fns = functions();
    let mut callback = v1_3::RKLLMCallback {
        result_callback: Some(on_result),
        result_userdata,
        tokenizer_callback: None,
        tokenizer_userdata: ptr::null_mut(),
        embed_callback: None,
        embed_userdata: ptr::null_mut(),
    };
    let mut handle: LLMHandle = ptr::null_mut();
    // The callback struct is dropped right after: the runtime must copy it.
    let code = unsafe { (fns.init)(&mut handle, param, &mut callback) };
    (code, Raw { fns, handle })
}

fn init(model_path: &str) -> Raw {
    let path = CString::new(model_path).unwrap();
    let (code, raw) = init_with(&mut param(&path), ptr::null_mut());
    assert_eq!(code, 0, "init {model_path}");
    raw
}

impl Raw {
    fn run(&self, prompt: &str, probe: *const Probe) -> c_int {
        let prompt = CString::new(prompt).unwrap();
        let mut input: v1_3::RKLLMInput = unsafe { std::mem::zeroed() };
        input.role = c"user".as_ptr();
        input.input_type = RKLLMInputType::Prompt;
        input.input.prompt_input = prompt.as_ptr();
        let mut infer = v1_3::RKLLMInferParam {
            mode: RKLLMInferMode::Generate,
            lora_params: ptr::null_mut(),
            prompt_cache_params: ptr::null_mut(),
            sampling_params: ptr::null_mut(),
            keep_history: 0,
            max_new_tokens: 0,
        };
        unsafe { (self.fns.run)(self.handle, &mut input, &mut infer, probe as *mut c_void) }
    }
    fn abort(&self) -> c_int {
        unsafe { (self.fns.abort)(self.handle) }
    }
    fn is_running(&self) -> c_int {
        unsafe { (self.fns.is_running)(self.handle) }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            unsafe { (self.fns.destroy)(self.handle) };
        }
    }
}

#[test]
fn a_second_run_on_a_running_handle_is_refused_without_callbacks() {
    let raw = init("sim:qwen2.5-1.5b?time_scale=0.2&reply_tokens=300");
    let (tx, rx) = mpsc::channel();
    let first = Probe { tokens: Mutex::new(Some(tx)), ..Probe::default() };
    let second = Probe::default();
    std::thread::scope(|s| {
        let running = s.spawn(|| raw.run("a long answer", &first));
        rx.recv_timeout(Duration::from_secs(10)).expect("first token arrives");
        assert_eq!(raw.is_running(), 1);
        assert_eq!(raw.run("meanwhile", &second), -1, "concurrent rkllm_run is refused");
        assert!(second.states().is_empty(), "the refused run made no callbacks");
        assert_eq!(raw.abort(), 0);
        assert_eq!(running.join().unwrap(), 0, "the first run ends normally after the abort");
    });
    assert_eq!(raw.is_running(), 0);
    let states = first.states();
    assert_eq!(states.last(), Some(&call_state::FINISH));
    assert_eq!(states.iter().filter(|s| **s >= call_state::FINISH).count(), 1);
}

#[test]
fn a_paused_reply_resumes_with_the_next_run() {
    let whole = Probe::default();
    assert_eq!(init("sim:instant?reply_tokens=10").run("tell a story", &whole), 0);

    let raw = init("sim:instant?reply_tokens=10");
    let paused = Probe { pause_after: Some(3), ..Probe::default() };
    assert_eq!(raw.run("tell a story", &paused), 0);
    assert_eq!(paused.tokens().len(), 3);
    assert!(!paused.states().contains(&call_state::FINISH), "no FINISH while paused");
    assert_eq!(raw.is_running(), 0);

    let resumed = Probe::default();
    assert_eq!(raw.run("this input is ignored", &resumed), 0);
    assert_eq!(resumed.tokens().len(), 7);
    let perf = resumed.finish_perf().expect("FINISH at the end of the resumed reply");
    assert_eq!((perf.prefill_tokens, perf.generate_tokens), (0, 7));
    let joined: Vec<Vec<u8>> = paused.tokens().into_iter().chain(resumed.tokens()).collect();
    assert_eq!(joined, whole.tokens(), "the same reply, continued");
}

#[test]
fn the_prefill_cannot_be_aborted_but_no_token_follows_it() {
    let raw = init("sim:instant?prefill_extra_ms=150&reply_tokens=5");
    let probe = Probe::default();
    let started = Instant::now();
    std::thread::scope(|s| {
        let running = s.spawn(|| raw.run("hello", &probe));
        while raw.is_running() != 1 {
            std::thread::yield_now();
        }
        assert_eq!(raw.abort(), 0);
        assert_eq!(running.join().unwrap(), 0);
    });
    assert!(started.elapsed() >= Duration::from_millis(150), "the prefill ran to its end");
    assert_eq!(probe.states(), [call_state::FINISH]);
    assert_eq!(probe.finish_perf().unwrap().generate_tokens, 0);
}

#[test]
fn an_abort_while_idle_does_nothing() {
    let raw = init("sim:instant?reply_tokens=6");
    assert_eq!(raw.abort(), 0);
    let probe = Probe::default();
    assert_eq!(raw.run("hello", &probe), 0);
    assert_eq!(probe.tokens().len(), 6);
}

#[test]
fn null_run_userdata_falls_back_to_result_userdata() {
    let probe = Probe::default();
    let path = c"sim:instant?reply_tokens=4";
    let (code, raw) = init_with(&mut param(path), &probe as *const Probe as *mut c_void);
    assert_eq!(code, 0);
    assert_eq!(raw.run("hello", ptr::null()), 0);
    assert_eq!(probe.tokens().len(), 4);
    assert_eq!(probe.states().last(), Some(&call_state::FINISH));
}

#[test]
fn null_and_unknown_handles_get_an_error_code() {
    let fns = functions();
    let bogus = 0x5eed as LLMHandle;
    for handle in [ptr::null_mut(), bogus] {
        unsafe {
            assert_eq!((fns.abort)(handle), -1);
            assert_eq!((fns.is_running)(handle), -1);
            assert_eq!((fns.destroy)(handle), -1);
            assert_eq!((fns.clear_kv_cache)(handle, 0, ptr::null_mut(), ptr::null_mut()), -1);
            let mut size = 0;
            assert_eq!((fns.get_kv_cache_size)(handle, &mut size), -1);
            assert_eq!((fns.set_chat_template)(handle, c"".as_ptr(), c"".as_ptr(), c"".as_ptr()), -1);
        }
        assert_eq!(Raw { fns, handle }.run("hello", ptr::null()), -1);
    }
    // A destroyed handle is unknown from then on.
    let mut raw = init("sim:instant");
    assert_eq!(unsafe { (fns.destroy)(raw.handle) }, 0);
    assert_eq!(unsafe { (fns.destroy)(raw.handle) }, -1);
    assert_eq!(raw.run("hello", ptr::null()), -1);
    raw.handle = ptr::null_mut();
    // No handle pointer to write to.
    let mut p = param(c"sim:instant");
    assert_eq!(unsafe { (fns.init)(ptr::null_mut(), &mut p, ptr::null_mut()) }, -1);
}

#[test]
fn n_batch_outside_1_to_100_fails_init_like_the_vendor_runtime() {
    for n_batch in [0, 101] {
        let mut p = param(c"sim:instant");
        p.extend_param.n_batch = n_batch;
        let ((code, raw), log) = capture_output(|| init_with(&mut p, ptr::null_mut()));
        assert_eq!(code, -1);
        assert!(raw.handle.is_null(), "the handle stays NULL");
        assert!(log.contains(&format!("E rkllm: The n_batch must be between 1 and 100, but got {n_batch}")), "{log}");
    }
}
