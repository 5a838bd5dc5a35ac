//! The `repr(C)` types and constants of `rknn_api.h` (rknn-toolkit2 SDK 2.3.2,
//! `rknpu2/runtime/Linux/librknn_api/include/rknn_api.h`) that the encoder
//! uses. Every field's offset is asserted in `tests/layout.rs`. LP64 only:
//! `rknn_context` is `uint64_t` there (`uint32_t` on 32-bit arm, not served).

use std::ffi::{c_char, c_int, c_void};

/// `rknn_context` on aarch64 / x86_64.
pub type RknnContext = u64;

pub const RKNN_SUCC: c_int = 0;
pub const RKNN_MAX_DIMS: usize = 16;
pub const RKNN_MAX_NAME_LEN: usize = 256;

/// `rknn_query_cmd` values used here.
pub const RKNN_QUERY_IN_OUT_NUM: c_int = 0;
pub const RKNN_QUERY_INPUT_ATTR: c_int = 1;
pub const RKNN_QUERY_OUTPUT_ATTR: c_int = 2;
pub const RKNN_QUERY_SDK_VERSION: c_int = 5;

/// `rknn_tensor_format`.
pub const RKNN_TENSOR_NCHW: c_int = 0;
pub const RKNN_TENSOR_NHWC: c_int = 1;

/// `rknn_tensor_type` values used here.
pub const RKNN_TENSOR_FLOAT32: c_int = 0;
pub const RKNN_TENSOR_UINT8: c_int = 3;

/// `rknn_core_mask`: `RKNN_NPU_CORE_AUTO`; cores 0, 1, 2 are bits 0..2.
pub const RKNN_NPU_CORE_AUTO: c_int = 0;
pub const RKNN_NPU_CORE_0_1_2: c_int = 7;
/// "auto choice, run on NPU cores depending on platform": all of RK3588's 3
/// or RK3576's 2 (the demo gives the encoder every core).
pub const RKNN_NPU_CORE_ALL: c_int = 0xffff;

/// `rknn_input_output_num`, 8 B.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RknnInputOutputNum {
    pub n_input: u32,
    pub n_output: u32,
}

/// `rknn_tensor_attr`, 376 B. The enums (`fmt`, `type_`, `qnt_type`) are C
/// `int`s, read as integers: a library may return any value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RknnTensorAttr {
    /// Set by the caller before `rknn_query`.
    pub index: u32,
    pub n_dims: u32,
    pub dims: [u32; RKNN_MAX_DIMS],
    pub name: [c_char; RKNN_MAX_NAME_LEN],
    pub n_elems: u32,
    pub size: u32,
    pub fmt: c_int,
    pub type_: c_int,
    pub qnt_type: c_int,
    pub fl: i8,
    pub zp: i32,
    pub scale: f32,
    pub w_stride: u32,
    pub size_with_stride: u32,
    pub pass_through: u8,
    pub h_stride: u32,
}

impl RknnTensorAttr {
    /// A zeroed attribute asking for tensor `index`.
    pub fn query(index: u32) -> Self {
        // SAFETY: all-zero is valid for every field (integers and arrays of them).
        let mut attr: Self = unsafe { std::mem::zeroed() };
        attr.index = index;
        attr
    }

    /// The used dimensions (`n_dims` clamped to the array).
    pub fn shape(&self) -> &[u32] {
        &self.dims[..(self.n_dims as usize).min(RKNN_MAX_DIMS)]
    }
}

/// `rknn_sdk_version`, 512 B.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RknnSdkVersion {
    pub api_version: [c_char; 256],
    pub drv_version: [c_char; 256],
}

/// `rknn_input`, 32 B.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RknnInput {
    pub index: u32,
    pub buf: *mut c_void,
    pub size: u32,
    pub pass_through: u8,
    pub type_: c_int,
    pub fmt: c_int,
}

/// `rknn_output`, 24 B.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RknnOutput {
    pub want_float: u8,
    pub is_prealloc: u8,
    pub index: u32,
    pub buf: *mut c_void,
    pub size: u32,
}

/// `rknn_init_extend`, `rknn_run_extend`, `rknn_output_extend`: always
/// passed as NULL, so only named.
pub enum RknnInitExtend {}
pub enum RknnRunExtend {}
pub enum RknnOutputExtend {}

/// A NUL-terminated `char` array as text (lossy; up to the first NUL).
pub fn c_text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
