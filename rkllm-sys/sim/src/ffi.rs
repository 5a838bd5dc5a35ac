//! The runtime's C functions for both ABIs, and the function table that
//! hands them to `rkllm-sys` in-process.
//!
//! None of these carries an `rkllm_*` symbol name: in-process they are
//! reached only by address through the table, so they can never interpose
//! on a real `librkllmrt.so` loaded into the same process. The cdylib's
//! named exports (`exports`) are thin wrappers over them.
//!
//! Every function body runs under `catch_unwind`: a panic becomes the error
//! code -1 and never unwinds into C.

use crate::call::{self, InferOptions, InitParams, RunInput};
use crate::engine::{Callback, SimModel};
use crate::forward::EMBD_SIZE;
use crate::{handles, log, vision};
use rkllm_sys::common::*;
use rkllm_sys::{v1_2, v1_3, AbiTypes, Functions, SamplingParams, V1_2, V1_3};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, addr_of};

/// What differs between the ABIs: reading their structs into neutral values.
pub(crate) trait SimAbi: AbiTypes {
    fn default_param() -> Self::Param;
    fn read_param(param: &Self::Param) -> InitParams;
    /// # Safety
    /// `callback` is what the caller passed to `rkllm_init` (on 1.3 a NULL or
    /// valid pointer to an `RKLLMCallback`).
    unsafe fn read_callback(callback: Self::InitCallback) -> Callback;
    /// # Safety
    /// `input` points to a valid input whose strings are valid for the call.
    unsafe fn read_input(input: *const Self::Input) -> RunInput;
    /// # Safety
    /// `infer` is NULL or points to a valid infer param.
    unsafe fn read_infer(infer: *const Self::InferParam) -> InferOptions;
}

/// `rkllm_createDefaultParam`'s values are undocumented; the simulator
/// gives the values the vendor demos set, and `max_new_tokens` -1 (no limit).
fn default_extend_param() -> RKLLMExtendParam {
    RKLLMExtendParam {
        base_domain_id: 0,
        embed_flash: 0,
        enabled_cpus_num: 0,
        enabled_cpus_mask: 0,
        n_batch: 1,
        use_cross_attn: 0,
        reserved: [0; 104],
    }
}

const DEFAULT_SAMPLING: SamplingParams = SamplingParams::RKLLM_DEFAULTS;
const DEFAULT_MAX_CONTEXT_LEN: i32 = 4096;

/// The fields both `RKLLMParam` layouts share.
macro_rules! read_common_param {
    ($p:ident, $abi:expr, $ignore_eos:expr, $img:expr) => {
        InitParams {
            abi: $abi,
            // SAFETY: model_path is NULL or a C string (the caller's contract).
            model_path: unsafe { call::text($p.model_path) },
            max_context_len: $p.max_context_len,
            max_new_tokens: $p.max_new_tokens,
            n_keep: $p.n_keep,
            sampling: SamplingParams {
                top_k: $p.top_k,
                top_p: $p.top_p,
                temperature: $p.temperature,
                repeat_penalty: $p.repeat_penalty,
                frequency_penalty: $p.frequency_penalty,
                presence_penalty: $p.presence_penalty,
                mirostat: $p.mirostat,
                mirostat_tau: $p.mirostat_tau,
                mirostat_eta: $p.mirostat_eta,
            },
            skip_special_token: $p.skip_special_token,
            ignore_eos_token: $ignore_eos,
            is_async: $p.is_async,
            img: $img,
            extend: $p.extend_param,
        }
    };
}

/// The leading fields both `RKLLMInput` layouts share. Enums are read as
/// integers through their address: C may pass any value.
macro_rules! read_input {
    ($input:ident) => {{
        // SAFETY: the caller's contract (see `SimAbi::read_input`).
        unsafe {
            let input_type = addr_of!((*$input).input_type).cast::<i32>().read();
            RunInput {
                role: call::text((*$input).role),
                enable_thinking: (*$input).enable_thinking,
                input_type,
                prompt: if input_type == RKLLMInputType::Prompt as i32 {
                    call::text((*$input).input.prompt_input)
                } else {
                    None
                },
                token_ids: if input_type == RKLLMInputType::Token as i32 {
                    let tokens = (*$input).input.token_input;
                    (!tokens.input_ids.is_null())
                        .then(|| std::slice::from_raw_parts(tokens.input_ids, tokens.n_tokens).to_vec())
                } else {
                    None
                },
                images: None,
            }
        }
    }};
}

