//! ABI of runtime 1.3.x (written from 1.3.0's header).

use crate::abi::{AbiInfo, AbiTypes, Functions};
use crate::common::*;
use crate::marshal::{self, ImagesArgs, InferArgs, InputData, InputFields, Marshal, ParamFields};
use std::ffi::{c_char, c_int, c_void};
use std::ptr;

/// Marker for ABI 1.3.x.
pub struct V1_3;

impl AbiTypes for V1_3 {
    const INFO: AbiInfo = AbiInfo {
        name: "1.3",
        runtimes: "1.3.x",
        drives: |major, minor, _| (major, minor) == (1, 3),
        newest: "1.3.0",
        per_run_sampling: true,
    };
    type Param = RKLLMParam;
    type Input = RKLLMInput;
    type InferParam = RKLLMInferParam;
    type InitCallback = *mut RKLLMCallback;
}

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

/// The per-run sampling struct, first in this ABI (shared with any later one).
pub use crate::common::RKLLMSamplingParam;

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

impl Marshal for V1_3 {
    type CallbackStorage = Box<RKLLMCallback>;

    fn write_param(param: &mut RKLLMParam, fields: &ParamFields) {
        marshal::write_common_param!(param, fields);
        if let Some(ignore) = fields.ignore_eos_token {
            param.ignore_eos_token = ignore;
        }
    }

    fn read_param(param: &RKLLMParam) -> ParamFields {
        marshal::read_common_param!(param, ignore_eos_token: Some(param.ignore_eos_token), image_tags: None)
    }

    fn callback_storage(cb: LLMResultCallback) -> Box<RKLLMCallback> {
        Box::new(RKLLMCallback {
            result_callback: Some(cb),
            result_userdata: ptr::null_mut(),
            tokenizer_callback: None,
            tokenizer_userdata: ptr::null_mut(),
            embed_callback: None,
            embed_userdata: ptr::null_mut(),
        })
    }

    unsafe fn init(
        fns: &Functions<Self>,
        handle: *mut LLMHandle,
        param: *mut RKLLMParam,
        storage: &mut Box<RKLLMCallback>,
    ) -> c_int {
        (fns.init)(handle, param, &mut **storage)
    }

    unsafe fn read_callback(callback: *mut RKLLMCallback) -> (Option<LLMResultCallback>, *mut c_void) {
        // SAFETY: NULL or valid (the caller's contract). The struct is copied:
        // the caller need not keep it alive.
        match unsafe { callback.as_ref() } {
            Some(c) => (c.result_callback, c.result_userdata),
            None => (None, ptr::null_mut()),
        }
    }

    fn write_input(role: *const c_char, enable_thinking: bool, data: &InputData) -> RKLLMInput {
        marshal::write_input!(role, enable_thinking, data, |images| {
            let [image_start, image_end, image_content] = images.tags.unwrap_or([ptr::null(); 3]);
            RKLLMMultiModalInput {
                prompt: images.prompt,
                image: RKLLMImageInput {
                    image_embed: images.embed,
                    n_image_tokens: images.n_image_tokens,
                    n_image: images.n_image,
                    image_start,
                    image_end,
                    image_content,
                    image_width: images.width,
                    image_height: images.height,
                },
                // SAFETY: all-zero is valid (pointers and integers): no video is sent.
                video: unsafe { std::mem::zeroed() },
            }
        })
    }

    unsafe fn read_input(input: *const RKLLMInput) -> InputFields {
        marshal::read_input!(input, |m| ImagesArgs {
            prompt: m.prompt,
            embed: m.image.image_embed,
            n_image: m.image.n_image,
            n_image_tokens: m.image.n_image_tokens,
            width: m.image.image_width,
            height: m.image.image_height,
            tags: Some([m.image.image_start, m.image.image_end, m.image.image_content]),
        })
    }

    fn infer_param(args: InferArgs) -> RKLLMInferParam {
        RKLLMInferParam {
            mode: args.mode,
            lora_params: args.lora,
            prompt_cache_params: args.prompt_cache,
            sampling_params: args.sampling,
            keep_history: c_int::from(args.keep_history),
            max_new_tokens: args.max_new_tokens.unwrap_or(0),
        }
    }

    fn read_infer(infer: &RKLLMInferParam) -> InferArgs<c_int> {
        marshal::read_common_infer!(infer, max_new_tokens: Some(infer.max_new_tokens), sampling: infer.sampling_params)
    }
}
