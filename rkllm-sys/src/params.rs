//! What a caller gives the safe layer: init settings, sampling, and one run's
//! request, as ABI-neutral values (`marshal` turns them into each ABI's
//! structs).

use std::ffi::CStr;

/// Sampling fields, the same set in `RKLLMParam` and `RKLLMSamplingParam`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    pub top_k: i32,
    pub top_p: f32,
    pub temperature: f32,
    pub repeat_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub mirostat: i32,
    pub mirostat_tau: f32,
    pub mirostat_eta: f32,
}

impl SamplingParams {
    /// "RKLLM default sampling": what the vendor's demos always set, since
    /// `rkllm_createDefaultParam()`'s own values are undocumented.
    pub const RKLLM_DEFAULTS: SamplingParams = SamplingParams {
        top_k: 1,
        top_p: 0.9,
        temperature: 0.8,
        repeat_penalty: 1.1,
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        mirostat: 0,
        mirostat_tau: 5.0,
        mirostat_eta: 0.1,
    };
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self::RKLLM_DEFAULTS
    }
}

/// Everything set on `RKLLMParam` before `rkllm_init`. Every field is set
/// explicitly over `rkllm_createDefaultParam()`.
#[derive(Debug, Clone)]
pub struct InitConfig {
    pub model_path: String,
    pub max_context_len: i32,
    pub max_new_tokens: i32,
    pub n_keep: i32,
    pub sampling: SamplingParams,
    pub skip_special_token: bool,
    /// 1 is the fix for "failed to malloc npu memory" on some boards.
    pub base_domain_id: i32,
    pub embed_flash: bool,
    /// 0 = let the runtime choose the CPUs.
    pub enabled_cpus_num: i8,
    pub enabled_cpus_mask: u32,
    /// Sequences per run (`extend_param.n_batch`): with N > 1 every run is
    /// a [`BatchRequest`] of exactly N inputs.
    pub n_batch: u8,
    /// A vision-language model's image tags: set in `RKLLMParam` at init on
    /// ABI 1.2 (`img_start`, `img_end`, `img_content`); on 1.3 they travel
    /// with each multimodal run instead ([`Images::tags`]).
    pub image_tags: Option<ImageTags>,
}

/// The text around and inside one image's tokens in the prompt: the runtime
/// replaces each `<image>` marker with `start`, `n_image_tokens` × `content`, `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageTags {
    pub start: String,
    pub end: String,
    pub content: String,
}

/// The images of a multimodal run (`RKLLM_INPUT_MULTIMODAL`): the run's
/// input must then be [`RunInput::Prompt`] with one `<image>` marker per image.
#[derive(Debug, Clone, PartialEq)]
pub struct Images {
    /// `n_image × n_image_tokens × embed_size` floats, image after image.
    pub embeddings: Vec<f32>,
    pub n_image: usize,
    pub n_image_tokens: usize,
    /// The encoder's input size.
    pub width: usize,
    pub height: usize,
    /// Sent with the run on ABI 1.3; on 1.2 the init's tags apply.
    pub tags: ImageTags,
}

/// The marker the runtime expands into one image's tokens.
pub const IMAGE_MARKER: &str = "<image>";

impl InitConfig {
    /// The vendor demos' values for a model file.
    pub fn new(model_path: impl Into<String>) -> Self {
        InitConfig {
            model_path: model_path.into(),
            max_context_len: 4096,
            max_new_tokens: 2048,
            n_keep: -1,
            sampling: SamplingParams::RKLLM_DEFAULTS,
            skip_special_token: true,
            base_domain_id: 0,
            embed_flash: false,
            enabled_cpus_num: 0,
            enabled_cpus_mask: 0,
            n_batch: 1,
            image_tags: None,
        }
    }
}

/// Which role the run's input has (the only two the runtime accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Tool,
}

impl Role {
    pub(crate) fn as_cstr(self) -> &'static CStr {
        match self {
            Role::User => c"user",
            Role::Tool => c"tool",
        }
    }
}

/// What a run prefills.
#[derive(Debug, Clone, PartialEq)]
pub enum RunInput {
    /// Text, tokenized by the runtime (`RKLLM_INPUT_PROMPT`; NUL characters
    /// cannot cross the C string and are dropped).
    Prompt(String),
    /// Token ids the caller tokenized (`RKLLM_INPUT_TOKEN`): the caller knows
    /// exactly what enters the KV cache.
    Tokens(Vec<i32>),
}

