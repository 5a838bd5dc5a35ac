//! The vendor's symbol names, for the cdylib `librknn_sim.so`: thin
//! wrappers over the functions the in-process table points at.
//!
//! # Safety
//! Every function has the C contract of its namesake in `rknn_api.h`.

#![allow(clippy::missing_safety_doc)]

use crate::ffi;
use rknn_sys::types::*;
use std::ffi::{c_int, c_void};

#[no_mangle]
pub unsafe extern "C" fn rknn_init(
    ctx: *mut RknnContext,
    model: *mut c_void,
    size: u32,
    flag: u32,
    extend: *mut RknnInitExtend,
) -> c_int {
    ffi::init(ctx, model, size, flag, extend)
}

#[no_mangle]
pub unsafe extern "C" fn rknn_destroy(ctx: RknnContext) -> c_int {
    ffi::destroy(ctx)
}

#[no_mangle]
pub unsafe extern "C" fn rknn_query(ctx: RknnContext, cmd: c_int, info: *mut c_void, size: u32) -> c_int {
    ffi::query(ctx, cmd, info, size)
}

#[no_mangle]
pub unsafe extern "C" fn rknn_set_core_mask(ctx: RknnContext, mask: c_int) -> c_int {
    ffi::set_core_mask(ctx, mask)
}

#[no_mangle]
pub unsafe extern "C" fn rknn_inputs_set(ctx: RknnContext, n: u32, inputs: *mut RknnInput) -> c_int {
    ffi::inputs_set(ctx, n, inputs)
}

#[no_mangle]
pub unsafe extern "C" fn rknn_run(ctx: RknnContext, extend: *mut RknnRunExtend) -> c_int {
    ffi::run(ctx, extend)
}

#[no_mangle]
pub unsafe extern "C" fn rknn_outputs_get(
    ctx: RknnContext,
    n: u32,
    outputs: *mut RknnOutput,
    extend: *mut RknnOutputExtend,
) -> c_int {
    ffi::outputs_get(ctx, n, outputs, extend)
}

#[no_mangle]
pub unsafe extern "C" fn rknn_outputs_release(ctx: RknnContext, n: u32, outputs: *mut RknnOutput) -> c_int {
    ffi::outputs_release(ctx, n, outputs)
}
