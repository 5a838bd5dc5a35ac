//! LoRA adapters and prompt-cache files: the handle calls that load them
//! (`rkllm_load_lora`, `rkllm_load_prompt_cache`, `rkllm_release_prompt_cache`)
//! and the per-run `lora_params` / `prompt_cache_params` that use them.
//!
//! The load calls report their reasons only on stdout/stderr, like
//! `rkllm_init`, so that text is captured and becomes part of the error.

use crate::abi::Functions;
use crate::capture::{capture_output, echo};
use crate::common::*;
use crate::error::ModelError;
use crate::marshal::Marshal;
use crate::params::LoraAdapter;
use std::ffi::{c_int, CString};
use std::ptr;

/// One load or release, its strings ready for C.
pub(crate) enum Load {
    Lora { name: CString, path: CString, scale: f32 },
    PromptCache { path: CString },
    ReleasePromptCache,
}

impl Load {
    pub fn lora(adapter: &LoraAdapter) -> Result<Load, ModelError> {
        let text = |s: &str| CString::new(s).map_err(|_| ModelError::Nul("the LoRA adapter"));
        Ok(Load::Lora { name: text(&adapter.name)?, path: text(&adapter.path)?, scale: adapter.scale })
    }

    pub fn prompt_cache(path: &str) -> Result<Load, ModelError> {
        Ok(Load::PromptCache { path: CString::new(path).map_err(|_| ModelError::Nul("the prompt cache path"))? })
    }

    /// Makes the call on the runtime thread; a failure carries what the runtime printed.
    pub fn call<A: Marshal>(&self, fns: &Functions<A>, handle: LLMHandle) -> Result<(), ModelError> {
        let (call, (code, log)): (&'static str, (c_int, String)) = match self {
            Load::Lora { name, path, scale } => {
                let mut adapter = RKLLMLoraAdapter {
                    lora_adapter_path: path.as_ptr(),
                    lora_adapter_name: name.as_ptr(),
                    scale: *scale,
                };
                // SAFETY: valid handle; the struct and its strings outlive the call.
                ("rkllm_load_lora", capture_output(|| unsafe { (fns.load_lora)(handle, &mut adapter) }))
            }
            Load::PromptCache { path } => {
                // SAFETY: valid handle and a NUL-terminated path.
                (
                    "rkllm_load_prompt_cache",
                    capture_output(|| unsafe { (fns.load_prompt_cache)(handle, path.as_ptr()) }),
                )
            }
            Load::ReleasePromptCache => {
                // SAFETY: valid handle.
                ("rkllm_release_prompt_cache", capture_output(|| unsafe { (fns.release_prompt_cache)(handle) }))
            }
        };
        if code == 0 {
            echo(&log);
            Ok(())
        } else {
            Err(ModelError::Said { call, code, log })
        }
    }
}

/// A run's `lora_params` and `prompt_cache_params` and the strings they
/// point at. Take the pointers ([`RunExtras::pointers`]) only once the value
/// is in the place it stays until `rkllm_run` returns.
pub(crate) struct RunExtras {
    name: Option<CString>,
    lora: RKLLMLoraParam,
    path: Option<CString>,
    cache: RKLLMPromptCacheParam,
}

impl RunExtras {
    /// NUL characters cannot cross to C: a name or path with one selects
    /// nothing (the runtime then reports what it makes of that).
    pub fn new(lora: Option<&str>, save_prompt_cache: Option<&str>) -> RunExtras {
        let text = |s: &str| CString::new(s.replace('\0', "")).unwrap_or_default();
        RunExtras {
            name: lora.map(text),
            lora: RKLLMLoraParam { lora_adapter_name: ptr::null() },
            path: save_prompt_cache.map(text),
            cache: RKLLMPromptCacheParam { save_prompt_cache: 0, prompt_cache_path: ptr::null() },
        }
    }

    /// `lora_params` and `prompt_cache_params`: NULL when not asked for.
    pub fn pointers(&mut self) -> (*mut RKLLMLoraParam, *mut RKLLMPromptCacheParam) {
        let lora = match &self.name {
            Some(name) => {
                self.lora.lora_adapter_name = name.as_ptr();
                &mut self.lora as *mut _
            }
            None => ptr::null_mut(),
        };
        let cache = match &self.path {
            Some(path) => {
                self.cache = RKLLMPromptCacheParam { save_prompt_cache: 1, prompt_cache_path: path.as_ptr() };
                &mut self.cache as *mut _
            }
            None => ptr::null_mut(),
        };
        (lora, cache)
    }
}