impl RunInput {
    /// The input's size in bytes of text, for the liveness allowance (a
    /// token counts as 4 bytes, about one English BPE token).
    pub fn text_bytes(&self) -> usize {
        match self {
            RunInput::Prompt(text) => text.len(),
            RunInput::Tokens(ids) => ids.len() * 4,
        }
    }
}

/// Which rows of a run's hidden-state or logits matrix (one row per input
/// token) the callback copies before it releases the runtime's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// The last token's row only (last-token pooling, next-token logits).
    Last,
    /// Every row (mean pooling).
    All,
}

/// A run that returns numbers instead of text (`RKLLMInferParam.mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capture {
    /// `RKLLM_INFER_GET_LAST_HIDDEN_LAYER`: the last hidden layer.
    HiddenLayer { rows: Rows },
    /// `RKLLM_INFER_GET_LOGITS`: only these columns (token ids) are copied,
    /// so a 150k vocabulary costs nothing per row; empty: every column.
    Logits { rows: Rows, columns: Vec<u32> },
}

/// One generation.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub input: RunInput,
    pub role: Role,
    pub enable_thinking: bool,
    pub keep_history: bool,
    /// Per-run limit (ABI 1.3 only; `None` = the init value).
    pub max_new_tokens: Option<i32>,
    /// Per-run sampling (ABI 1.3 only; `None` = the init values).
    pub sampling: Option<SamplingParams>,
    /// `Some`: a hidden-layer or logits run; the copy arrives in
    /// `Finish::output`, and no token events.
    pub capture: Option<Capture>,
    /// The LoRA adapter this run uses (`lora_params`; loaded before with
    /// [`crate::Model::load_lora`]); `None`: the base model (NULL).
    pub lora: Option<String>,
    /// Save this run's prompt KV to this file (`prompt_cache_params` with
    /// `save_prompt_cache = 1`); `None`: NULL.
    pub save_prompt_cache: Option<String>,
    /// `Some`: a multimodal run of the prompt and these images.
    pub images: Option<Images>,
}

impl RunRequest {
    /// A stateless user prompt with the init parameters.
    pub fn prompt(prompt: impl Into<String>) -> Self {
        RunRequest::new(RunInput::Prompt(prompt.into()))
    }

    /// A stateless run of these token ids with the init parameters.
    pub fn tokens(ids: Vec<i32>) -> Self {
        RunRequest::new(RunInput::Tokens(ids))
    }

    fn new(input: RunInput) -> Self {
        RunRequest {
            input,
            role: Role::User,
            enable_thinking: false,
            keep_history: false,
            max_new_tokens: None,
            sampling: None,
            capture: None,
            lora: None,
            save_prompt_cache: None,
            images: None,
        }
    }
}

/// A LoRA adapter for `rkllm_load_lora` (a `.rkllm` file converted by the toolkit).
#[derive(Debug, Clone, PartialEq)]
pub struct LoraAdapter {
    /// What a run names to use it.
    pub name: String,
    pub path: String,
    pub scale: f32,
}

/// One slot of a batched run.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchInput {
    pub input: RunInput,
    pub enable_thinking: bool,
}

/// One batched run (`n_batch` > 1): exactly `n_batch` slots, role user;
/// the limit, sampling and `keep_history` are the run's, shared by the slots.
#[derive(Debug, Clone)]
pub struct BatchRequest {
    /// `None`: a slot without input, given to the runtime as a token input
    /// of no ids (a short batch: whether the runtime accepts one is open in
    /// the manual; the daemon probes it at load).
    pub slots: Vec<Option<BatchInput>>,
    /// Per-run limit (ABI 1.3 only; `None` = the init value).
    pub max_new_tokens: Option<i32>,
    /// Per-run sampling (ABI 1.3 only; `None` = the init values).
    pub sampling: Option<SamplingParams>,
    /// The LoRA adapter every slot runs with (one per run); `None`: the base model.
    pub lora: Option<String>,
    /// Every slot's KV cache keeps its input and reply after the run (each
    /// slot has its own); `false`: the runtime clears them.
    pub keep_history: bool,
    /// Save the run's prompt KV to this file (`prompt_cache_params` with
    /// `save_prompt_cache = 1`); what a batched run writes (every slot, one)
    /// is open in the manual: the daemon probes it at load.
    pub save_prompt_cache: Option<String>,
}
