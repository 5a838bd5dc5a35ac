//! The C functions, by address (the in-process table) and behind the
//! cdylib's named exports. Each checks what the vendor runtime would and
//! prints an `E RKNN:` line to stderr when it refuses.

use crate::model::{self, Spec};
use rknn_sys::types::*;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::Duration;

const RKNN_ERR_FAIL: c_int = -1;
const RKNN_ERR_PARAM_INVALID: c_int = -5;
const RKNN_ERR_MODEL_INVALID: c_int = -6;
const RKNN_ERR_CTX_INVALID: c_int = -7;
const RKNN_ERR_INPUT_INVALID: c_int = -8;

struct Context {
    spec: Spec,
    thread: ThreadId,
    input: Option<Vec<u8>>,
    result: Option<Vec<f32>>,
    /// Buffers handed out by `rknn_outputs_get`, freed by `rknn_outputs_release`.
    lent: Vec<Box<[f32]>>,
}

static CONTEXTS: Mutex<Option<HashMap<u64, Context>>> = Mutex::new(None);
static NEXT: AtomicU64 = AtomicU64::new(1);

fn contexts() -> MutexGuard<'static, Option<HashMap<u64, Context>>> {
    CONTEXTS.lock().unwrap_or_else(|p| p.into_inner())
}

fn line(text: &str) {
    eprintln!("{text}");
}

/// Runs `f` on the context, refusing an unknown one or another thread.
fn with<T>(ctx: RknnContext, f: impl FnOnce(&mut Context) -> Result<T, c_int>) -> Result<T, c_int> {
    let mut all = contexts();
    let Some(context) = all.get_or_insert_with(HashMap::new).get_mut(&ctx) else {
        line(&format!("E RKNN: invalid context {ctx}"));
        return Err(RKNN_ERR_CTX_INVALID);
    };
    if context.thread != std::thread::current().id() {
        line("E RKNN: context used from a thread other than the one that called rknn_init (the simulator refuses it)");
        return Err(RKNN_ERR_CTX_INVALID);
    }
    f(context)
}

fn code(result: Result<(), c_int>) -> c_int {
    result.err().unwrap_or(RKNN_SUCC)
}

pub(crate) unsafe extern "C" fn init(
    ctx: *mut RknnContext,
    model: *mut c_void,
    size: u32,
    _flag: u32,
    _extend: *mut RknnInitExtend,
) -> c_int {
    if ctx.is_null() || model.is_null() {
        return RKNN_ERR_PARAM_INVALID;
    }
    if size != 0 {
        line("E RKNN: the simulator loads models by path only (size 0)");
        return RKNN_ERR_MODEL_INVALID;
    }
    // SAFETY: with size 0, `model` is a C string path (rknn_api.h).
    let path = unsafe { CStr::from_ptr(model as *const c_char) }.to_string_lossy().into_owned();
    let spec = match model::parse(&path) {
        Ok(spec) => spec,
        Err(message) => {
            line(&message);
            return RKNN_ERR_MODEL_INVALID;
        }
    };
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let context = Context { spec, thread: std::thread::current().id(), input: None, result: None, lent: Vec::new() };
    contexts().get_or_insert_with(HashMap::new).insert(id, context);
    line(&format!(
        "I RKNN: rknn_init simulated encoder {} ({}x{}, {} tokens)",
        spec.profile.name, spec.profile.size, spec.profile.size, spec.profile.tokens
    ));
    // SAFETY: checked non-NULL above.
    unsafe { *ctx = id };
    RKNN_SUCC
}

pub(crate) unsafe extern "C" fn destroy(ctx: RknnContext) -> c_int {
    code(with(ctx, |_| Ok(())).map(|()| {
        contexts().get_or_insert_with(HashMap::new).remove(&ctx);
    }))
}

pub(crate) unsafe extern "C" fn set_core_mask(ctx: RknnContext, mask: c_int) -> c_int {
    code(with(ctx, |_| match mask {
        0..=7 | RKNN_NPU_CORE_ALL => Ok(()),
        other => {
            line(&format!("E RKNN: invalid core mask {other}"));
            Err(RKNN_ERR_PARAM_INVALID)
        }
    }))
}

