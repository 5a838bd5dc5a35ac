//! One simulated model behind a handle: what `rkllm_init` set up, the KV
//! cache and template state, and every handle operation but the run itself
//! (which is in `run`).

use crate::call::InitParams;
use crate::config::{self, ConfigError, SimConfig};
use crate::gate::RunGate;
use crate::generate::Piece;
use crate::log;
use crate::record::{self, Recorder};
use crate::script::Script;
use crate::template::ChatTemplate;
use rkllm_sys::common::LLMResultCallback;
use serde_json::json;
use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicUsize;
use std::sync::{Mutex, MutexGuard};

/// Where results go: the callback and the `userdata` used when `rkllm_run`
/// is given none (`result_userdata` on ABI 1.3, NULL on 1.2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Callback {
    pub function: Option<LLMResultCallback>,
    /// A pointer kept as an address: the runtime never dereferences it.
    pub userdata: usize,
}

impl Callback {
    pub fn new(function: Option<LLMResultCallback>, userdata: *mut c_void) -> Self {
        Callback { function, userdata: userdata as usize }
    }
}

/// One batch slot's reply being delivered.
#[derive(Debug)]
pub(crate) struct SlotReply {
    pub pieces: Vec<Piece>,
    /// Index of the next piece to deliver.
    pub next: usize,
    /// `max_new_tokens` or the context size cut the reply short.
    pub truncated: bool,
}

impl SlotReply {
    pub fn finished(&self) -> bool {
        self.next >= self.pieces.len()
    }
}

/// A run's replies, one per batch slot, kept across a pause.
#[derive(Debug)]
pub(crate) struct Reply {
    pub slots: Vec<SlotReply>,
    pub keep_history: bool,
    /// Steps delivered (callbacks with tokens), across pauses.
    pub steps: usize,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    /// Per batch slot: the token ids in its KV cache, in order (the ids
    /// prefilled, then the ids generated).
    pub kv: Vec<Vec<u32>>,
    /// How many ids at the start of every slot are the template's system part.
    pub kv_system_tokens: usize,
    pub template: ChatTemplate,
    /// A reply whose run was paused by its callback.
    pub paused: Option<Reply>,
    /// The adapters `rkllm_load_lora` loaded.
    pub loras: Vec<Lora>,
    /// The ids of the prompt cache `rkllm_load_prompt_cache` loaded: one
    /// prompt (a file of a single run), or one per slot (a batched run's).
    pub prompt_cache: Option<Vec<Vec<u32>>>,
    /// The images the slots' KV caches hold (`vision::held` reads which
    /// are still there): a follow-up run's reply still sees them.
    pub images: Vec<crate::vision::Held>,
}

/// An adapter `rkllm_load_lora` loaded (`adapters.rs`).
#[derive(Debug, Clone)]
pub(crate) struct Lora {
    pub name: String,
    pub scale: f32,
}

impl State {
    /// Empties the KV cache, or all but the system prompt at its start, and
    /// drops a paused reply (whose context that was).
    pub fn clear(&mut self, keep_system_prompt: bool) {
        self.paused = None;
        let keep = if keep_system_prompt { self.kv_system_tokens } else { 0 };
        self.kv.iter_mut().for_each(|slot| slot.truncate(keep));
        self.kv_system_tokens = self.kv.iter().map(Vec::len).min().unwrap_or(0);
    }
}

#[derive(Debug)]
pub(crate) struct SimModel {
    pub params: InitParams,
    pub config: SimConfig,
    pub script: Option<Script>,
    pub recorder: Recorder,
    pub callback: Callback,
    pub gate: RunGate,
    pub state: Mutex<State>,
    /// Runs that hung so far (`hang_runs`).
    pub hung: AtomicUsize,
}

/// The most batch slots the simulator runs (the manual recommends at most 8).
pub(crate) const MAX_BATCH: u8 = 8;

/// Prints the lines of a failed init; `rkllm_init` returns -1.
fn failed(lines: &[&str]) -> c_int {
    lines.iter().for_each(|l| log::line(l));
    -1
}

