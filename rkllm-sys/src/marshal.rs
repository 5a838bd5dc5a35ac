//! Filling each ABI's structs from ABI-neutral values, and reading them back.
//!
//! What differs between the ABIs is the [`Marshal`] impl in each `v1_N.rs`:
//! a few field copies between its structs and the neutral [`ParamFields`],
//! [`InputData`] and [`InferArgs`], with the fields every layout shares
//! copied by the macros below. The runtime thread ([`crate::model`]) writes
//! through it; the simulator, standing in for the runtime, reads through it.
//! So both are written once for every ABI.

use crate::abi::{AbiTypes, Functions};
use crate::common::*;
use crate::params::{InitConfig, SamplingParams};
use std::ffi::{c_char, c_int};

pub trait Marshal: AbiTypes {
    /// What must stay alive as long as the handle: on 1.3 the
    /// `RKLLMCallback` struct whose address `rkllm_init` receives.
    type CallbackStorage;

    /// Sets the param's fields to `fields`; a field the layout lacks is not
    /// written (`ignore_eos_token` before 1.3, `image_tags` after 1.2).
    fn write_param(param: &mut Self::Param, fields: &ParamFields);

    /// The param's fields; those the layout lacks are `None`.
    fn read_param(param: &Self::Param) -> ParamFields;

    fn callback_storage(cb: LLMResultCallback) -> Self::CallbackStorage;

    /// # Safety
    /// `handle` and `param` must be valid; `storage` must outlive the handle.
    unsafe fn init(
        fns: &Functions<Self>,
        handle: *mut LLMHandle,
        param: *mut Self::Param,
        storage: &mut Self::CallbackStorage,
    ) -> c_int;

    /// The result callback and its userdata from what `rkllm_init` received.
    ///
    /// # Safety
    /// On 1.3, `callback` is NULL or points to a valid `RKLLMCallback`.
    unsafe fn read_callback(callback: Self::InitCallback) -> (Option<LLMResultCallback>, *mut std::ffi::c_void);

    /// An input; every pointer in `data` must stay valid until `rkllm_run`
    /// returns. The image tags are not written on ABI 1.2 (set at init).
    fn write_input(role: *const c_char, enable_thinking: bool, data: &InputData) -> Self::Input;

    /// # Safety
    /// `input` points to a valid input.
    unsafe fn read_input(input: *const Self::Input) -> InputFields;

    /// `max_new_tokens` and `sampling` are not written on ABI 1.2, which
    /// cannot take them per run (the caller reports that; see `Abi::per_run_sampling`).
    fn infer_param(args: InferArgs) -> Self::InferParam;

    /// The infer param's fields, the mode as the integer C passed.
    fn read_infer(infer: &Self::InferParam) -> InferArgs<c_int>;

    fn prompt_input(role: *const c_char, prompt: *const c_char, enable_thinking: bool) -> Self::Input {
        Self::write_input(role, enable_thinking, &InputData::Prompt(prompt))
    }

    /// `ids` must stay valid (and unmoved) until `rkllm_run` returns.
    fn token_input(role: *const c_char, ids: &mut [i32], enable_thinking: bool) -> Self::Input {
        let tokens = RKLLMTokenInput { input_ids: ids.as_mut_ptr(), n_tokens: ids.len() };
        Self::write_input(role, enable_thinking, &InputData::Tokens(tokens))
    }

    /// `RKLLM_INPUT_MULTIMODAL`; every pointer in `images` must stay valid
    /// until `rkllm_run` returns.
    fn multimodal_input(role: *const c_char, images: &ImagesArgs, enable_thinking: bool) -> Self::Input {
        Self::write_input(role, enable_thinking, &InputData::Multimodal(*images))
    }
}

/// An `RKLLMParam`'s fields, ABI-neutral.
#[derive(Debug, Clone, Copy)]
pub struct ParamFields {
    pub model_path: *const c_char,
    pub max_context_len: i32,
    pub max_new_tokens: i32,
    pub n_keep: i32,
    pub sampling: SamplingParams,
    pub skip_special_token: bool,
    /// ABI 1.3 on.
    pub ignore_eos_token: Option<bool>,
    pub is_async: bool,
    /// ABI 1.2 only: `img_start`, `img_end`, `img_content`.
    pub image_tags: Option<[*const c_char; 3]>,
    pub extend: RKLLMExtendParam,
}

/// What an input carries, by its `input_type`.
#[derive(Debug, Clone, Copy)]
pub enum InputData {
    Prompt(*const c_char),
    Tokens(RKLLMTokenInput),
    Multimodal(ImagesArgs),
}