/// Writes `value` into the caller's `info` if `size` is exactly its size.
unsafe fn answer<T>(info: *mut c_void, size: u32, value: T) -> Result<(), c_int> {
    if info.is_null() || size as usize != std::mem::size_of::<T>() {
        line(&format!("E RKNN: rknn_query: info size {size}, expected {}", std::mem::size_of::<T>()));
        return Err(RKNN_ERR_PARAM_INVALID);
    }
    // SAFETY: the caller's buffer of exactly size_of::<T>() bytes (checked).
    unsafe { (info as *mut T).write_unaligned(value) };
    Ok(())
}

fn text<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

pub(crate) unsafe extern "C" fn query(ctx: RknnContext, cmd: c_int, info: *mut c_void, size: u32) -> c_int {
    code(with(ctx, |c| {
        let p = c.spec.profile;
        // The index the caller set, for the attribute queries.
        let index =
            || if info.is_null() || size < 4 { u32::MAX } else { unsafe { (info as *const u32).read_unaligned() } };
        match cmd {
            RKNN_QUERY_IN_OUT_NUM => unsafe { answer(info, size, RknnInputOutputNum { n_input: 1, n_output: 1 }) },
            RKNN_QUERY_INPUT_ATTR | RKNN_QUERY_OUTPUT_ATTR if index() != 0 => {
                line(&format!("E RKNN: rknn_query: tensor index {} out of range", index()));
                Err(RKNN_ERR_PARAM_INVALID)
            }
            RKNN_QUERY_INPUT_ATTR => {
                let mut a = RknnTensorAttr::query(0);
                a.n_dims = 4;
                a.dims[..4].copy_from_slice(&[1, p.size, p.size, 3]);
                a.name = text("pixel_values");
                a.n_elems = p.size * p.size * 3;
                a.size = a.n_elems;
                a.fmt = RKNN_TENSOR_NHWC;
                a.type_ = RKNN_TENSOR_UINT8;
                unsafe { answer(info, size, a) }
            }
            RKNN_QUERY_OUTPUT_ATTR => {
                let mut a = RknnTensorAttr::query(0);
                a.n_dims = 3;
                a.dims[..3].copy_from_slice(&[1, p.tokens, p.width]);
                a.name = text("image_embeds");
                a.n_elems = p.tokens * p.width;
                a.size = a.n_elems * 4;
                a.fmt = RKNN_TENSOR_NCHW;
                a.type_ = RKNN_TENSOR_FLOAT32;
                unsafe { answer(info, size, a) }
            }
            RKNN_QUERY_SDK_VERSION => unsafe {
                answer(
                    info,
                    size,
                    RknnSdkVersion { api_version: text("2.3.2 (simulated)"), drv_version: text("0.9.8 (simulated)") },
                )
            },
            other => {
                line(&format!("E RKNN: rknn_query command {other} is not simulated"));
                Err(RKNN_ERR_PARAM_INVALID)
            }
        }
    }))
}

pub(crate) unsafe extern "C" fn inputs_set(ctx: RknnContext, n: u32, inputs: *mut RknnInput) -> c_int {
    code(with(ctx, |c| {
        if n != 1 || inputs.is_null() {
            line(&format!("E RKNN: rknn_inputs_set: {n} inputs, the model has 1"));
            return Err(RKNN_ERR_PARAM_INVALID);
        }
        // SAFETY: one input (checked non-NULL).
        let input = unsafe { *inputs };
        let expected = (c.spec.profile.size * c.spec.profile.size * 3) as usize;
        let wrong = if input.index != 0 {
            Some(format!("index {}", input.index))
        } else if input.pass_through != 0 {
            Some("pass_through".to_owned())
        } else if input.type_ != RKNN_TENSOR_UINT8 || input.fmt != RKNN_TENSOR_NHWC {
            Some(format!("type {} fmt {} (uint8 NHWC expected)", input.type_, input.fmt))
        } else if input.buf.is_null() || input.size as usize != expected {
            Some(format!("{} bytes, {expected} expected", input.size))
        } else {
            None
        };
        if let Some(what) = wrong {
            line(&format!("E RKNN: rknn_inputs_set: {what}"));
            return Err(RKNN_ERR_INPUT_INVALID);
        }
        // SAFETY: `size` readable bytes (the caller's contract).
        c.input = Some(unsafe { std::slice::from_raw_parts(input.buf as *const u8, expected) }.to_vec());
        Ok(())
    }))
}

