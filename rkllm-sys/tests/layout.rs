//! The `repr(C)` types of `rkllm-sys` against the layouts in
//! docs/runtime.md, section "Struct layouts".
//!
//! Each `assert_layout!` is one table to compare line by line with the doc:
//! `field @ offset: type`. For a struct the table must name every field (an
//! exhaustive pattern checks that at compile time) and each field's type must
//! be the one written (checked at compile time too); size, alignment and
//! offsets are checked when the test runs, and every mismatch of a type is
//! reported at once. CI runs these tests on x86_64 and, under qemu, on
//! aarch64: the doc says the layouts are identical on both.

use rkllm_sys::common::{self, call_state, *};
use rkllm_sys::{v1_2, v1_3, AbiTypes, V1_2, V1_3};
use std::ffi::{c_char, c_int, c_void};
use std::mem::{align_of, offset_of, size_of};

/// Panics listing every `(what, actual, documented)` row that differs.
#[track_caller]
fn check(ty: &str, rows: &[(String, usize, usize)]) {
    let wrong: Vec<String> = rows
        .iter()
        .filter(|(_, actual, documented)| actual != documented)
        .map(|(what, actual, documented)| format!("  {what}: is {actual}, the doc says {documented}"))
        .collect();
    assert!(wrong.is_empty(), "layout of {ty} differs from docs/runtime.md:\n{}", wrong.join("\n"));
}

/// `assert_layout!(Type, size S, align A, { field @ offset: FieldType, ... })`
/// for a struct (every field must be listed), or
/// `assert_layout!(union Type, size S, align A, { ... })` for a union.
macro_rules! assert_layout {
    ($ty:path, size $size:literal, align $align:literal, { $($field:ident @ $off:literal : $fty:ty),+ $(,)? }) => {{
        // Compile-time: the table names every field of the struct. An error
        // "pattern requires `..`" here means a field is missing from the table.
        #[allow(dead_code)]
        fn every_field_is_listed(value: $ty) {
            let $ty { $($field: _),+ } = value;
        }
        assert_layout!(@check $ty, $size, $align, { $($field @ $off : $fty),+ });
    }};
    (union $ty:path, size $size:literal, align $align:literal, { $($field:ident @ $off:literal : $fty:ty),+ $(,)? }) => {{
        assert_layout!(@check $ty, $size, $align, { $($field @ $off : $fty),+ });
    }};
    (@check $ty:path, $size:literal, $align:literal, { $($field:ident @ $off:literal : $fty:ty),+ }) => {{
        // Compile-time: each field has the type written in the table.
        $(
            let _: fn(*const $ty) -> *const $fty =
                // SAFETY: only computes a field address; never called.
                |p| unsafe { std::ptr::addr_of!((*p).$field) };
        )+
        let rows = vec![
            ("size".to_string(), size_of::<$ty>(), $size),
            ("align".to_string(), align_of::<$ty>(), $align),
            $((
                format!("offset of {}", stringify!($field)),
                offset_of!($ty, $field),
                $off,
            ),)+
        ];
        check(stringify!($ty), &rows);
    }};
}

/// Offsets of fields of embedded structs, from the start of the outer type:
/// `assert_nested!(Type, { outer.inner @ offset, ... })`.
macro_rules! assert_nested {
    ($ty:path, { $($outer:ident . $inner:ident @ $off:literal),+ $(,)? }) => {{
        let rows = vec![
            $((
                format!("offset of {}.{}", stringify!($outer), stringify!($inner)),
                offset_of!($ty, $outer.$inner),
                $off,
            ),)+
        ];
        check(stringify!($ty), &rows);
    }};
}

// ---------------------------------------------------------------------------
// Scalars and enums
// ---------------------------------------------------------------------------

#[test]
fn pointers_size_t_bool_and_int_have_the_documented_sizes() {
    check(
        "scalars",
        &[
            ("size of const char*".into(), size_of::<*const c_char>(), 8),
            ("size of size_t".into(), size_of::<usize>(), 8),
            ("size of bool".into(), size_of::<bool>(), 1),
            ("size of int".into(), size_of::<c_int>(), 4),
            ("size of a callback pointer".into(), size_of::<Option<LLMResultCallback>>(), 8),
        ],
    );
}

