//! The `record` file: one JSON line per runtime call the simulator receives,
//! so tests can check exactly what a caller passed through the C ABI.
//!
//! Every line has `"call"`: `init`, `run`, `run_end` (how a run ended),
//! `load_lora`, `load_prompt_cache`, `release_prompt_cache`, `abort`,
//! `clear_kv_cache`, `set_chat_template`, `set_function_tools`,
//! `set_cross_attn_params`, `destroy`. Floats are written as their shortest `f32` text (0.9, not
//! 0.8999999761581421).

use crate::call::{InferOptions, InitParams, RunInput};
use rkllm_sys::SamplingParams;
use serde_json::{json, Map, Value};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub(crate) struct Recorder {
    file: Option<Mutex<File>>,
}

impl Recorder {
    /// Opens `path` for appending; `None` records nothing.
    pub fn open(path: Option<&Path>) -> Result<Recorder, String> {
        let Some(path) = path else {
            return Ok(Recorder::default());
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("simulator: cannot open record file {}: {e}", path.display()))?;
        Ok(Recorder { file: Some(Mutex::new(file)) })
    }

    /// Appends one line; a write error is ignored (recording must never
    /// change what the runtime does).
    pub fn write(&self, line: Value) {
        if let Some(file) = &self.file {
            let mut bytes = line.to_string().into_bytes();
            bytes.push(b'\n');
            let _ = file.lock().unwrap_or_else(|e| e.into_inner()).write_all(&bytes);
        }
    }
}

fn float(x: f32) -> Value {
    format!("{x}").parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
}

/// Every field, taken apart with no `..`: a field added to `SamplingParams`
/// and not recorded here does not compile.
fn sampling(s: &SamplingParams) -> Value {
    let SamplingParams {
        top_k,
        top_p,
        temperature,
        repeat_penalty,
        frequency_penalty,
        presence_penalty,
        mirostat,
        mirostat_tau,
        mirostat_eta,
    } = *s;
    json!({
        "top_k": top_k,
        "top_p": float(top_p),
        "temperature": float(temperature),
        "repeat_penalty": float(repeat_penalty),
        "frequency_penalty": float(frequency_penalty),
        "presence_penalty": float(presence_penalty),
        "mirostat": mirostat,
        "mirostat_tau": float(mirostat_tau),
        "mirostat_eta": float(mirostat_eta),
    })
}

/// Inserts `extra` into the object `base`.
fn with(mut base: Value, extra: Value) -> Value {
    if let (Value::Object(b), Value::Object(e)) = (&mut base, extra) {
        b.extend(e);
    }
    base
}

/// Every `RKLLMParam` field; the sampling fields at top level as in the struct.
pub(crate) fn init(p: &InitParams, has_callback: bool) -> Value {
    let e = &p.extend;
    let mut line = json!({
        "call": "init",
        "abi": p.abi.as_str(),
        "model_path": p.model_path,
        "max_context_len": p.max_context_len,
        "max_new_tokens": p.max_new_tokens,
        "n_keep": p.n_keep,
        "skip_special_token": p.skip_special_token,
        "is_async": p.is_async,
        "has_callback": has_callback,
        "extend_param": {
            "base_domain_id": e.base_domain_id,
            "embed_flash": e.embed_flash,
            "enabled_cpus_num": e.enabled_cpus_num,
            "enabled_cpus_mask": e.enabled_cpus_mask,
            "n_batch": e.n_batch,
            "use_cross_attn": e.use_cross_attn,
        },
    });
    line = with(line, sampling(&p.sampling));
    let mut abi_specific = Map::new();
    if let Some(ignore) = p.ignore_eos_token {
        abi_specific.insert("ignore_eos_token".into(), ignore.into());
    }
    if let Some([start, end, content]) = &p.img {
        abi_specific.insert("img_start".into(), json!(start));
        abi_specific.insert("img_end".into(), json!(end));
        abi_specific.insert("img_content".into(), json!(content));
    }
    with(line, Value::Object(abi_specific))
}

fn input(input: &RunInput) -> Value {
    json!({
        "role": input.role,
        "enable_thinking": input.enable_thinking,
        "input_type": input.input_type,
        "prompt": input.prompt,
        "token_ids": input.token_ids,
    })
}

/// The inputs and infer params of an `rkllm_run`: one input's fields at top
/// level, or with `n_batch` > 1 an `inputs` array of them. `max_new_tokens`
/// and `sampling` (an object or null) are present on ABI 1.3 only.
pub(crate) fn run(inputs: &[RunInput], infer: &InferOptions, per_run_params: bool) -> Value {
    let mut line = json!({
        "call": "run",
        "mode": infer.mode,
        "keep_history": infer.keep_history,
        "lora_adapter": infer.lora_adapter,
        "prompt_cache": infer.prompt_cache.as_ref().map(|(save, path)| json!({"save_prompt_cache": save, "prompt_cache_path": path})),
    });
    line = match inputs {
        [one] => with(line, input(one)),
        many => with(line, json!({"inputs": many.iter().map(input).collect::<Vec<_>>()})),
    };
    if !per_run_params {
        return line;
    }
    with(
        line,
        json!({
            "max_new_tokens": infer.max_new_tokens,
            "sampling": infer.sampling.as_ref().map(sampling),
        }),
    )
}

/// Three strings of `rkllm_set_chat_template` / `rkllm_set_function_tools`.
pub(crate) fn strings(call: &str, names: [&str; 3], values: &[Option<String>; 3]) -> Value {
    let mut line = Map::new();
    line.insert("call".into(), call.into());
    for (name, value) in names.iter().zip(values) {
        line.insert((*name).into(), json!(value));
    }
    Value::Object(line)
}
