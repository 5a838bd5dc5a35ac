//! The live handles. A handle is the address of its model; every call looks
//! it up here first, so a NULL, stale or foreign handle gets an error code
//! instead of being dereferenced, and a model stays alive while any call
//! on it is in progress.

use crate::engine::SimModel;
use rkllm_sys::common::LLMHandle;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

static LIVE: Mutex<BTreeMap<usize, Arc<SimModel>>> = Mutex::new(BTreeMap::new());

fn live() -> MutexGuard<'static, BTreeMap<usize, Arc<SimModel>>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn insert(model: SimModel) -> LLMHandle {
    let model = Arc::new(model);
    let handle = Arc::as_ptr(&model) as LLMHandle;
    live().insert(handle as usize, model);
    handle
}

pub(crate) fn get(handle: LLMHandle) -> Option<Arc<SimModel>> {
    live().get(&(handle as usize)).cloned()
}

pub(crate) fn remove(handle: LLMHandle) -> Option<Arc<SimModel>> {
    live().remove(&(handle as usize))
}