#[test]
fn input_type_enum() {
    check(
        "RKLLMInputType",
        &[("size".into(), size_of::<RKLLMInputType>(), 4), ("align".into(), align_of::<RKLLMInputType>(), 4)],
    );
    assert_eq!(RKLLMInputType::Prompt as i32, 0);
    assert_eq!(RKLLMInputType::Token as i32, 1);
    assert_eq!(RKLLMInputType::Embed as i32, 2);
    assert_eq!(RKLLMInputType::Multimodal as i32, 3);
}

#[test]
fn infer_mode_enum() {
    check(
        "RKLLMInferMode",
        &[("size".into(), size_of::<RKLLMInferMode>(), 4), ("align".into(), align_of::<RKLLMInferMode>(), 4)],
    );
    assert_eq!(RKLLMInferMode::Generate as i32, 0);
    assert_eq!(RKLLMInferMode::GetLastHiddenLayer as i32, 1);
    assert_eq!(RKLLMInferMode::GetLogits as i32, 2);
}

#[test]
fn callback_states() {
    assert_eq!(call_state::NORMAL, 0);
    assert_eq!(call_state::WAITING, 1);
    assert_eq!(call_state::FINISH, 2);
    assert_eq!(call_state::ERROR, 3);
}

// ---------------------------------------------------------------------------
// Both ABIs
// ---------------------------------------------------------------------------

#[test]
fn extend_param() {
    assert_layout!(common::RKLLMExtendParam, size 120, align 4, {
        base_domain_id    @ 0:  i32,
        embed_flash       @ 4:  i8,
        enabled_cpus_num  @ 5:  i8,
        enabled_cpus_mask @ 8:  u32,
        n_batch           @ 12: u8, // must be 1..=100
        use_cross_attn    @ 13: i8,
        reserved          @ 14: [u8; 104],
    });
}

#[test]
fn result() {
    assert_layout!(common::RKLLMResult, size 72, align 8, {
        text              @ 0:  *const c_char,
        token_id          @ 8:  i32,
        last_hidden_layer @ 16: RKLLMResultLastHiddenLayer,
        logits            @ 32: RKLLMResultLogits,
        perf              @ 48: RKLLMPerfStat,
    });
    assert_layout!(common::RKLLMResultLastHiddenLayer, size 16, align 8, {
        hidden_states @ 0:  *const f32,
        embd_size     @ 8:  c_int,
        num_tokens    @ 12: c_int,
    });
    assert_layout!(common::RKLLMResultLogits, size 16, align 8, {
        logits     @ 0:  *const f32,
        vocab_size @ 8:  c_int,
        num_tokens @ 12: c_int,
    });
    assert_nested!(common::RKLLMResult, {
        last_hidden_layer.hidden_states @ 16,
        last_hidden_layer.embd_size     @ 24,
        last_hidden_layer.num_tokens    @ 28,
        logits.logits                   @ 32,
        logits.vocab_size               @ 40,
        logits.num_tokens               @ 44,
        perf.prefill_time_ms            @ 48,
        perf.memory_usage_mb            @ 64,
    });
}

#[test]
fn perf_stat() {
    assert_layout!(common::RKLLMPerfStat, size 20, align 4, {
        prefill_time_ms  @ 0:  f32,
        prefill_tokens   @ 4:  i32,
        generate_time_ms @ 8:  f32,
        generate_tokens  @ 12: i32,
        memory_usage_mb  @ 16: f32,
    });
}

#[test]
fn lora_adapter() {
    assert_layout!(common::RKLLMLoraAdapter, size 24, align 8, {
        lora_adapter_path @ 0:  *const c_char, // doc: path
        lora_adapter_name @ 8:  *const c_char, // doc: name
        scale             @ 16: f32,
    });
}

#[test]
fn lora_param() {
    assert_layout!(common::RKLLMLoraParam, size 8, align 8, {
        lora_adapter_name @ 0: *const c_char, // doc: name
    });
}

#[test]
fn prompt_cache_param() {
    assert_layout!(common::RKLLMPromptCacheParam, size 16, align 8, {
        save_prompt_cache @ 0: c_int,
        prompt_cache_path @ 8: *const c_char,
    });
}

#[test]
fn cross_attn_param() {
    assert_layout!(common::RKLLMCrossAttnParam, size 40, align 8, {
        encoder_k_cache @ 0:  *mut f32, // doc: k
        encoder_v_cache @ 8:  *mut f32, // doc: v
        encoder_mask    @ 16: *mut f32, // doc: mask
        encoder_pos     @ 24: *mut i32, // doc: pos
        num_tokens      @ 32: c_int,
    });
}

