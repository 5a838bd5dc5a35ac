//! ABI of runtime 1.2.1, 1.2.2 and 1.2.3 (identical to each other).

use crate::common::*;
use std::ffi::{c_char, c_int};

/// Size 208, align 8.
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
    pub is_async: bool,
    pub img_start: *const c_char,
    pub img_end: *const c_char,
    pub img_content: *const c_char,
    pub extend_param: RKLLMExtendParam,
}

/// `RKLLMMultiModelInput` (sic, the 1.2 header's spelling), 48 B.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMMultiModelInput {
    pub prompt: *mut c_char,
    pub image_embed: *mut f32,
    pub n_image_tokens: usize,
    pub n_image: usize,
    pub image_width: usize,
    pub image_height: usize,
}

/// The input union, 48 B (its largest member is the multimodal input).
#[repr(C)]
#[derive(Clone, Copy)]
pub union RKLLMInputUnion {
    pub prompt_input: *const c_char,
    pub embed_input: RKLLMEmbedInput,
    pub token_input: RKLLMTokenInput,
    pub multimodal_input: RKLLMMultiModelInput,
}

/// Size 64, align 8.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RKLLMInput {
    /// "user" or "tool".
    pub role: *const c_char,
    pub enable_thinking: bool,
    pub input_type: RKLLMInputType,
    pub input: RKLLMInputUnion,
}

/// Size 32. No sampling parameters and no `max_new_tokens`: on this ABI both
/// are fixed at `rkllm_init`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RKLLMInferParam {
    pub mode: RKLLMInferMode,
    pub lora_params: *mut RKLLMLoraParam,
    pub prompt_cache_params: *mut RKLLMPromptCacheParam,
    pub keep_history: c_int,
}
