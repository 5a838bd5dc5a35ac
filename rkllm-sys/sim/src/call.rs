//! What the C calls carry, read into ABI-neutral values (see `ffi`).

use rkllm_sys::common::{RKLLMExtendParam, RKLLMInferMode};
use rkllm_sys::{Abi, SamplingParams};
use std::ffi::{c_char, CStr};

/// The fields of an `RKLLMParam` (either layout).
#[derive(Debug, Clone)]
pub(crate) struct InitParams {
    pub abi: Abi,
    /// `None` for a NULL pointer.
    pub model_path: Option<String>,
    pub max_context_len: i32,
    pub max_new_tokens: i32,
    pub n_keep: i32,
    pub sampling: SamplingParams,
    pub skip_special_token: bool,
    /// ABI 1.3 only.
    pub ignore_eos_token: Option<bool>,
    pub is_async: bool,
    /// ABI 1.2 only: `img_start`, `img_end`, `img_content`.
    pub img: Option<[Option<String>; 3]>,
    pub extend: RKLLMExtendParam,
}

/// An `RKLLMInput`.
#[derive(Debug, Clone)]
pub(crate) struct RunInput {
    pub role: Option<String>,
    pub enable_thinking: bool,
    /// `RKLLMInputType`, read as an integer: C may pass any value.
    pub input_type: i32,
    /// The text, when `input_type` is PROMPT and the pointer is not NULL.
    pub prompt: Option<String>,
    /// The ids, when `input_type` is TOKEN and the pointer is not NULL.
    pub token_ids: Option<Vec<i32>>,
    /// The images, when `input_type` is MULTIMODAL (its prompt is `prompt`).
    pub images: Option<ImageInput>,
}

/// The images of a multimodal input, as read from the C struct.
#[derive(Debug, Clone)]
pub(crate) struct ImageInput {
    /// Each image's colour, from its first token's features 0–2.
    pub colours: Vec<[u8; 3]>,
    pub n_image_tokens: usize,
    pub width: usize,
    pub height: usize,
    /// ABI 1.3: start, end, content as sent with the run; `None` on 1.2
    /// (the init's tags apply).
    pub tags: Option<[Option<String>; 3]>,
}

/// An `RKLLMInferParam` (all defaults for a NULL pointer).
#[derive(Debug, Clone, Default)]
pub(crate) struct InferOptions {
    /// `RKLLMInferMode`, read as an integer.
    pub mode: i32,
    pub lora_adapter: Option<String>,
    /// `save_prompt_cache` and `prompt_cache_path`, when given.
    pub prompt_cache: Option<(i32, Option<String>)>,
    pub keep_history: bool,
    /// ABI 1.3 only (`<= 0` means the init value).
    pub max_new_tokens: Option<i32>,
    /// ABI 1.3 only: the per-run sampling, if the pointer was set.
    pub sampling: Option<SamplingParams>,
}

/// The text of a C string, `None` for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
pub(crate) unsafe fn text(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Which buffer a run asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Hidden,
    Logits,
}

impl Kind {
    pub fn of(mode: i32) -> Option<Kind> {
        match mode {
            m if m == RKLLMInferMode::GetLastHiddenLayer as i32 => Some(Kind::Hidden),
            m if m == RKLLMInferMode::GetLogits as i32 => Some(Kind::Logits),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Hidden => "hidden_layer",
            Kind::Logits => "logits",
        }
    }
}
