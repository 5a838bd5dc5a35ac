//! Filling the per-ABI structs from ABI-neutral values.
//!
//! Everything that differs between the two ABIs when initialising or running
//! is in this one trait, so the runtime thread ([`crate::model`]) is written
//! once for both.

use crate::abi::{AbiTypes, Functions, V1_2, V1_3};
use crate::common::*;
use crate::params::{InitConfig, SamplingParams};
use crate::{v1_2, v1_3};
use std::ffi::{c_char, c_int, c_void};
use std::ptr;

pub trait Marshal: AbiTypes {
    /// What must stay alive as long as the handle: on 1.3 the
    /// `RKLLMCallback` struct whose address `rkllm_init` receives.
    type CallbackStorage;

    /// Sets every field we control on a param from `rkllm_createDefaultParam()`.
    /// `image_tags` (start, end, content; NULL: none) are read on ABI 1.2
    /// only and must outlive the handle.
    fn apply_config(
        param: &mut Self::Param,
        cfg: &InitConfig,
        model_path: *const c_char,
        image_tags: [*const c_char; 3],
    );

    fn callback_storage(cb: LLMResultCallback) -> Self::CallbackStorage;

    /// # Safety
    /// `handle` and `param` must be valid; `storage` must outlive the handle.
    unsafe fn init(
        fns: &Functions<Self>,
        handle: *mut LLMHandle,
        param: *mut Self::Param,
        storage: &mut Self::CallbackStorage,
    ) -> c_int;

    fn prompt_input(role: *const c_char, prompt: *const c_char, enable_thinking: bool) -> Self::Input;

    /// `ids` must stay valid (and unmoved) until `rkllm_run` returns.
    fn token_input(role: *const c_char, ids: &mut [i32], enable_thinking: bool) -> Self::Input;

    /// `RKLLM_INPUT_MULTIMODAL`; every pointer in `images` must stay valid
    /// until `rkllm_run` returns. The tags are ignored on ABI 1.2 (set at init).
    fn multimodal_input(role: *const c_char, images: &ImagesArgs, enable_thinking: bool) -> Self::Input;

    /// `max_new_tokens` and `sampling` are ignored on ABI 1.2, which cannot
    /// take them per run (the caller reports that; see `Abi::per_run_sampling`).
    fn infer_param(args: InferArgs) -> Self::InferParam;
}

/// One multimodal run's fields, ABI-neutral.
pub struct ImagesArgs {
    pub prompt: *mut c_char,
    pub embed: *mut f32,
    pub n_image: usize,
    pub n_image_tokens: usize,
    pub width: usize,
    pub height: usize,
    /// start, end, content.
    pub tags: [*const c_char; 3],
}

/// One run's `RKLLMInferParam` fields, ABI-neutral; the pointers must stay
/// valid until `rkllm_run` returns.
pub struct InferArgs {
    pub mode: RKLLMInferMode,
    pub keep_history: bool,
    pub max_new_tokens: Option<i32>,
    pub sampling: *mut v1_3::RKLLMSamplingParam,
    pub lora: *mut RKLLMLoraParam,
    pub prompt_cache: *mut RKLLMPromptCacheParam,
}

impl SamplingParams {
    pub fn to_ffi(self) -> v1_3::RKLLMSamplingParam {
        v1_3::RKLLMSamplingParam {
            top_k: self.top_k,
            top_p: self.top_p,
            temperature: self.temperature,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_tau,
            mirostat_eta: self.mirostat_eta,
        }
    }
}

/// A zeroed input union with `prompt_input` set: the rest of the union's
/// bytes reach the runtime too, so none is left uninitialised.
macro_rules! prompt_union {
    ($abi:ident, $prompt:ident) => {{
        // SAFETY: all-zero is valid for every member (pointers and integers).
        let mut union: $abi::RKLLMInputUnion = unsafe { std::mem::zeroed() };
        union.prompt_input = $prompt;
        union
    }};
}

/// A zeroed input union with `token_input` set (see `prompt_union`).
macro_rules! token_union {
    ($abi:ident, $ids:ident) => {{
        // SAFETY: all-zero is valid for every member (pointers and integers).
        let mut union: $abi::RKLLMInputUnion = unsafe { std::mem::zeroed() };
        union.token_input = RKLLMTokenInput { input_ids: $ids.as_mut_ptr(), n_tokens: $ids.len() };
        union
    }};
}

/// The fields both `RKLLMParam` layouts share, set the same way.
macro_rules! apply_common {
    ($param:ident, $cfg:ident, $model_path:ident) => {{
        let s = $cfg.sampling;
        $param.model_path = $model_path;
        $param.max_context_len = $cfg.max_context_len;
        $param.max_new_tokens = $cfg.max_new_tokens;
        $param.n_keep = $cfg.n_keep;
        $param.top_k = s.top_k;
        $param.top_p = s.top_p;
        $param.temperature = s.temperature;
        $param.repeat_penalty = s.repeat_penalty;
        $param.frequency_penalty = s.frequency_penalty;
        $param.presence_penalty = s.presence_penalty;
        $param.mirostat = s.mirostat;
        $param.mirostat_tau = s.mirostat_tau;
        $param.mirostat_eta = s.mirostat_eta;
        $param.skip_special_token = $cfg.skip_special_token;
        // rkllm_run blocks on our runtime thread; async mode is never used.
        $param.is_async = false;
        let e = &mut $param.extend_param;
        e.base_domain_id = $cfg.base_domain_id;
        e.embed_flash = i8::from($cfg.embed_flash);
        e.enabled_cpus_num = $cfg.enabled_cpus_num;
        e.enabled_cpus_mask = $cfg.enabled_cpus_mask;
        e.n_batch = $cfg.n_batch;
        e.use_cross_attn = 0;
        e.reserved = [0; 104];
    }};
}

