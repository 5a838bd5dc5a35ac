//! A simulated `librknnrt.so` running a vision encoder: the RKNN C functions
//! a vision-language model's image encoder needs, implemented in Rust with
//! `rknn-sys`'s `repr(C)` types. There is no network: the embedding is a
//! deterministic function of the pixels received, laid out so that the
//! simulated LLM (`rkllm-sim`) can say what it "sees".
//!
//! # Two ways in
//! * **In-process**: [`runtime`] gives an [`rknn_sys::Runtime`] whose table
//!   holds this crate's functions by address.
//! * **As a shared library**: the cdylib `librknn_sim.so` exports the
//!   vendor's names (`rknn_init`, `rknn_query`, …; module `exports`), so
//!   `rknn_sys::Runtime::load` takes it like the real one. Only those thin
//!   wrappers carry `rknn_*` names; an executable linking this crate does
//!   not export them, so it never interposes on a real runtime it loads.
//!
//! # The model path given to `rknn_init` (size 0: a path)
//! * `sim:PROFILE?key=value&…` — the same spec as the simulated LLM's: a
//!   profile with a vision encoder ([`ENCODERS`]) gives its geometry;
//!   `time_scale` is read, every other key belongs to the LLM simulator and
//!   is ignored here. A profile without an encoder fails init
//!   (`RKNN_ERR_MODEL_INVALID`).
//! * a path to an existing file — the default encoder (`qwen2.5-vl-3b`).
//! * anything else fails like the vendor runtime (`RKNN_ERR_MODEL_INVALID`).
//!
//! `time_scale` may also come from `RKLLM_SIM_TIME_SCALE` (the key wins).
//! `RKNN_SIM_FAIL=run` makes every `rknn_run` fail with `RKNN_ERR_FAIL`
//! (a runtime failure for tests).
//!
//! # What it checks
//! Calls on a context from a thread other than the one that called
//! `rknn_init` fail (`RKNN_ERR_CTX_INVALID`, with a line): Rockchip leaves
//! that open, and the daemon promises one thread per context. The input must
//! be one uint8 NHWC tensor of exactly H×W×3 bytes, not pass-through;
//! outputs must be asked for as float. Each `rknn_run` sleeps the profile's
//! published encoder time × `time_scale`.
//!
//! # The embedding
//! Output 0 has dims `[1, T, E]` (float32): T image tokens of width E. For
//! token t (the rows `t·H/T .. (t+1)·H/T` of the image, its "band"):
//! * features 0, 1, 2: the whole image's mean R, G, B, divided by 255;
//! * features 3, 4, 5: the band's mean R, G, B, divided by 255;
//! * feature k ≥ 6: `((k·31 + t·17 + Σ band bytes) mod 251) / 251`.
//!
//! The simulated LLM reads features 0–2 of each image's first token back
//! as `#rrggbb`: a test then proves which pixels reached the encoder and
//! that each image's embedding reached the LLM run at its place.

mod exports;
mod ffi;
mod model;

pub use model::{encoder_for, EncoderProfile, ENCODERS};

/// The in-process table of this crate's functions.
pub fn functions() -> rknn_sys::Functions {
    ffi::table()
}

/// The simulated encoder runtime, in process.
pub fn runtime() -> rknn_sys::Runtime {
    rknn_sys::Runtime::in_process(functions(), "rknn-sim")
}

/// Whether the simulated LLM spec `spec` (`sim:PROFILE?…`) names a profile
/// that brings a vision encoder.
pub fn has_encoder(spec: &str) -> bool {
    spec.starts_with("sim:") && encoder_for(spec).is_ok()
}