/// An `RKLLMInput` read back.
#[derive(Debug, Clone, Copy)]
pub struct InputFields {
    pub role: *const c_char,
    pub enable_thinking: bool,
    /// `RKLLMInputType` as the integer C passed.
    pub input_type: c_int,
    /// `None` for a type not read (embeddings) or unknown.
    pub data: Option<InputData>,
}

/// One multimodal input's fields, ABI-neutral.
#[derive(Debug, Clone, Copy)]
pub struct ImagesArgs {
    pub prompt: *mut c_char,
    pub embed: *mut f32,
    pub n_image: usize,
    pub n_image_tokens: usize,
    pub width: usize,
    pub height: usize,
    /// start, end, content: sent with the run from ABI 1.3 on; `None` when
    /// read from a 1.2 input (the init's tags apply).
    pub tags: Option<[*const c_char; 3]>,
}

/// One run's `RKLLMInferParam` fields, ABI-neutral; the pointers must stay
/// valid until `rkllm_run` returns.
#[derive(Debug, Clone, Copy)]
pub struct InferArgs<Mode = RKLLMInferMode> {
    pub mode: Mode,
    pub keep_history: bool,
    /// ABI 1.3 on (`None` read from 1.2).
    pub max_new_tokens: Option<i32>,
    /// ABI 1.3 on; NULL: the init's sampling.
    pub sampling: *mut RKLLMSamplingParam,
    pub lora: *mut RKLLMLoraParam,
    pub prompt_cache: *mut RKLLMPromptCacheParam,
}

impl SamplingParams {
    pub fn to_ffi(self) -> RKLLMSamplingParam {
        RKLLMSamplingParam {
            top_k: self.top_k,
            top_p: self.top_p,
            temperature: self.temperature,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_tau,
            mirostat_eta: self.mirostat_eta,
        }
    }

    pub fn from_ffi(s: &RKLLMSamplingParam) -> SamplingParams {
        SamplingParams {
            top_k: s.top_k,
            top_p: s.top_p,
            temperature: s.temperature,
            repeat_penalty: s.repeat_penalty,
            frequency_penalty: s.frequency_penalty,
            presence_penalty: s.presence_penalty,
            mirostat: s.mirostat,
            mirostat_tau: s.mirostat_tau,
            mirostat_eta: s.mirostat_eta,
        }
    }
}

/// Sets every field we control on a param from `rkllm_createDefaultParam()`.
/// `image_tags` (start, end, content; NULL: none) are read on ABI 1.2 only
/// and must outlive the handle.
pub(crate) fn apply_config<A: Marshal>(
    param: &mut A::Param,
    cfg: &InitConfig,
    model_path: *const c_char,
    image_tags: [*const c_char; 3],
) {
    let mut fields = A::read_param(param);
    fields.model_path = model_path;
    fields.max_context_len = cfg.max_context_len;
    fields.max_new_tokens = cfg.max_new_tokens;
    fields.n_keep = cfg.n_keep;
    fields.sampling = cfg.sampling;
    fields.skip_special_token = cfg.skip_special_token;
    fields.ignore_eos_token = Some(false);
    // rkllm_run blocks on our runtime thread; async mode is never used.
    fields.is_async = false;
    fields.image_tags = Some(image_tags);
    let e = &mut fields.extend;
    e.base_domain_id = cfg.base_domain_id;
    e.embed_flash = i8::from(cfg.embed_flash);
    e.enabled_cpus_num = cfg.enabled_cpus_num;
    e.enabled_cpus_mask = cfg.enabled_cpus_mask;
    e.n_batch = cfg.n_batch;
    e.use_cross_attn = 0;
    e.reserved = [0; 104];
    A::write_param(param, &fields);
}

/// Writes the `RKLLMParam` fields every layout shares (in a `write_param`).
/// The sampling fields are taken apart with no `..`: a field added to
/// `SamplingParams` and not written here does not compile.
macro_rules! write_common_param {
    ($param:ident, $fields:ident) => {{
        let f = $fields;
        let $crate::SamplingParams {
            top_k,
            top_p,
            temperature,
            repeat_penalty,
            frequency_penalty,
            presence_penalty,
            mirostat,
            mirostat_tau,
            mirostat_eta,
        } = f.sampling;
        $param.model_path = f.model_path;
        $param.max_context_len = f.max_context_len;
        $param.max_new_tokens = f.max_new_tokens;
        $param.n_keep = f.n_keep;
        $param.top_k = top_k;
        $param.top_p = top_p;
        $param.temperature = temperature;
        $param.repeat_penalty = repeat_penalty;
        $param.frequency_penalty = frequency_penalty;
        $param.presence_penalty = presence_penalty;
        $param.mirostat = mirostat;
        $param.mirostat_tau = mirostat_tau;
        $param.mirostat_eta = mirostat_eta;
        $param.skip_special_token = f.skip_special_token;
        $param.is_async = f.is_async;
        $param.extend_param = f.extend;
    }};
}