#[test]
fn embed_and_token_inputs() {
    assert_layout!(common::RKLLMEmbedInput, size 16, align 8, {
        embed    @ 0: *mut f32,
        n_tokens @ 8: usize,
    });
    assert_layout!(common::RKLLMTokenInput, size 16, align 8, {
        input_ids @ 0: *mut i32,
        n_tokens  @ 8: usize,
    });
}

// ---------------------------------------------------------------------------
// ABI 1.2.x (runtime 1.2.1–1.2.3)
// ---------------------------------------------------------------------------

#[test]
fn v1_2_param() {
    assert_layout!(v1_2::RKLLMParam, size 208, align 8, {
        model_path         @ 0:  *const c_char,
        max_context_len    @ 8:  i32,
        max_new_tokens     @ 12: i32,
        top_k              @ 16: i32,
        n_keep             @ 20: i32,
        top_p              @ 24: f32,
        temperature        @ 28: f32,
        repeat_penalty     @ 32: f32,
        frequency_penalty  @ 36: f32,
        presence_penalty   @ 40: f32,
        mirostat           @ 44: i32,
        mirostat_tau       @ 48: f32,
        mirostat_eta       @ 52: f32,
        skip_special_token @ 56: bool,
        is_async           @ 57: bool,
        img_start          @ 64: *const c_char,
        img_end            @ 72: *const c_char,
        img_content        @ 80: *const c_char,
        extend_param       @ 88: RKLLMExtendParam,
    });
    assert_nested!(v1_2::RKLLMParam, {
        extend_param.base_domain_id @ 88,  // 88 + 0
        extend_param.n_batch        @ 100, // 88 + 12
        extend_param.reserved       @ 102, // 88 + 14
    });
}

#[test]
fn v1_2_input() {
    assert_layout!(v1_2::RKLLMInput, size 64, align 8, {
        role            @ 0:  *const c_char,
        enable_thinking @ 8:  bool,
        input_type      @ 12: RKLLMInputType,
        input           @ 16: v1_2::RKLLMInputUnion,
    });
    assert_layout!(union v1_2::RKLLMInputUnion, size 48, align 8, {
        prompt_input     @ 0: *const c_char,
        embed_input      @ 0: RKLLMEmbedInput,
        token_input      @ 0: RKLLMTokenInput,
        multimodal_input @ 0: v1_2::RKLLMMultiModelInput,
    });
    // The doc fixes only the size (48 B); the fields are the 1.2 header's.
    assert_layout!(v1_2::RKLLMMultiModelInput, size 48, align 8, {
        prompt         @ 0:  *mut c_char,
        image_embed    @ 8:  *mut f32,
        n_image_tokens @ 16: usize,
        n_image        @ 24: usize,
        image_width    @ 32: usize,
        image_height   @ 40: usize,
    });
}

#[test]
fn v1_2_infer_param() {
    assert_layout!(v1_2::RKLLMInferParam, size 32, align 8, {
        mode                @ 0:  RKLLMInferMode,
        lora_params         @ 8:  *mut RKLLMLoraParam,
        prompt_cache_params @ 16: *mut RKLLMPromptCacheParam,
        keep_history        @ 24: c_int,
    });
}

// ---------------------------------------------------------------------------
// ABI 1.3.0
// ---------------------------------------------------------------------------

#[test]
fn v1_3_param() {
    assert_layout!(v1_3::RKLLMParam, size 184, align 8, {
        model_path         @ 0:  *const c_char,
        max_context_len    @ 8:  i32,
        max_new_tokens     @ 12: i32,
        top_k              @ 16: i32,
        n_keep             @ 20: i32,
        top_p              @ 24: f32,
        temperature        @ 28: f32,
        repeat_penalty     @ 32: f32,
        frequency_penalty  @ 36: f32,
        presence_penalty   @ 40: f32,
        mirostat           @ 44: i32,
        mirostat_tau       @ 48: f32,
        mirostat_eta       @ 52: f32,
        skip_special_token @ 56: bool,
        ignore_eos_token   @ 57: bool,
        is_async           @ 58: bool,
        extend_param       @ 60: RKLLMExtendParam,
    });
    assert_nested!(v1_3::RKLLMParam, {
        extend_param.base_domain_id @ 60, // 60 + 0
        extend_param.n_batch        @ 72, // 60 + 12
        extend_param.reserved       @ 74, // 60 + 14
    });
}

