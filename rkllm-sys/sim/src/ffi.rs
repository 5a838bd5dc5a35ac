//! The runtime's C functions for every ABI, and the function table that
//! hands them to `rkllm-sys` in-process. What differs between the ABIs is
//! read through each one's `rkllm_sys::Marshal` impl, so the functions here
//! are written once, generic over the ABI.
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
use rkllm_sys::{Functions, InputData, Listed, Marshal, ParamFields, SamplingParams};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// `rkllm_createDefaultParam`'s values are undocumented; the simulator
/// gives the values the vendor demos set, and `max_new_tokens` -1 (no limit).
fn default_param<A: Marshal>() -> A::Param {
    let fields = ParamFields {
        model_path: ptr::null(),
        max_context_len: 4096,
        max_new_tokens: -1,
        n_keep: -1,
        sampling: SamplingParams::RKLLM_DEFAULTS,
        skip_special_token: true,
        ignore_eos_token: Some(false),
        is_async: false,
        image_tags: Some([ptr::null(); 3]),
        extend: RKLLMExtendParam {
            base_domain_id: 0,
            embed_flash: 0,
            enabled_cpus_num: 0,
            enabled_cpus_mask: 0,
            n_batch: 1,
            use_cross_attn: 0,
            reserved: [0; 104],
        },
    };
    // SAFETY: every field of an RKLLMParam is a pointer, an integer, a
    // float or a bool, for all of which zero bytes are valid.
    let mut param: A::Param = unsafe { std::mem::zeroed() };
    A::write_param(&mut param, &fields);
    param
}

/// An `RKLLMParam` (either layout) read into neutral values.
///
/// # Safety
/// Its strings are NULL or C strings.
unsafe fn read_param<A: Listed>(param: &A::Param) -> InitParams {
    let p = A::read_param(param);
    // SAFETY: the caller's contract.
    let text = |s| unsafe { call::text(s) };
    InitParams {
        abi: A::ABI,
        model_path: text(p.model_path),
        max_context_len: p.max_context_len,
        max_new_tokens: p.max_new_tokens,
        n_keep: p.n_keep,
        sampling: p.sampling,
        skip_special_token: p.skip_special_token,
        ignore_eos_token: p.ignore_eos_token,
        is_async: p.is_async,
        img: p.image_tags.map(|tags| tags.map(text)),
        extend: p.extend,
    }
}

/// An `RKLLMInput` (either layout) read into neutral values.
///
/// # Safety
/// `input` points to a valid input whose strings and buffers are valid for the call.
unsafe fn read_input<A: Marshal>(input: *const A::Input) -> RunInput {
    // SAFETY: the caller's contract.
    let fields = unsafe { A::read_input(input) };
    let text = |s| unsafe { call::text(s) };
    let mut read = RunInput {
        role: text(fields.role),
        enable_thinking: fields.enable_thinking,
        input_type: fields.input_type,
        prompt: None,
        token_ids: None,
        images: None,
    };
    match fields.data {
        Some(InputData::Prompt(prompt)) => read.prompt = text(prompt),
        Some(InputData::Tokens(tokens)) => {
            read.token_ids = (!tokens.input_ids.is_null())
                // SAFETY: n_tokens ids (the caller's contract).
                .then(|| unsafe { std::slice::from_raw_parts(tokens.input_ids, tokens.n_tokens) }.to_vec());
        }
        Some(InputData::Multimodal(m)) => {
            read.prompt = text(m.prompt);
            // SAFETY: the embedding holds what its counts say (the caller's contract).
            read.images = Some(unsafe {
                vision::read(
                    EMBD_SIZE,
                    m.embed,
                    m.n_image,
                    m.n_image_tokens,
                    m.width,
                    m.height,
                    m.tags.map(|tags| tags.map(text)),
                )
            });
        }
        None => {}
    }
    read
}

/// An `RKLLMInferParam` (either layout) read into neutral values; all
/// defaults for NULL.
///
/// # Safety
/// `infer` is NULL or valid, and so are the pointers it holds.
unsafe fn read_infer<A: Marshal>(infer: *const A::InferParam) -> InferOptions {
    // SAFETY: the caller's contract.
    let Some(infer) = (unsafe { infer.as_ref() }) else {
        return InferOptions::default();
    };
    let p = A::read_infer(infer);
    // SAFETY: the nested pointers are NULL or valid, their strings NULL or C strings.
    unsafe {
        InferOptions {
            mode: p.mode,
            lora_adapter: p.lora.as_ref().and_then(|l| call::text(l.lora_adapter_name)),
            prompt_cache: p.prompt_cache.as_ref().map(|c| (c.save_prompt_cache, call::text(c.prompt_cache_path))),
            keep_history: p.keep_history,
            max_new_tokens: p.max_new_tokens,
            sampling: p.sampling.as_ref().map(SamplingParams::from_ffi),
        }
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

pub(crate) unsafe extern "C" fn create_default_param<A: Marshal>() -> A::Param {
    // SAFETY (fallback): every field of an RKLLMParam is a pointer, an
    // integer, a float or a bool, for all of which zero bytes are valid.
    catch_unwind(default_param::<A>).unwrap_or_else(|_| unsafe { std::mem::zeroed() })
}

pub(crate) unsafe extern "C" fn init<A: Listed>(
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
            let params = read_param::<A>(&*param);
            let (result_callback, result_userdata) = A::read_callback(callback);
            match SimModel::init(params, Callback::new(result_callback, result_userdata)) {
                Ok(model) => {
                    *handle = handles::insert(model);
                    0
                }
                Err(code) => code,
            }
        }
    })
}

pub(crate) unsafe extern "C" fn run<A: Marshal>(
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
            unsafe { ((0..slots).map(|i| read_input::<A>(input.add(i))).collect::<Vec<_>>(), read_infer::<A>(infer)) };
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
pub(crate) fn functions<A: Listed>() -> Functions<A> {
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