/// Reads the `RKLLMParam` fields every layout shares, with the ones that
/// differ given (in a `read_param`).
macro_rules! read_common_param {
    ($param:ident, ignore_eos_token: $ignore_eos:expr, image_tags: $tags:expr) => {
        $crate::marshal::ParamFields {
            model_path: $param.model_path,
            max_context_len: $param.max_context_len,
            max_new_tokens: $param.max_new_tokens,
            n_keep: $param.n_keep,
            sampling: $crate::SamplingParams {
                top_k: $param.top_k,
                top_p: $param.top_p,
                temperature: $param.temperature,
                repeat_penalty: $param.repeat_penalty,
                frequency_penalty: $param.frequency_penalty,
                presence_penalty: $param.presence_penalty,
                mirostat: $param.mirostat,
                mirostat_tau: $param.mirostat_tau,
                mirostat_eta: $param.mirostat_eta,
            },
            skip_special_token: $param.skip_special_token,
            ignore_eos_token: $ignore_eos,
            is_async: $param.is_async,
            image_tags: $tags,
            extend: $param.extend_param,
        }
    };
}

/// An `RKLLMInput` (of the calling module's layout) with a zeroed union
/// holding `data`: the rest of the union's bytes reach the runtime too, so
/// none is left uninitialised. `$images` turns an `ImagesArgs` into the
/// layout's multimodal member.
macro_rules! write_input {
    ($role:ident, $enable_thinking:ident, $data:ident, |$images:ident| $multimodal:expr) => {{
        use $crate::common::RKLLMInputType;
        use $crate::marshal::InputData;
        // SAFETY: all-zero is valid for every member (pointers and integers).
        let mut input: RKLLMInputUnion = unsafe { std::mem::zeroed() };
        let input_type = match *$data {
            InputData::Prompt(prompt) => {
                input.prompt_input = prompt;
                RKLLMInputType::Prompt
            }
            InputData::Tokens(tokens) => {
                input.token_input = tokens;
                RKLLMInputType::Token
            }
            InputData::Multimodal($images) => {
                input.multimodal_input = $multimodal;
                RKLLMInputType::Multimodal
            }
        };
        RKLLMInput { role: $role, enable_thinking: $enable_thinking, input_type, input }
    }};
}

/// Reads an `RKLLMInput` (see `Marshal::read_input`); `$images` reads the
/// layout's multimodal member into an `ImagesArgs`. The type is read as an
/// integer through its address: C may pass any value.
macro_rules! read_input {
    ($input:ident, |$multimodal:ident| $images:expr) => {{
        use $crate::common::RKLLMInputType;
        use $crate::marshal::{InputData, InputFields};
        // SAFETY: the caller's contract; the union member read is the one
        // `input_type` names.
        unsafe {
            let input_type = std::ptr::addr_of!((*$input).input_type).cast::<std::ffi::c_int>().read();
            let union = (*$input).input;
            let data = if input_type == RKLLMInputType::Prompt as i32 {
                Some(InputData::Prompt(union.prompt_input))
            } else if input_type == RKLLMInputType::Token as i32 {
                Some(InputData::Tokens(union.token_input))
            } else if input_type == RKLLMInputType::Multimodal as i32 {
                let $multimodal = union.multimodal_input;
                Some(InputData::Multimodal($images))
            } else {
                None
            };
            InputFields { role: (*$input).role, enable_thinking: (*$input).enable_thinking, input_type, data }
        }
    }};
}

/// Reads the `RKLLMInferParam` fields every layout shares, with the ones
/// that differ given (in a `read_infer`).
macro_rules! read_common_infer {
    ($infer:ident, max_new_tokens: $max:expr, sampling: $sampling:expr) => {
        $crate::marshal::InferArgs {
            // SAFETY: read as an integer through its address: C may pass any value.
            mode: unsafe { std::ptr::addr_of!($infer.mode).cast::<std::ffi::c_int>().read() },
            keep_history: $infer.keep_history != 0,
            max_new_tokens: $max,
            sampling: $sampling,
            lora: $infer.lora_params,
            prompt_cache: $infer.prompt_cache_params,
        }
    };
}

pub(crate) use {read_common_infer, read_common_param, read_input, write_common_param, write_input};
