//! ABI of runtime 1.2.1, 1.2.2 and 1.2.3 (identical to each other).

use crate::abi::{AbiInfo, AbiTypes, Functions};
use crate::common::*;
use crate::marshal::{self, ImagesArgs, InferArgs, InputData, InputFields, Marshal, ParamFields};
use std::ffi::{c_char, c_int, c_void};
use std::ptr;

/// Marker for ABI 1.2.x.
pub struct V1_2;

impl AbiTypes for V1_2 {
    const INFO: AbiInfo = AbiInfo {
        name: "1.2",
        runtimes: "1.2.1-1.2.3",
        drives: |major, minor, patch| matches!((major, minor, patch), (1, 2, 1..=3)),
        newest: "1.2.3",
        // Sampling and `max_new_tokens` are fixed at init.
        per_run_sampling: false,
    };
    type Param = RKLLMParam;
    type Input = RKLLMInput;
    type InferParam = RKLLMInferParam;
    type InitCallback = LLMResultCallback;
}

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

impl Marshal for V1_2 {
    type CallbackStorage = LLMResultCallback;

    fn write_param(param: &mut RKLLMParam, fields: &ParamFields) {
        marshal::write_common_param!(param, fields);
        if let Some([start, end, content]) = fields.image_tags {
            param.img_start = start;
            param.img_end = end;
            param.img_content = content;
        }
    }

    fn read_param(param: &RKLLMParam) -> ParamFields {
        let tags = [param.img_start, param.img_end, param.img_content];
        marshal::read_common_param!(param, ignore_eos_token: None, image_tags: Some(tags))
    }

    fn callback_storage(cb: LLMResultCallback) -> LLMResultCallback {
        cb
    }

    unsafe fn init(
        fns: &Functions<Self>,
        handle: *mut LLMHandle,
        param: *mut RKLLMParam,
        storage: &mut LLMResultCallback,
    ) -> c_int {
        (fns.init)(handle, param, *storage)
    }

    unsafe fn read_callback(callback: LLMResultCallback) -> (Option<LLMResultCallback>, *mut c_void) {
        (Some(callback), ptr::null_mut())
    }

    fn write_input(role: *const c_char, enable_thinking: bool, data: &InputData) -> RKLLMInput {
        marshal::write_input!(role, enable_thinking, data, |images| RKLLMMultiModelInput {
            prompt: images.prompt,
            image_embed: images.embed,
            n_image_tokens: images.n_image_tokens,
            n_image: images.n_image,
            image_width: images.width,
            image_height: images.height,
        })
    }

    unsafe fn read_input(input: *const RKLLMInput) -> InputFields {
        marshal::read_input!(input, |m| ImagesArgs {
            prompt: m.prompt,
            embed: m.image_embed,
            n_image: m.n_image,
            n_image_tokens: m.n_image_tokens,
            width: m.image_width,
            height: m.image_height,
            tags: None,
        })
    }

    fn infer_param(args: InferArgs) -> RKLLMInferParam {
        RKLLMInferParam {
            mode: args.mode,
            lora_params: args.lora,
            prompt_cache_params: args.prompt_cache,
            keep_history: c_int::from(args.keep_history),
        }
    }

    fn read_infer(infer: &RKLLMInferParam) -> InferArgs<c_int> {
        marshal::read_common_infer!(infer, max_new_tokens: None, sampling: ptr::null_mut())
    }
}