pub(crate) unsafe extern "C" fn run(ctx: RknnContext, _extend: *mut RknnRunExtend) -> c_int {
    let planned = with(ctx, |c| {
        if std::env::var("RKNN_SIM_FAIL").is_ok_and(|v| v == "run") {
            line("E RKNN: simulated failure of rknn_run (RKNN_SIM_FAIL=run)");
            return Err(RKNN_ERR_FAIL);
        }
        let Some(input) = c.input.as_deref() else {
            line("E RKNN: rknn_run without an input set");
            return Err(RKNN_ERR_INPUT_INVALID);
        };
        let p = c.spec.profile;
        c.result = Some(model::embed(input, p.size as usize, p.tokens as usize, p.width as usize));
        Ok(p.encoder_ms * c.spec.time_scale)
    });
    match planned {
        Ok(ms) => {
            // Outside the lock: other contexts go on meanwhile.
            std::thread::sleep(Duration::from_secs_f64(ms / 1000.0));
            RKNN_SUCC
        }
        Err(code) => code,
    }
}

pub(crate) unsafe extern "C" fn outputs_get(
    ctx: RknnContext,
    n: u32,
    outputs: *mut RknnOutput,
    _extend: *mut RknnOutputExtend,
) -> c_int {
    code(with(ctx, |c| {
        if n != 1 || outputs.is_null() {
            line(&format!("E RKNN: rknn_outputs_get: {n} outputs, the model has 1"));
            return Err(RKNN_ERR_PARAM_INVALID);
        }
        // SAFETY: one output (checked non-NULL).
        let out = unsafe { &mut *outputs };
        if out.index != 0 || out.want_float != 1 || out.is_prealloc != 0 {
            line("E RKNN: rknn_outputs_get: the simulator serves output 0 as float, runtime-allocated");
            return Err(RKNN_ERR_PARAM_INVALID);
        }
        let Some(result) = c.result.take() else {
            line("E RKNN: rknn_outputs_get before rknn_run");
            return Err(RKNN_ERR_FAIL);
        };
        let mut buffer = result.into_boxed_slice();
        out.buf = buffer.as_mut_ptr().cast();
        out.size = (buffer.len() * 4) as u32;
        c.lent.push(buffer);
        Ok(())
    }))
}

pub(crate) unsafe extern "C" fn outputs_release(ctx: RknnContext, n: u32, outputs: *mut RknnOutput) -> c_int {
    code(with(ctx, |c| {
        if outputs.is_null() {
            return Err(RKNN_ERR_PARAM_INVALID);
        }
        for i in 0..n as usize {
            // SAFETY: `n` outputs (the caller's contract).
            let out = unsafe { &mut *outputs.add(i) };
            let lent = c.lent.iter().position(|b| b.as_ptr() as *mut c_void == out.buf);
            match lent {
                Some(at) => {
                    c.lent.swap_remove(at);
                    out.buf = std::ptr::null_mut();
                }
                None => {
                    line("E RKNN: rknn_outputs_release of a buffer this context did not lend");
                    return Err(RKNN_ERR_PARAM_INVALID);
                }
            }
        }
        Ok(())
    }))
}

pub(crate) fn table() -> rknn_sys::Functions {
    rknn_sys::Functions { init, destroy, query, set_core_mask, inputs_set, run, outputs_get, outputs_release }
}
