//! The safe layer: one vision encoder context on its own thread.
//!
//! Whether `librknnrt` tolerates calls on a context from a thread other than
//! the one that called `rknn_init` is not stated by Rockchip, so every call
//! on a context is made from the one thread that created it; callers send
//! images over a channel and block on the reply.

use crate::loader::Runtime;
use crate::types::*;
use std::ffi::{c_int, c_void, CString};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EncoderError {
    #[error("the encoder path contains a NUL byte")]
    BadPath,
    #[error("rknn_init failed on {path} (code {code})")]
    Init { path: String, code: c_int },
    #[error("{call} failed (code {code})")]
    Call { call: &'static str, code: c_int },
    #[error("unsupported encoder model: {0}")]
    Shape(String),
    #[error("the image has {got} bytes; the encoder takes {expected} (H×W×3 uint8)")]
    InputSize { expected: usize, got: usize },
    #[error("output {index} has {got} bytes as float; {expected} expected from its attributes")]
    OutputSize { index: u32, expected: usize, got: usize },
    #[error("the encoder thread is gone")]
    ThreadGone,
}

/// What the model says about itself, read once at open.
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderInfo {
    /// The input image size, from the input attribute's dims.
    pub width: u32,
    pub height: u32,
    /// The model's input layout; the encoder is always given NHWC uint8,
    /// the runtime converts (the demo does the same).
    pub input_format: &'static str,
    /// The first output dimension > 1.
    pub n_image_tokens: usize,
    /// Floats per image token handed to the LLM: the dimension after the
    /// token count, times the number of outputs (several outputs are
    /// interleaved per token, as Qwen3-VL's "deepstack" expects).
    pub embed_size: usize,
    pub n_outputs: u32,
    pub api_version: String,
    pub driver_version: String,
}

impl EncoderInfo {
    /// Bytes of one preprocessed image.
    pub fn input_bytes(&self) -> usize {
        self.width as usize * self.height as usize * 3
    }
    /// Floats of one image's embedding.
    pub fn embedding_len(&self) -> usize {
        self.n_image_tokens * self.embed_size
    }
}

type Reply = mpsc::Sender<Result<Vec<f32>, EncoderError>>;

/// An open encoder. `encode` may be called from any thread (calls are
/// served one at a time, in order); dropping it destroys the context.
pub struct Encoder {
    commands: Option<mpsc::Sender<(Vec<u8>, Reply)>>,
    info: EncoderInfo,
    thread: Option<JoinHandle<()>>,
    /// Dropped after the thread is joined: unloading the library while a
    /// thread that called into it is still alive would leave that thread's
    /// exit to run destructors the library registered (a cdylib's own std
    /// does), in unmapped code.
    _runtime: Arc<Runtime>,
}

impl Encoder {
    /// Starts the encoder thread, which initialises `model` (a `.rknn`
    /// path, given to `rknn_init` with size 0), sets `core_mask` and reads
    /// the attributes. Blocks until that is done.
    pub fn open(runtime: Arc<Runtime>, model: &str, core_mask: c_int) -> Result<Encoder, EncoderError> {
        let path = CString::new(model).map_err(|_| EncoderError::BadPath)?;
        let shown = model.to_owned();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (cmd_tx, cmd_rx) = mpsc::channel::<(Vec<u8>, Reply)>();
        let fns = *runtime.functions();
        let thread = std::thread::Builder::new()
            .name("rknn-encoder".into())
            .spawn(move || {
                let ctx = match open_context(&fns, &path, &shown, core_mask) {
                    Ok((ctx, info)) => {
                        let _ = ready_tx.send(Ok(info.clone()));
                        (ctx, info)
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let (ctx, info) = ctx;
                while let Ok((pixels, reply)) = cmd_rx.recv() {
                    let _ = reply.send(run(&fns, ctx, &info, pixels));
                }
                // SAFETY: the context was initialised on this thread and is
                // not used after this.
                unsafe { (fns.destroy)(ctx) };
            })
            .map_err(|_| EncoderError::ThreadGone)?;
        match ready_rx.recv() {
            Ok(Ok(info)) => Ok(Encoder { commands: Some(cmd_tx), info, thread: Some(thread), _runtime: runtime }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(EncoderError::ThreadGone)
            }
        }
    }

    pub fn info(&self) -> &EncoderInfo {
        &self.info
    }

    /// Runs the encoder on one preprocessed image (`height × width × 3`
    /// uint8, NHWC, RGB) and returns its embedding
    /// (`n_image_tokens × embed_size` floats). Blocks.
    pub fn encode(&self, pixels: Vec<u8>) -> Result<Vec<f32>, EncoderError> {
        if pixels.len() != self.info.input_bytes() {
            return Err(EncoderError::InputSize { expected: self.info.input_bytes(), got: pixels.len() });
        }
        let (tx, rx) = mpsc::channel();
        let commands = self.commands.as_ref().ok_or(EncoderError::ThreadGone)?;
        commands.send((pixels, tx)).map_err(|_| EncoderError::ThreadGone)?;
        rx.recv().map_err(|_| EncoderError::ThreadGone)?
    }
}

impl Drop for Encoder {
    fn drop(&mut self) {
        self.commands.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn check(call: &'static str, code: c_int) -> Result<(), EncoderError> {
    if code == RKNN_SUCC {
        Ok(())
    } else {
        Err(EncoderError::Call { call, code })
    }
}

fn open_context(
    fns: &crate::Functions,
    path: &CString,
    shown: &str,
    core_mask: c_int,
) -> Result<(RknnContext, EncoderInfo), EncoderError> {
    let mut ctx: RknnContext = 0;
    // SAFETY: size 0 makes `model` a path (rknn_api.h); the CString outlives the call.
    let code = unsafe { (fns.init)(&mut ctx, path.as_ptr() as *mut c_void, 0, 0, std::ptr::null_mut()) };
    if code != RKNN_SUCC || ctx == 0 {
        return Err(EncoderError::Init { path: shown.to_owned(), code });
    }
    match describe(fns, ctx, core_mask) {
        Ok(info) => Ok((ctx, info)),
        Err(e) => {
            // SAFETY: initialised above, not used after this.
            unsafe { (fns.destroy)(ctx) };
            Err(e)
        }
    }
}

/// # Safety contract
/// `T` must be the struct `cmd` fills.
fn query<T>(
    fns: &crate::Functions,
    ctx: RknnContext,
    cmd: c_int,
    what: &'static str,
    info: &mut T,
) -> Result<(), EncoderError> {
    // SAFETY: `info` is a valid, writable `T` of the size given.
    let code = unsafe { (fns.query)(ctx, cmd, (info as *mut T).cast(), std::mem::size_of::<T>() as u32) };
    check(what, code)
}

fn describe(fns: &crate::Functions, ctx: RknnContext, core_mask: c_int) -> Result<EncoderInfo, EncoderError> {
    // SAFETY: a valid context.
    check("rknn_set_core_mask", unsafe { (fns.set_core_mask)(ctx, core_mask) })?;
    let mut io = RknnInputOutputNum::default();
    query(fns, ctx, RKNN_QUERY_IN_OUT_NUM, "rknn_query(IN_OUT_NUM)", &mut io)?;
    if io.n_input != 1 || io.n_output == 0 {
        return Err(EncoderError::Shape(format!(
            "{} inputs and {} outputs (a vision encoder has one image input and at least one output)",
            io.n_input, io.n_output
        )));
    }
    let mut input = RknnTensorAttr::query(0);
    query(fns, ctx, RKNN_QUERY_INPUT_ATTR, "rknn_query(INPUT_ATTR)", &mut input)?;
    let (height, width, channels, input_format) = match (input.fmt, input.shape()) {
        (RKNN_TENSOR_NHWC, [_, h, w, c]) => (*h, *w, *c, "NHWC"),
        (RKNN_TENSOR_NCHW, [_, c, h, w]) => (*h, *w, *c, "NCHW"),
        (fmt, dims) => return Err(EncoderError::Shape(format!("input format {fmt} with dims {dims:?}"))),
    };
    if channels != 3 || width == 0 || height == 0 {
        return Err(EncoderError::Shape(format!("input {width}×{height} with {channels} channels (RGB expected)")));
    }
    let mut shape = None;
    for index in 0..io.n_output {
        let mut output = RknnTensorAttr::query(index);
        query(fns, ctx, RKNN_QUERY_OUTPUT_ATTR, "rknn_query(OUTPUT_ATTR)", &mut output)?;
        // The demo's reading: the first dimension > 1 is the token count, the next the width.
        let dims = output.shape();
        let tokens_at = dims.iter().take(4).position(|d| *d > 1);
        let this = tokens_at
            .and_then(|at| Some((dims[at] as usize, *dims.get(at + 1)? as usize)))
            .filter(|(_, width)| *width > 0)
            .ok_or_else(|| EncoderError::Shape(format!("output {index} has dims {dims:?}: no [tokens, width]")))?;
        match shape {
            None => shape = Some(this),
            Some(first) if first != this => {
                return Err(EncoderError::Shape(format!("output {index} is {this:?}, output 0 is {first:?}")));
            }
            Some(_) => {}
        }
    }
    let (n_image_tokens, width_per_output) = shape.expect("n_output > 0");
    // SAFETY: all-zero is valid for two char arrays.
    let mut version: RknnSdkVersion = unsafe { std::mem::zeroed() };
    query(fns, ctx, RKNN_QUERY_SDK_VERSION, "rknn_query(SDK_VERSION)", &mut version)?;
    Ok(EncoderInfo {
        width,
        height,
        input_format,
        n_image_tokens,
        embed_size: width_per_output * io.n_output as usize,
        n_outputs: io.n_output,
        api_version: c_text(&version.api_version),
        driver_version: c_text(&version.drv_version),
    })
}

fn run(
    fns: &crate::Functions,
    ctx: RknnContext,
    info: &EncoderInfo,
    mut pixels: Vec<u8>,
) -> Result<Vec<f32>, EncoderError> {
    let mut input = RknnInput {
        index: 0,
        buf: pixels.as_mut_ptr().cast(),
        size: pixels.len() as u32,
        pass_through: 0,
        type_: RKNN_TENSOR_UINT8,
        fmt: RKNN_TENSOR_NHWC,
    };
    // SAFETY: one valid input whose buffer outlives the call (the runtime copies it).
    check("rknn_inputs_set", unsafe { (fns.inputs_set)(ctx, 1, &mut input) })?;
    // SAFETY: a valid context; NULL extend is allowed.
    check("rknn_run", unsafe { (fns.run)(ctx, std::ptr::null_mut()) })?;
    let n = info.n_outputs;
    let mut outputs: Vec<RknnOutput> = (0..n)
        .map(|index| RknnOutput { want_float: 1, is_prealloc: 0, index, buf: std::ptr::null_mut(), size: 0 })
        .collect();
    // SAFETY: `n` outputs, each asking the runtime to allocate a float buffer.
    check("rknn_outputs_get", unsafe { (fns.outputs_get)(ctx, n, outputs.as_mut_ptr(), std::ptr::null_mut()) })?;
    let copied = interleave(info, &outputs);
    // SAFETY: the outputs the runtime filled above; their buffers are not used after this.
    let released = unsafe { (fns.outputs_release)(ctx, n, outputs.as_mut_ptr()) };
    let embedding = copied?;
    check("rknn_outputs_release", released)?;
    Ok(embedding)
}

/// One image's embedding from the runtime's float outputs: for each token,
/// output 0's floats, then output 1's, … (one output: a plain copy).
fn interleave(info: &EncoderInfo, outputs: &[RknnOutput]) -> Result<Vec<f32>, EncoderError> {
    let tokens = info.n_image_tokens;
    let width = info.embed_size / outputs.len();
    let mut slices = Vec::with_capacity(outputs.len());
    for out in outputs {
        let expected = tokens * width * 4;
        if out.buf.is_null() || out.size as usize != expected {
            return Err(EncoderError::OutputSize { index: out.index, expected, got: out.size as usize });
        }
        // SAFETY: the runtime's buffer of `size` bytes of f32 (want_float), alive until release.
        slices.push(unsafe { std::slice::from_raw_parts(out.buf as *const f32, tokens * width) });
    }
    let mut embedding = Vec::with_capacity(info.embedding_len());
    for token in 0..tokens {
        for slice in &slices {
            embedding.extend_from_slice(&slice[token * width..(token + 1) * width]);
        }
    }
    Ok(embedding)
}
