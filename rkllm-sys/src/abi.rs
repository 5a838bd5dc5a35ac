//! The two supported ABIs and the table of runtime functions.
//!
//! The daemon never calls a runtime function by name: it calls through a
//! [`Functions`] table, filled either by `dlsym` on `librkllmrt.so`
//! ([`crate::loader`]) or, in-process, with the simulator's functions. So the
//! simulated runtime exercises exactly the FFI code that runs on a board.

use crate::common::*;
use crate::{v1_2, v1_3};
use std::ffi::{c_char, c_int, c_void};

/// A supported runtime ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Abi {
    /// Runtime 1.2.1–1.2.3: sampling and `max_new_tokens` are fixed at init.
    V1_2,
    /// Runtime 1.3.x: per-run sampling and `max_new_tokens`.
    V1_3,
}

impl Abi {
    pub fn as_str(self) -> &'static str {
        match self {
            Abi::V1_2 => "1.2",
            Abi::V1_3 => "1.3",
        }
    }

    /// Whether sampling parameters and `max_new_tokens` can be set per run.
    pub fn per_run_sampling(self) -> bool {
        matches!(self, Abi::V1_3)
    }
}

impl std::fmt::Display for Abi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Abi {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "1.3" | "1.3.0" => Ok(Abi::V1_3),
            "1.2" | "1.2.1" | "1.2.2" | "1.2.3" => Ok(Abi::V1_2),
            other => Err(format!(
                "unsupported runtime ABI {other:?}: use \"1.3\" (runtime 1.3.x) or \"1.2\" (runtime 1.2.1-1.2.3)"
            )),
        }
    }
}

/// The per-ABI types. Implemented by the marker types [`V1_2`] and [`V1_3`].
pub trait AbiTypes: Sized + Send + Sync + 'static {
    const ABI: Abi;
    type Param: Copy;
    type Input: Copy;
    type InferParam: Copy;
    /// The third argument of `rkllm_init`: a bare function pointer on 1.2,
    /// a pointer to an `RKLLMCallback` struct on 1.3.
    type InitCallback: Copy;
}

/// Marker for ABI 1.2.x.
pub struct V1_2;
/// Marker for ABI 1.3.0.
pub struct V1_3;

impl AbiTypes for V1_2 {
    const ABI: Abi = Abi::V1_2;
    type Param = v1_2::RKLLMParam;
    type Input = v1_2::RKLLMInput;
    type InferParam = v1_2::RKLLMInferParam;
    type InitCallback = LLMResultCallback;
}

impl AbiTypes for V1_3 {
    const ABI: Abi = Abi::V1_3;
    type Param = v1_3::RKLLMParam;
    type Input = v1_3::RKLLMInput;
    type InferParam = v1_3::RKLLMInferParam;
    type InitCallback = *mut v1_3::RKLLMCallback;
}

/// Every runtime function the daemon uses, for one ABI.
pub struct Functions<A: AbiTypes> {
    pub create_default_param: unsafe extern "C" fn() -> A::Param,
    pub init: unsafe extern "C" fn(*mut LLMHandle, *mut A::Param, A::InitCallback) -> c_int,
    pub run: unsafe extern "C" fn(LLMHandle, *mut A::Input, *mut A::InferParam, *mut c_void) -> c_int,
    pub abort: unsafe extern "C" fn(LLMHandle) -> c_int,
    pub is_running: unsafe extern "C" fn(LLMHandle) -> c_int,
    pub destroy: unsafe extern "C" fn(LLMHandle) -> c_int,
    pub clear_kv_cache: unsafe extern "C" fn(LLMHandle, c_int, *mut c_int, *mut c_int) -> c_int,
    pub get_kv_cache_size: unsafe extern "C" fn(LLMHandle, *mut c_int) -> c_int,
    pub set_chat_template: unsafe extern "C" fn(LLMHandle, *const c_char, *const c_char, *const c_char) -> c_int,
    pub set_function_tools: unsafe extern "C" fn(LLMHandle, *const c_char, *const c_char, *const c_char) -> c_int,
    pub load_lora: unsafe extern "C" fn(LLMHandle, *mut RKLLMLoraAdapter) -> c_int,
    pub load_prompt_cache: unsafe extern "C" fn(LLMHandle, *const c_char) -> c_int,
    pub release_prompt_cache: unsafe extern "C" fn(LLMHandle) -> c_int,
}

impl<A: AbiTypes> Clone for Functions<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A: AbiTypes> Copy for Functions<A> {}

/// The symbol names resolved by the loader, in the order of [`Functions`]'
/// fields. A missing one is an error naming it.
pub const SYMBOLS: [&str; 13] = [
    "rkllm_createDefaultParam",
    "rkllm_init",
    "rkllm_run",
    "rkllm_abort",
    "rkllm_is_running",
    "rkllm_destroy",
    "rkllm_clear_kv_cache",
    "rkllm_get_kv_cache_size",
    "rkllm_set_chat_template",
    "rkllm_set_function_tools",
    "rkllm_load_lora",
    "rkllm_load_prompt_cache",
    "rkllm_release_prompt_cache",
];

/// A function table of either ABI.
#[derive(Clone, Copy)]
pub enum Table {
    V1_2(Functions<V1_2>),
    V1_3(Functions<V1_3>),
}

impl Table {
    pub fn abi(&self) -> Abi {
        match self {
            Table::V1_2(_) => Abi::V1_2,
            Table::V1_3(_) => Abi::V1_3,
        }
    }
}