/// The fields both `RKLLMInferParam` layouts share.
macro_rules! read_common_infer {
    ($p:ident) => {{
        // SAFETY: the caller's contract (see `SimAbi::read_infer`); the
        // nested pointers are NULL or valid.
        unsafe {
            let lora = $p.lora_params.as_ref();
            let cache = $p.prompt_cache_params.as_ref();
            InferOptions {
                mode: addr_of!($p.mode).cast::<i32>().read(),
                lora_adapter: lora.and_then(|l| call::text(l.lora_adapter_name)),
                prompt_cache: cache.map(|c| (c.save_prompt_cache, call::text(c.prompt_cache_path))),
                keep_history: $p.keep_history != 0,
                max_new_tokens: None,
                sampling: None,
            }
        }
    }};
}

impl SimAbi for V1_2 {
    fn default_param() -> v1_2::RKLLMParam {
        let s = DEFAULT_SAMPLING;
        v1_2::RKLLMParam {
            model_path: ptr::null(),
            max_context_len: DEFAULT_MAX_CONTEXT_LEN,
            max_new_tokens: -1,
            top_k: s.top_k,
            n_keep: -1,
            top_p: s.top_p,
            temperature: s.temperature,
            repeat_penalty: s.repeat_penalty,
            frequency_penalty: s.frequency_penalty,
            presence_penalty: s.presence_penalty,
            mirostat: s.mirostat,
            mirostat_tau: s.mirostat_tau,
            mirostat_eta: s.mirostat_eta,
            skip_special_token: true,
            is_async: false,
            img_start: ptr::null(),
            img_end: ptr::null(),
            img_content: ptr::null(),
            extend_param: default_extend_param(),
        }
    }

    fn read_param(p: &v1_2::RKLLMParam) -> InitParams {
        // SAFETY: the image strings are NULL or C strings.
        let img = unsafe { [call::text(p.img_start), call::text(p.img_end), call::text(p.img_content)] };
        read_common_param!(p, rkllm_sys::Abi::V1_2, None, Some(img))
    }

    unsafe fn read_callback(callback: LLMResultCallback) -> Callback {
        Callback::new(Some(callback), ptr::null_mut())
    }

    unsafe fn read_input(input: *const v1_2::RKLLMInput) -> RunInput {
        let mut read = read_input!(input);
        if read.input_type == RKLLMInputType::Multimodal as i32 {
            // SAFETY: the caller's contract; the image fields are the 1.2 header's.
            unsafe {
                let m = (*input).input.multimodal_input;
                read.prompt = call::text(m.prompt);
                read.images = Some(vision::read(
                    EMBD_SIZE,
                    m.image_embed,
                    m.n_image,
                    m.n_image_tokens,
                    m.image_width,
                    m.image_height,
                    None,
                ));
            }
        }
        read
    }

    unsafe fn read_infer(infer: *const v1_2::RKLLMInferParam) -> InferOptions {
        // SAFETY: NULL or valid (the caller's contract).
        match unsafe { infer.as_ref() } {
            Some(p) => read_common_infer!(p),
            None => InferOptions::default(),
        }
    }
}

impl SimAbi for V1_3 {
    fn default_param() -> v1_3::RKLLMParam {
        let s = DEFAULT_SAMPLING;
        v1_3::RKLLMParam {
            model_path: ptr::null(),
            max_context_len: DEFAULT_MAX_CONTEXT_LEN,
            max_new_tokens: -1,
            top_k: s.top_k,
            n_keep: -1,
            top_p: s.top_p,
            temperature: s.temperature,
            repeat_penalty: s.repeat_penalty,
            frequency_penalty: s.frequency_penalty,
            presence_penalty: s.presence_penalty,
            mirostat: s.mirostat,
            mirostat_tau: s.mirostat_tau,
            mirostat_eta: s.mirostat_eta,
            skip_special_token: true,
            ignore_eos_token: false,
            is_async: false,
            extend_param: default_extend_param(),
        }
    }

    fn read_param(p: &v1_3::RKLLMParam) -> InitParams {
        read_common_param!(p, rkllm_sys::Abi::V1_3, Some(p.ignore_eos_token), None)
    }

    unsafe fn read_callback(callback: *mut v1_3::RKLLMCallback) -> Callback {
        // SAFETY: NULL or valid (the caller's contract). The struct is copied:
        // the caller need not keep it alive.
        match unsafe { callback.as_ref() } {
            Some(c) => Callback::new(c.result_callback, c.result_userdata),
            None => Callback::new(None, ptr::null_mut()),
        }
    }