impl Marshal for V1_2 {
    type CallbackStorage = LLMResultCallback;

    fn apply_config(
        param: &mut v1_2::RKLLMParam,
        cfg: &InitConfig,
        model_path: *const c_char,
        [start, end, content]: [*const c_char; 3],
    ) {
        apply_common!(param, cfg, model_path);
        param.img_start = start;
        param.img_end = end;
        param.img_content = content;
    }

    fn callback_storage(cb: LLMResultCallback) -> LLMResultCallback {
        cb
    }

    unsafe fn init(
        fns: &Functions<Self>,
        handle: *mut LLMHandle,
        param: *mut v1_2::RKLLMParam,
        storage: &mut LLMResultCallback,
    ) -> c_int {
        (fns.init)(handle, param, *storage)
    }

    fn prompt_input(role: *const c_char, prompt: *const c_char, enable_thinking: bool) -> v1_2::RKLLMInput {
        v1_2::RKLLMInput {
            role,
            enable_thinking,
            input_type: RKLLMInputType::Prompt,
            input: prompt_union!(v1_2, prompt),
        }
    }

    fn token_input(role: *const c_char, ids: &mut [i32], enable_thinking: bool) -> v1_2::RKLLMInput {
        v1_2::RKLLMInput { role, enable_thinking, input_type: RKLLMInputType::Token, input: token_union!(v1_2, ids) }
    }

    fn multimodal_input(role: *const c_char, images: &ImagesArgs, enable_thinking: bool) -> v1_2::RKLLMInput {
        // SAFETY: all-zero is valid for every member (pointers and integers).
        let mut input: v1_2::RKLLMInputUnion = unsafe { std::mem::zeroed() };
        input.multimodal_input = v1_2::RKLLMMultiModelInput {
            prompt: images.prompt,
            image_embed: images.embed,
            n_image_tokens: images.n_image_tokens,
            n_image: images.n_image,
            image_width: images.width,
            image_height: images.height,
        };
        v1_2::RKLLMInput { role, enable_thinking, input_type: RKLLMInputType::Multimodal, input }
    }

    fn infer_param(args: InferArgs) -> v1_2::RKLLMInferParam {
        v1_2::RKLLMInferParam {
            mode: args.mode,
            lora_params: args.lora,
            prompt_cache_params: args.prompt_cache,
            keep_history: c_int::from(args.keep_history),
        }
    }
}

impl Marshal for V1_3 {
    type CallbackStorage = Box<v1_3::RKLLMCallback>;

    fn apply_config(param: &mut v1_3::RKLLMParam, cfg: &InitConfig, model_path: *const c_char, _: [*const c_char; 3]) {
        apply_common!(param, cfg, model_path);
        param.ignore_eos_token = false;
    }

    fn callback_storage(cb: LLMResultCallback) -> Box<v1_3::RKLLMCallback> {
        Box::new(v1_3::RKLLMCallback {
            result_callback: Some(cb),
            result_userdata: ptr::null_mut::<c_void>(),
            tokenizer_callback: None,
            tokenizer_userdata: ptr::null_mut(),
            embed_callback: None,
            embed_userdata: ptr::null_mut(),
        })
    }

    unsafe fn init(
        fns: &Functions<Self>,
        handle: *mut LLMHandle,
        param: *mut v1_3::RKLLMParam,
        storage: &mut Box<v1_3::RKLLMCallback>,
    ) -> c_int {
        (fns.init)(handle, param, &mut **storage)
    }

    fn prompt_input(role: *const c_char, prompt: *const c_char, enable_thinking: bool) -> v1_3::RKLLMInput {
        v1_3::RKLLMInput {
            role,
            enable_thinking,
            input_type: RKLLMInputType::Prompt,
            input: prompt_union!(v1_3, prompt),
        }
    }

    fn token_input(role: *const c_char, ids: &mut [i32], enable_thinking: bool) -> v1_3::RKLLMInput {
        v1_3::RKLLMInput { role, enable_thinking, input_type: RKLLMInputType::Token, input: token_union!(v1_3, ids) }
    }

    fn multimodal_input(role: *const c_char, images: &ImagesArgs, enable_thinking: bool) -> v1_3::RKLLMInput {
        // SAFETY: all-zero is valid for every member (pointers and integers):
        // the video part stays zero.
        let mut input: v1_3::RKLLMInputUnion = unsafe { std::mem::zeroed() };
        let [image_start, image_end, image_content] = images.tags;
        // SAFETY: writing the union's multimodal member, zeroed above.
        let multimodal = unsafe { &mut input.multimodal_input };
        multimodal.prompt = images.prompt;
        multimodal.image = v1_3::RKLLMImageInput {
            image_embed: images.embed,
            n_image_tokens: images.n_image_tokens,
            n_image: images.n_image,
            image_start,
            image_end,
            image_content,
            image_width: images.width,
            image_height: images.height,
        };
        v1_3::RKLLMInput { role, enable_thinking, input_type: RKLLMInputType::Multimodal, input }
    }

    fn infer_param(args: InferArgs) -> v1_3::RKLLMInferParam {
        v1_3::RKLLMInferParam {
            mode: args.mode,
            lora_params: args.lora,
            prompt_cache_params: args.prompt_cache,
            sampling_params: args.sampling,
            keep_history: c_int::from(args.keep_history),
            max_new_tokens: args.max_new_tokens.unwrap_or(0),
        }
    }
}
