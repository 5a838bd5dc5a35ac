//! Types whose layout is the same in ABI 1.2.x and 1.3.0.
//!
//! Sizes and offsets are asserted field by field in `tests/layout.rs` against
//! docs/runtime.md, "Struct layouts"; change nothing here without changing those tests.

use std::ffi::{c_char, c_int, c_void};

/// Opaque runtime handle (`LLMHandle` is `void*` in the header).
pub type LLMHandle = *mut c_void;

/// Result callback: `int cb(RKLLMResult*, void* userdata, int state)`.
/// Declared returning `int` in both ABIs (1.2.x headers say `void`, but the
/// runtime reads the return value from 1.2.1 on); we always return 0.
pub type LLMResultCallback =
    unsafe extern "C" fn(result: *mut RKLLMResult, userdata: *mut c_void, state: c_int) -> c_int;

/// `LLMCallState` values passed as the callback's `state`.
pub mod call_state {
    use std::ffi::c_int;
    /// One decoded token; `text` is NUL-terminated.
    pub const NORMAL: c_int = 0;
    /// A generated token whose bytes do not yet complete a UTF-8 character.
    pub const WAITING: c_int = 1;
    /// End of generation (EOS, `max_new_tokens` or abort); `perf` is filled.
    pub const FINISH: c_int = 2;
    /// Runtime error; terminal.
    pub const ERROR: c_int = 3;
}

/// Values the callback may return.
pub mod callback_return {
    use std::ffi::c_int;
    pub const CONTINUE: c_int = 0;
    /// Pause the run; it resumes with another `rkllm_run`.
    pub const PAUSE: c_int = 1;
    /// Hidden-layer and logits runs: the result's buffer was copied, the
    /// runtime may free it at once.
    pub const RELEASE: c_int = 2;
}

/// `RKLLMInputType` (4-byte enum).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RKLLMInputType {
    Prompt = 0,
    Token = 1,
    Embed = 2,
    Multimodal = 3,
}

/// `RKLLMInferMode` (4-byte enum).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RKLLMInferMode {
    Generate = 0,
    GetLastHiddenLayer = 1,
    GetLogits = 2,
}

/// Size 120, align 4.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMExtendParam {
    pub base_domain_id: i32,
    pub embed_flash: i8,
    pub enabled_cpus_num: i8,
    pub enabled_cpus_mask: u32,
    /// Must be 1..=100; 0 makes `rkllm_init` fail with "The n_batch must be between 1 and 100".
    pub n_batch: u8,
    pub use_cross_attn: i8,
    pub reserved: [u8; 104],
}

/// Size 20, align 4. Filled by the runtime in the FINISH callback.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RKLLMPerfStat {
    pub prefill_time_ms: f32,
    /// Newly prefilled tokens only (a reused KV prefix is not counted).
    pub prefill_tokens: i32,
    pub generate_time_ms: f32,
    pub generate_tokens: i32,
    /// Peak resident memory of the process (VmHWM), MB.
    pub memory_usage_mb: f32,
}

/// Size 16.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMResultLastHiddenLayer {
    pub hidden_states: *const f32,
    pub embd_size: c_int,
    pub num_tokens: c_int,
}

/// Size 16.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMResultLogits {
    pub logits: *const f32,
    pub vocab_size: c_int,
    pub num_tokens: c_int,
}

/// Size 72, align 8.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMResult {
    pub text: *const c_char,
    pub token_id: i32,
    pub last_hidden_layer: RKLLMResultLastHiddenLayer,
    pub logits: RKLLMResultLogits,
    pub perf: RKLLMPerfStat,
}

/// Size 24.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMLoraAdapter {
    pub lora_adapter_path: *const c_char,
    pub lora_adapter_name: *const c_char,
    pub scale: f32,
}

/// Size 8.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMLoraParam {
    pub lora_adapter_name: *const c_char,
}

/// Size 16.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMPromptCacheParam {
    pub save_prompt_cache: c_int,
    pub prompt_cache_path: *const c_char,
}

/// Size 40.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMCrossAttnParam {
    pub encoder_k_cache: *mut f32,
    pub encoder_v_cache: *mut f32,
    pub encoder_mask: *mut f32,
    pub encoder_pos: *mut i32,
    pub num_tokens: c_int,
}

/// `{float* embed; size_t n_tokens}`, 16 B.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMEmbedInput {
    pub embed: *mut f32,
    pub n_tokens: usize,
}

/// `{int32_t* input_ids; size_t n_tokens}`, 16 B.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMTokenInput {
    pub input_ids: *mut i32,
    pub n_tokens: usize,
}

/// Size 36, align 4: `RKLLMInferParam.sampling_params` from ABI 1.3 on. "If
/// set, overrides the sampling params from RKLLMParam for this run."
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RKLLMSamplingParam {
    pub top_k: i32,
    pub top_p: f32,
    pub temperature: f32,
    pub repeat_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub mirostat: i32,
    pub mirostat_tau: f32,
    pub mirostat_eta: f32,
}