    unsafe fn read_input(input: *const v1_3::RKLLMInput) -> RunInput {
        let mut read = read_input!(input);
        if read.input_type == RKLLMInputType::Multimodal as i32 {
            // SAFETY: the caller's contract; the tags are NULL or C strings.
            unsafe {
                let m = (*input).input.multimodal_input;
                let i = m.image;
                let tags = [call::text(i.image_start), call::text(i.image_end), call::text(i.image_content)];
                read.prompt = call::text(m.prompt);
                read.images = Some(vision::read(
                    EMBD_SIZE,
                    i.image_embed,
                    i.n_image,
                    i.n_image_tokens,
                    i.image_width,
                    i.image_height,
                    Some(tags),
                ));
            }
        }
        read
    }

    unsafe fn read_infer(infer: *const v1_3::RKLLMInferParam) -> InferOptions {
        // SAFETY: NULL or valid (the caller's contract).
        let Some(p) = (unsafe { infer.as_ref() }) else {
            return InferOptions::default();
        };
        // SAFETY: sampling_params is NULL or valid.
        let sampling = unsafe { p.sampling_params.as_ref() }.map(|s| SamplingParams {
            top_k: s.top_k,
            top_p: s.top_p,
            temperature: s.temperature,
            repeat_penalty: s.repeat_penalty,
            frequency_penalty: s.frequency_penalty,
            presence_penalty: s.presence_penalty,
            mirostat: s.mirostat,
            mirostat_tau: s.mirostat_tau,
            mirostat_eta: s.mirostat_eta,
        });
        InferOptions { max_new_tokens: Some(p.max_new_tokens), sampling, ..read_common_infer!(p) }
    }
}

/// Runs `f`, turning a panic into -1.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(-1)
}

/// Runs `f` on the live model behind `handle`; -1 for an unknown handle.
fn with_model(handle: LLMHandle, call: &str, f: impl FnOnce(&SimModel) -> c_int) -> c_int {
    guard(|| match handles::get(handle) {
        Some(model) => f(&model),
        None => {
            log::line(&format!("E rkllm: {call}: invalid handle {handle:p}"));
            -1
        }
    })
}

pub(crate) unsafe extern "C" fn create_default_param<A: SimAbi>() -> A::Param {
    // SAFETY (fallback): every field of either RKLLMParam is a pointer, an
    // integer, a float or a bool, for all of which zero bytes are valid.
    catch_unwind(A::default_param).unwrap_or_else(|_| unsafe { std::mem::zeroed() })
}

pub(crate) unsafe extern "C" fn init<A: SimAbi>(
    handle: *mut LLMHandle,
    param: *mut A::Param,
    callback: A::InitCallback,
) -> c_int {
    guard(|| {
        if handle.is_null() || param.is_null() {
            log::line("E rkllm: rkllm_init: handle and param must not be NULL");
            return -1;
        }
        // SAFETY: both pointers are non-NULL and valid (the caller's
        // contract); the handle stays NULL unless init succeeds.
        unsafe {
            *handle = ptr::null_mut();
            let params = A::read_param(&*param);
            match SimModel::init(params, A::read_callback(callback)) {
                Ok(model) => {
                    *handle = handles::insert(model);
                    0
                }
                Err(code) => code,
            }
        }
    })
}

pub(crate) unsafe extern "C" fn run<A: SimAbi>(
    handle: LLMHandle,
    input: *mut A::Input,
    infer: *mut A::InferParam,
    userdata: *mut c_void,
) -> c_int {
    with_model(handle, "rkllm_run", |model| {
        if input.is_null() {
            log::line("E rkllm: rkllm_run: input must not be NULL");
            return -1;
        }
        // With n_batch = N the input is an array of N (the manual's example);
        // the simulator reads all N and refuses a run with an empty slot.
        let slots = usize::from(model.params.extend.n_batch);
        // SAFETY: valid pointers for the call's duration (the caller's contract).
        let (inputs, infer) =
            unsafe { ((0..slots).map(|i| A::read_input(input.add(i))).collect::<Vec<_>>(), A::read_infer(infer)) };
        model.run(&inputs, &infer, userdata)
    })
}

pub(crate) unsafe extern "C" fn abort(handle: LLMHandle) -> c_int {
    with_model(handle, "rkllm_abort", SimModel::abort)
}

pub(crate) unsafe extern "C" fn is_running(handle: LLMHandle) -> c_int {
    with_model(handle, "rkllm_is_running", |model| c_int::from(model.gate.is_running()))
}

pub(crate) unsafe extern "C" fn destroy(handle: LLMHandle) -> c_int {
    with_model(handle, "rkllm_destroy", |model| {
        let code = model.destroy();
        if code == 0 {
            handles::remove(handle);
        }
        code
    })
}

