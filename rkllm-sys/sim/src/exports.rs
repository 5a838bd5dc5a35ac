//! The vendor's symbol names, ABI 1.3.0, for the cdylib: with these,
//! `librkllm_sim.so` is a drop-in `librkllmrt.so` that `dlopen` and
//! `rkllm_sys::Runtime::load` take like the real one. Each is a thin
//! wrapper over the function the in-process table uses.
//!
//! Only ABI 1.3.0 is exported: one symbol cannot return both `RKLLMParam`
//! sizes, and the version marker below decides the ABI for the loader. The
//! 1.2 ABI is available in-process only (`rkllm_sim::table(Abi::V1_2)`).
//!
//! The rlib carries these definitions too, but an executable does not put
//! its symbols into its dynamic symbol table (no `--export-dynamic`), so a
//! binary linking rkllm-sim never interposes on a real runtime it loads.
//!
//! # Safety
//! Every function has the C contract of its namesake in `rkllm.h`.

#![allow(clippy::missing_safety_doc)]

use crate::ffi;
use rkllm_sys::common::{LLMHandle, RKLLMCrossAttnParam, RKLLMLoraAdapter};
use rkllm_sys::{v1_3, V1_3};
use std::ffi::{c_char, c_int, c_void};

/// The version text every `librkllmrt.so` embeds; `rkllm_sys::sniff`
/// reads the ABI from it. `#[used]` keeps it in the shared object although
/// no code refers to it.
#[used]
static SDK_VERSION_MARKER: [u8; 37] = *b"RKLLM SDK (version: 1.3.0 simulated)\0";

#[no_mangle]
pub unsafe extern "C" fn rkllm_createDefaultParam() -> v1_3::RKLLMParam {
    ffi::create_default_param::<V1_3>()
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_init(
    handle: *mut LLMHandle,
    param: *mut v1_3::RKLLMParam,
    callback: *mut v1_3::RKLLMCallback,
) -> c_int {
    ffi::init::<V1_3>(handle, param, callback)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_run(
    handle: LLMHandle,
    input: *mut v1_3::RKLLMInput,
    infer: *mut v1_3::RKLLMInferParam,
    userdata: *mut c_void,
) -> c_int {
    ffi::run::<V1_3>(handle, input, infer, userdata)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_abort(handle: LLMHandle) -> c_int {
    ffi::abort(handle)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_is_running(handle: LLMHandle) -> c_int {
    ffi::is_running(handle)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_destroy(handle: LLMHandle) -> c_int {
    ffi::destroy(handle)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_clear_kv_cache(
    handle: LLMHandle,
    keep_system_prompt: c_int,
    start_pos: *mut c_int,
    end_pos: *mut c_int,
) -> c_int {
    ffi::clear_kv_cache(handle, keep_system_prompt, start_pos, end_pos)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_get_kv_cache_size(handle: LLMHandle, sizes: *mut c_int) -> c_int {
    ffi::get_kv_cache_size(handle, sizes)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_set_chat_template(
    handle: LLMHandle,
    system: *const c_char,
    prefix: *const c_char,
    postfix: *const c_char,
) -> c_int {
    ffi::set_chat_template(handle, system, prefix, postfix)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_set_function_tools(
    handle: LLMHandle,
    system: *const c_char,
    tools: *const c_char,
    tool_response_tag: *const c_char,
) -> c_int {
    ffi::set_function_tools(handle, system, tools, tool_response_tag)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_load_lora(handle: LLMHandle, adapter: *mut RKLLMLoraAdapter) -> c_int {
    ffi::load_lora(handle, adapter)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_load_prompt_cache(handle: LLMHandle, path: *const c_char) -> c_int {
    ffi::load_prompt_cache(handle, path)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_release_prompt_cache(handle: LLMHandle) -> c_int {
    ffi::release_prompt_cache(handle)
}

#[no_mangle]
pub unsafe extern "C" fn rkllm_set_cross_attn_params(handle: LLMHandle, params: *mut RKLLMCrossAttnParam) -> c_int {
    ffi::set_cross_attn_params(handle, params)
}

/// The vendor says not to use it; the simulator refuses it.
#[no_mangle]
pub unsafe extern "C" fn rkllm_run_async(
    handle: LLMHandle,
    _input: *mut v1_3::RKLLMInput,
    _infer: *mut v1_3::RKLLMInferParam,
    _userdata: *mut c_void,
) -> c_int {
    ffi::unsupported(handle, "rkllm_run_async")
}