impl SimModel {
    /// `rkllm_init`: reads the configuration from the model path, checks the
    /// parameters like the vendor runtime, prints its banner lines.
    pub fn init(params: InitParams, callback: Callback) -> Result<SimModel, c_int> {
        log::line(&format!(
            "I rkllm: rkllm-runtime version: {} (simulated), rknpu driver version: 0.9.8, platform: RK3588",
            crate::version(params.abi)
        ));
        let path = params.model_path.as_deref().unwrap_or("(null)");
        let config = config::parse(path, |name| std::env::var(name).ok()).map_err(|e| match e {
            ConfigError::NoModelFile(path) => {
                failed(&[&format!("E rkllm: failed to open model file: {path}"), "E rkllm: invalid rkllm model!"])
            }
            ConfigError::Invalid(message) => failed(&[&format!("E rkllm: {message}")]),
        })?;
        let recorder = Recorder::open(config.record.as_deref()).map_err(|m| failed(&[&format!("E rkllm: {m}")]))?;
        recorder.write(record::init(&params, callback.function.is_some()));
        let n_batch = params.extend.n_batch;
        if !(1..=100).contains(&n_batch) {
            return Err(failed(&[&format!("E rkllm: The n_batch must be between 1 and 100, but got {n_batch}")]));
        }
        if params.max_context_len <= 0 {
            return Err(failed(&[&format!(
                "E rkllm: max_context_len must be greater than 0, but got {}",
                params.max_context_len
            )]));
        }
        if n_batch > MAX_BATCH {
            return Err(failed(&[&format!(
                "E rkllm: n_batch {n_batch}: the simulated runtime batches at most {MAX_BATCH} sequences (the manual recommends no more)"
            )]));
        }
        std::thread::sleep(std::time::Duration::from_secs_f64(config.init_ms / 1000.0));
        if let Some(kind) = &config.fail_init {
            return Err(failed(&[config::fail_init_line(kind)]));
        }
        let script =
            config.script.as_deref().map(Script::load).transpose().map_err(|m| failed(&[&format!("E rkllm: {m}")]))?;
        log::line(&format!(
            "I rkllm: rkllm-toolkit version: simulated, max_context_limit: {}, npu_core_num: 3, target_platform: RK3588, model_dtype: W8A8",
            config.context_limit.unwrap_or(config.profile.context_limit)
        ));
        // Load the tokenizer now, as the vendor runtime loads the model's: a
        // first run must not spend its time to first token building it.
        crate::vocab_size();
        let state = State { kv: vec![Vec::new(); usize::from(n_batch)], ..State::default() };
        let (gate, hung) = (RunGate::default(), AtomicUsize::new(0));
        Ok(SimModel { params, config, script, recorder, callback, gate, state: Mutex::new(state), hung })
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handle operations other than abort are refused during a run: the
    /// vendor runtime leaves them undefined, and a caller doing that has a bug.
    pub(crate) fn refuse_if_running(&self, call: &str) -> Result<(), c_int> {
        if self.gate.is_running() {
            log::line(&format!("E rkllm: {call} called while rkllm_run is in progress on this handle"));
            return Err(-1);
        }
        Ok(())
    }

    pub fn abort(&self) -> c_int {
        let reentrant = crate::gate::inside_callback();
        self.recorder.write(json!({"call": "abort", "running": self.gate.is_running(), "reentrant": reentrant}));
        if reentrant && self.config.reentrant_abort_deadlocks {
            // As a runtime that holds one lock around the callback and in abort.
            crate::log::line("E rkllm: rkllm_abort called from inside the result callback: deadlocked");
            loop {
                std::thread::park();
            }
        }
        self.gate.abort();
        0
    }

    /// The KV cache is cleared as a whole (or down to the system prompt);
    /// the optional position ranges of the C call are not simulated.
    pub fn clear_kv_cache(&self, keep_system_prompt: bool) -> c_int {
        self.recorder.write(json!({"call": "clear_kv_cache", "keep_system_prompt": keep_system_prompt}));
        if let Err(code) = self.refuse_if_running("rkllm_clear_kv_cache") {
            return code;
        }
        self.state().clear(keep_system_prompt);
        0
    }

    /// What `rkllm_get_kv_cache_size` reports per slot: the ids in the
    /// slot's cache, plus `kv_size_skew` (a fault switch).
    pub fn kv_cache_sizes(&self) -> Vec<c_int> {
        let skew = i64::from(self.config.kv_size_skew);
        let sizes = self.state().kv.iter().map(|slot| slot.len() as i64 + skew).collect::<Vec<_>>();
        sizes.into_iter().map(|n| c_int::try_from(n.max(0)).unwrap_or(c_int::MAX)).collect()
    }

    /// Takes effect at once and clears the whole KV cache, as on the vendor runtime.
    pub fn set_chat_template(&self, parts: [Option<String>; 3]) -> c_int {
        self.recorder.write(record::strings("set_chat_template", ["system", "prefix", "postfix"], &parts));
        if let Err(code) = self.refuse_if_running("rkllm_set_chat_template") {
            return code;
        }
        let [system, prefix, postfix] = parts.map(Option::unwrap_or_default);
        let mut state = self.state();
        state.template = ChatTemplate::new(&system, &prefix, &postfix);
        state.clear(false);
        0
    }

    /// Recorded only: the simulated model neither sees tools nor calls them.
    pub fn set_function_tools(&self, parts: [Option<String>; 3]) -> c_int {
        self.recorder.write(record::strings("set_function_tools", ["system", "tools", "tool_response_tag"], &parts));
        if let Err(code) = self.refuse_if_running("rkllm_set_function_tools") {
            return code;
        }
        0
    }

    /// `num_tokens` of the `RKLLMCrossAttnParam`, `None` for a NULL pointer.
    pub fn set_cross_attn_params(&self, num_tokens: Option<c_int>) -> c_int {
        self.recorder.write(json!({"call": "set_cross_attn_params", "num_tokens": num_tokens}));
        if let Err(code) = self.refuse_if_running("rkllm_set_cross_attn_params") {
            return code;
        }
        if num_tokens.is_none() {
            log::line("E rkllm: rkllm_set_cross_attn_params: params must not be NULL");
            return -1;
        }
        if self.params.extend.use_cross_attn == 0 {
            log::line("E rkllm: rkllm_set_cross_attn_params: the model was initialised without use_cross_attn");
            return -1;
        }
        0
    }

    /// Whether the handle may be destroyed now (not while a run is in progress).
    pub fn destroy(&self) -> c_int {
        self.recorder.write(json!({"call": "destroy"}));
        match self.refuse_if_running("rkllm_destroy") {
            Ok(()) => 0,
            Err(code) => code,
        }
    }
}