/// `start_pos` and `end_pos` are accepted and not read (see `SimModel::clear_kv_cache`).
pub(crate) unsafe extern "C" fn clear_kv_cache(
    handle: LLMHandle,
    keep_system_prompt: c_int,
    _start_pos: *mut c_int,
    _end_pos: *mut c_int,
) -> c_int {
    with_model(handle, "rkllm_clear_kv_cache", |model| model.clear_kv_cache(keep_system_prompt != 0))
}

/// Writes one entry per batch slot: the tokens in that slot's KV cache
/// (skewed by `kv_size_skew`).
pub(crate) unsafe extern "C" fn get_kv_cache_size(handle: LLMHandle, sizes: *mut c_int) -> c_int {
    with_model(handle, "rkllm_get_kv_cache_size", |model| {
        if sizes.is_null() {
            log::line("E rkllm: rkllm_get_kv_cache_size: sizes must not be NULL");
            return -1;
        }
        for (slot, size) in model.kv_cache_sizes().into_iter().enumerate() {
            // SAFETY: the caller provides n_batch entries, one per slot.
            unsafe { sizes.add(slot).write(size) };
        }
        0
    })
}

/// Three C strings (NULL read as "").
///
/// # Safety
/// Each pointer is NULL or a valid C string.
unsafe fn three(a: *const c_char, b: *const c_char, c: *const c_char) -> [Option<String>; 3] {
    unsafe { [call::text(a), call::text(b), call::text(c)] }
}

pub(crate) unsafe extern "C" fn set_chat_template(
    handle: LLMHandle,
    system: *const c_char,
    prefix: *const c_char,
    postfix: *const c_char,
) -> c_int {
    // SAFETY: C strings or NULL (the caller's contract).
    with_model(handle, "rkllm_set_chat_template", |m| m.set_chat_template(unsafe { three(system, prefix, postfix) }))
}

pub(crate) unsafe extern "C" fn set_function_tools(
    handle: LLMHandle,
    system: *const c_char,
    tools: *const c_char,
    tool_response_tag: *const c_char,
) -> c_int {
    // SAFETY: C strings or NULL (the caller's contract).
    with_model(handle, "rkllm_set_function_tools", |m| {
        m.set_function_tools(unsafe { three(system, tools, tool_response_tag) })
    })
}

/// Recorded; accepted only from a handle initialised with
/// `extend_param.use_cross_attn` set, as there is no encoder to attend to
/// otherwise. The simulated model does not use the tensors.
pub(crate) unsafe extern "C" fn set_cross_attn_params(handle: LLMHandle, params: *mut RKLLMCrossAttnParam) -> c_int {
    // SAFETY: NULL or valid (the caller's contract); only the count is read.
    let num_tokens = unsafe { params.as_ref() }.map(|p| p.num_tokens);
    with_model(handle, "rkllm_set_cross_attn_params", |model| model.set_cross_attn_params(num_tokens))
}

pub(crate) unsafe extern "C" fn load_lora(handle: LLMHandle, adapter: *mut RKLLMLoraAdapter) -> c_int {
    // SAFETY: NULL or valid, with NULL or C strings (the caller's contract).
    let adapter = unsafe {
        adapter.as_ref().map(|a| (call::text(a.lora_adapter_path), call::text(a.lora_adapter_name), a.scale))
    };
    with_model(handle, "rkllm_load_lora", |model| model.load_lora(adapter))
}

pub(crate) unsafe extern "C" fn load_prompt_cache(handle: LLMHandle, path: *const c_char) -> c_int {
    // SAFETY: NULL or a C string (the caller's contract).
    let path = unsafe { call::text(path) };
    with_model(handle, "rkllm_load_prompt_cache", |model| model.load_prompt_cache(path))
}

pub(crate) unsafe extern "C" fn release_prompt_cache(handle: LLMHandle) -> c_int {
    with_model(handle, "rkllm_release_prompt_cache", SimModel::release_prompt_cache)
}

/// A runtime function the simulator does not implement: -1 and a line saying so.
pub(crate) fn unsupported(handle: LLMHandle, call: &str) -> c_int {
    with_model(handle, call, |_| {
        log::line(&format!("E rkllm: {call} is not supported by the simulated runtime"));
        -1
    })
}

/// The table for one ABI: the functions above, by address.
pub(crate) fn functions<A: SimAbi>() -> Functions<A> {
    Functions {
        create_default_param: create_default_param::<A>,
        init: init::<A>,
        run: run::<A>,
        abort,
        is_running,
        destroy,
        clear_kv_cache,
        get_kv_cache_size,
        set_chat_template,
        set_function_tools,
        load_lora,
        load_prompt_cache,
        release_prompt_cache,
    }
}
