//! The `repr(C)` types against `rknn_api.h` (SDK 2.3.2), LP64: every field
//! the encoder reads or writes, at the offset the header's C layout gives.

use rknn_sys::types::*;
use std::mem::{align_of, offset_of, size_of};

/// `(what, actual, expected)` rows; panics listing every one that differs.
fn check(ty: &str, rows: &[(&str, usize, usize)]) {
    let wrong: Vec<String> = rows
        .iter()
        .filter(|(_, a, e)| a != e)
        .map(|(w, a, e)| format!("  {w}: is {a}, the header gives {e}"))
        .collect();
    assert!(wrong.is_empty(), "layout of {ty} differs from rknn_api.h:\n{}", wrong.join("\n"));
}

macro_rules! layout {
    ($ty:ty, size $size:literal, align $align:literal, { $($field:ident @ $off:literal),+ $(,)? }) => {
        check(
            stringify!($ty),
            &[
                ("size", size_of::<$ty>(), $size),
                ("align", align_of::<$ty>(), $align),
                $((stringify!($field), offset_of!($ty, $field), $off),)+
            ],
        )
    };
}

#[test]
fn context_is_64_bit() {
    assert_eq!(size_of::<RknnContext>(), 8);
}

#[test]
fn input_output_num() {
    layout!(RknnInputOutputNum, size 8, align 4, { n_input @ 0, n_output @ 4 });
}

#[test]
fn tensor_attr() {
    layout!(RknnTensorAttr, size 376, align 4, {
        index @ 0, n_dims @ 4, dims @ 8, name @ 72, n_elems @ 328, size @ 332, fmt @ 336, type_ @ 340,
        qnt_type @ 344, fl @ 348, zp @ 352, scale @ 356, w_stride @ 360, size_with_stride @ 364,
        pass_through @ 368, h_stride @ 372,
    });
}

#[test]
fn sdk_version() {
    layout!(RknnSdkVersion, size 512, align 1, { api_version @ 0, drv_version @ 256 });
}

#[test]
fn input() {
    layout!(RknnInput, size 32, align 8, { index @ 0, buf @ 8, size @ 16, pass_through @ 20, type_ @ 24, fmt @ 28 });
}

#[test]
fn output() {
    layout!(RknnOutput, size 24, align 8, { want_float @ 0, is_prealloc @ 1, index @ 4, buf @ 8, size @ 16 });
}

#[test]
fn enum_values() {
    assert_eq!(
        (RKNN_QUERY_IN_OUT_NUM, RKNN_QUERY_INPUT_ATTR, RKNN_QUERY_OUTPUT_ATTR, RKNN_QUERY_SDK_VERSION),
        (0, 1, 2, 5)
    );
    assert_eq!((RKNN_TENSOR_NCHW, RKNN_TENSOR_NHWC), (0, 1));
    assert_eq!((RKNN_TENSOR_FLOAT32, RKNN_TENSOR_UINT8), (0, 3));
    assert_eq!((RKNN_NPU_CORE_AUTO, RKNN_NPU_CORE_0_1_2, RKNN_NPU_CORE_ALL), (0, 7, 0xffff));
}
