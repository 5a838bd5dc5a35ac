//! The context a model is served with. Unless the operator sets
//! `max_context_len`, it is the context the model was converted for: the
//! runtime states it at init (`I rkllm: rkllm-toolkit version: …,
//! max_context_limit: 16384, …`), and the toolkit builds models for 4096 to
//! 16384 (an agent's first request alone is 12–52k tokens). The first init
//! uses the vendor demos' 4096, which every model takes; a model converted
//! for another size is then initialised again with its own. Whether the
//! runtime would take a larger `max_context_len` than the model's limit is
//! open in its manual, so rkllmd never gives it one unasked, and says so
//! (WARN) when the operator does.

use super::limits::{Limits, DEFAULT_MAX_CONTEXT_LEN};
use crate::metrics::init_log::InitFacts;
use rkllm_sys::{InitConfig, Model, ModelError, Runtime};
use std::sync::Arc;

/// Loads the model with the context it is to be served with; the limits as
/// served (`max_context_len` the context given to the runtime). A model
/// loaded again for its own context gets `slots(context)` batch slots (a
/// slot holds a whole context's KV: `slot_count.rs`).
pub(super) fn load(
    runtime: &Arc<Runtime>,
    init: InitConfig,
    limits: Limits,
    slots: &dyn Fn(u32) -> u8,
) -> Result<(Model, Limits), ModelError> {
    let (model, limits) = load_with_context(runtime, init, limits, slots)?;
    if limits.max_new_tokens > limits.max_context_len {
        tracing::warn!(
            max_new_tokens = limits.max_new_tokens,
            context = limits.max_context_len,
            "max_new_tokens exceeds the model's context: a reply takes at most the context"
        );
    }
    let max_new_tokens = limits.max_new_tokens.min(limits.max_context_len);
    Ok((model, Limits { max_new_tokens, ..limits }))
}

fn load_with_context(
    runtime: &Arc<Runtime>,
    init: InitConfig,
    limits: Limits,
    slots: &dyn Fn(u32) -> u8,
) -> Result<(Model, Limits), ModelError> {
    // Never more than the context: an unset context's first init is 4096.
    let init = InitConfig { max_new_tokens: init.max_new_tokens.min(init.max_context_len), ..init };
    let model = Model::load(runtime.clone(), init.clone())?;
    let converted = InitFacts::parse(model.init_log()).max_context_limit;
    match converted {
        Some(limit) if limits.context_from_model && limit != limits.max_context_len => {
            drop(model);
            tracing::info!(
                context = limit,
                "the model was converted for a context of {limit} tokens: loading it again to serve that (max_context_len)"
            );
            let max_new_tokens = (limits.max_new_tokens.min(limit)) as i32;
            let own =
                InitConfig { max_context_len: limit as i32, max_new_tokens, n_batch: slots(limit), ..init.clone() };
            match Model::load(runtime.clone(), own) {
                Ok(model) => Ok((model, Limits { max_context_len: limit, ..limits })),
                // Its own context does not load (NPU memory, a runtime that
                // sizes it otherwise): served as first loaded, and said.
                Err(e) => {
                    tracing::warn!(
                        context = limit,
                        error = %e,
                        served = limits.max_context_len,
                        "the model does not load with the context it was converted for: serving the first init's \
                         (set max_context_len to choose)"
                    );
                    Ok((Model::load(runtime.clone(), init)?, limits))
                }
            }
        }
        Some(limit) if limit < limits.max_context_len => {
            tracing::warn!(
                max_context_len = limits.max_context_len,
                max_context_limit = limit,
                "max_context_len exceeds the context the model was converted for: the runtime may refuse or fail \
                 prompts past {limit} tokens (leave max_context_len unset to serve the model's own)"
            );
            Ok((model, limits))
        }
        None if limits.context_from_model => {
            tracing::warn!(
                context = DEFAULT_MAX_CONTEXT_LEN,
                "the runtime did not say the model's max_context_limit at init: serving a context of \
                 {DEFAULT_MAX_CONTEXT_LEN} tokens (set max_context_len for a model converted for more)"
            );
            Ok((model, limits))
        }
        _ => Ok((model, limits)),
    }
}