#[test]
fn v1_3_input() {
    assert_layout!(v1_3::RKLLMInput, size 160, align 8, {
        role            @ 0:  *const c_char,
        enable_thinking @ 8:  bool,
        input_type      @ 12: RKLLMInputType,
        input           @ 16: v1_3::RKLLMInputUnion,
    });
    assert_layout!(union v1_3::RKLLMInputUnion, size 144, align 8, {
        prompt_input     @ 0: *const c_char,
        embed_input      @ 0: RKLLMEmbedInput,
        token_input      @ 0: RKLLMTokenInput,
        multimodal_input @ 0: v1_3::RKLLMMultiModalInput,
    });
    // The doc fixes only the size (144 B); rkllm-sys names the fields shared
    // with 1.2 and keeps the rest opaque.
    assert_layout!(v1_3::RKLLMMultiModalInput, size 144, align 8, {
        prompt         @ 0:  *mut c_char,
        image_embed    @ 8:  *mut f32,
        n_image_tokens @ 16: usize,
        n_image        @ 24: usize,
        image_width    @ 32: usize,
        image_height   @ 40: usize,
        opaque         @ 48: [u64; 12],
    });
}

#[test]
fn v1_3_infer_param() {
    assert_layout!(v1_3::RKLLMInferParam, size 40, align 8, {
        mode                @ 0:  RKLLMInferMode,
        lora_params         @ 8:  *mut RKLLMLoraParam,
        prompt_cache_params @ 16: *mut RKLLMPromptCacheParam,
        sampling_params     @ 24: *mut v1_3::RKLLMSamplingParam,
        keep_history        @ 32: c_int,
        max_new_tokens      @ 36: c_int,
    });
}

#[test]
fn v1_3_sampling_param() {
    assert_layout!(v1_3::RKLLMSamplingParam, size 36, align 4, {
        top_k             @ 0:  i32,
        top_p             @ 4:  f32,
        temperature       @ 8:  f32,
        repeat_penalty    @ 12: f32,
        frequency_penalty @ 16: f32,
        presence_penalty  @ 20: f32,
        mirostat          @ 24: i32,
        mirostat_tau      @ 28: f32,
        mirostat_eta      @ 32: f32,
    });
}

#[test]
fn v1_3_callback() {
    assert_layout!(v1_3::RKLLMCallback, size 48, align 8, {
        result_callback    @ 0:  Option<LLMResultCallback>,
        result_userdata    @ 8:  *mut c_void,
        tokenizer_callback @ 16: v1_3::LLMTokenizerCallback,
        tokenizer_userdata @ 24: *mut c_void,
        embed_callback     @ 32: v1_3::LLMEmbedCallback,
        embed_userdata     @ 40: *mut c_void,
    });
}

// ---------------------------------------------------------------------------
// The ABI markers pick the types of their own ABI
// ---------------------------------------------------------------------------

#[test]
fn abi_markers_use_their_own_layouts() {
    check(
        "AbiTypes",
        &[
            ("size of V1_2::Param".into(), size_of::<<V1_2 as AbiTypes>::Param>(), 208),
            ("size of V1_2::Input".into(), size_of::<<V1_2 as AbiTypes>::Input>(), 64),
            ("size of V1_2::InferParam".into(), size_of::<<V1_2 as AbiTypes>::InferParam>(), 32),
            ("size of V1_3::Param".into(), size_of::<<V1_3 as AbiTypes>::Param>(), 184),
            ("size of V1_3::Input".into(), size_of::<<V1_3 as AbiTypes>::Input>(), 160),
            ("size of V1_3::InferParam".into(), size_of::<<V1_3 as AbiTypes>::InferParam>(), 40),
        ],
    );
    // 1.2 passes the callback itself to rkllm_init, 1.3 a pointer to RKLLMCallback.
    let _: fn(<V1_2 as AbiTypes>::InitCallback) -> LLMResultCallback = |cb| cb;
    let _: fn(<V1_3 as AbiTypes>::InitCallback) -> *mut v1_3::RKLLMCallback = |cb| cb;
}
