//! ABI of runtime 1.3.0.

use crate::common::*;
use std::ffi::{c_char, c_int, c_void};

/// Size 184, align 8. Differs from 1.2.x: `ignore_eos_token` added, the image
/// fields removed, `extend_param` moved to offset 60.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMParam {
    pub model_path: *const c_char,
    pub max_context_len: i32,
    pub max_new_tokens: i32,
    pub top_k: i32,
    pub n_keep: i32,
    pub top_p: f32,
    pub temperature: f32,
    pub repeat_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub mirostat: i32,
    pub mirostat_tau: f32,
    pub mirostat_eta: f32,
    pub skip_special_token: bool,
    pub ignore_eos_token: bool,
    pub is_async: bool,
    pub extend_param: RKLLMExtendParam,
}

/// The images of a multimodal input, 64 B (an anonymous struct in `rkllm.h`).
/// Unlike 1.2.x, the start/end/content tags travel with each input.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMImageInput {
    /// `n_image × n_image_tokens × embedding_dim` floats.
    pub image_embed: *mut f32,
    pub n_image_tokens: usize,
    pub n_image: usize,
    pub image_start: *const c_char,
    pub image_end: *const c_char,
    pub image_content: *const c_char,
    /// The encoder's input size (M-RoPE positions).
    pub image_width: usize,
    pub image_height: usize,
}

/// The videos of a multimodal input, 72 B: never sent (zeroed).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMVideoInput {
    pub video_embed: *mut f32,
    pub n_frame_tokens: usize,
    pub n_frame_per_video: usize,
    pub n_video: usize,
    pub video_start: *const c_char,
    pub video_end: *const c_char,
    pub video_content: *const c_char,
    pub frame_width: usize,
    pub frame_height: usize,
}

/// Multimodal input, 144 B: the prompt carries one `<image>` marker per image.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMMultiModalInput {
    pub prompt: *mut c_char,
    pub image: RKLLMImageInput,
    pub video: RKLLMVideoInput,
}

/// The input union, 144 B.
#[repr(C)]
#[derive(Clone, Copy)]
pub union RKLLMInputUnion {
    pub prompt_input: *const c_char,
    pub embed_input: RKLLMEmbedInput,
    pub token_input: RKLLMTokenInput,
    pub multimodal_input: RKLLMMultiModalInput,
}

/// Size 160, align 8.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RKLLMInput {
    /// "user" or "tool".
    pub role: *const c_char,
    pub enable_thinking: bool,
    pub input_type: RKLLMInputType,
    pub input: RKLLMInputUnion,
}

/// Size 36, align 4. "If set, overrides the sampling params from
/// RKLLMParam for this run."
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

/// Size 40.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMInferParam {
    pub mode: RKLLMInferMode,
    pub lora_params: *mut RKLLMLoraParam,
    pub prompt_cache_params: *mut RKLLMPromptCacheParam,
    /// NULL: the sampling fields given at `rkllm_init` apply.
    pub sampling_params: *mut RKLLMSamplingParam,
    pub keep_history: c_int,
    /// `<= 0`: the value given at `rkllm_init` applies.
    pub max_new_tokens: c_int,
}

/// Optional tokenizer hook: not used by the daemon.
pub type LLMTokenizerCallback = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;
/// Optional embedding hook: not used by the daemon.
pub type LLMEmbedCallback = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;

/// Size 48. `rkllm_init` takes a pointer to this on 1.3.0 (a bare function
/// pointer on 1.2.x).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMCallback {
    pub result_callback: Option<LLMResultCallback>,
    /// Used when `rkllm_run` is given NULL userdata.
    pub result_userdata: *mut c_void,
    pub tokenizer_callback: LLMTokenizerCallback,
    pub tokenizer_userdata: *mut c_void,
    pub embed_callback: LLMEmbedCallback,
    pub embed_userdata: *mut c_void,
}
