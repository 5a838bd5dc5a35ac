//! `POST /v1/embeddings` (OpenAI's shape): each input runs in hidden-layer
//! mode, its states are pooled per model (`embedding_pooling`) and
//! L2-normalised (`crate::embed`).

use super::error::{ApiError, ErrorEnvelope};
use super::extract::ApiJson;
use super::forward;
use super::named::NamesModel;
use super::record::Counting;
use super::request::{prepare, MAX_INPUTS};
use super::state::AppState;
use super::status;
use crate::embed;
use crate::engine::{Capture, EndReason, Place, RunInput};
use crate::metrics::{Kind, Timings};
use crate::registry::Lease;
use crate::registry::Loaded;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `input`: a string, an array of strings, an array of token ids, or an array of those.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenArrays(Vec<Vec<i64>>),
}

impl EmbeddingInput {
    /// How many inputs (vectors) it asks for.
    fn len(&self) -> usize {
        match self {
            EmbeddingInput::Text(_) | EmbeddingInput::Tokens(_) => 1,
            EmbeddingInput::Texts(texts) => texts.len(),
            EmbeddingInput::TokenArrays(arrays) => arrays.len(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    #[default]
    Float,
    /// Little-endian f32 bytes, base64-encoded.
    Base64,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: EmbeddingInput,
    #[serde(default)]
    pub encoding_format: Option<EncodingFormat>,
    /// Accepted only as the model's own width: truncating a vector is
    /// honest only for models trained for it, which the daemon cannot tell.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub dimensions: Option<u32>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

impl NamesModel for EmbeddingRequest {
    fn model(&self) -> &str {
        &self.model
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EmbeddingData {
    pub object: &'static str,
    pub index: usize,
    pub embedding: Vector,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EmbeddingList {
    pub object: &'static str,
    pub data: Vec<EmbeddingData>,
    pub model: String,
    pub usage: EmbeddingUsage,
}

/// Creates one embedding vector per input.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    tag = "embeddings",
    request_body = EmbeddingRequest,
    responses(
        (status = 200, description = "One embedding per input, in input order", body = EmbeddingList),
        (status = 400, description = "Empty, too many or too long inputs; `dimensions` other than the model's", body = ErrorEnvelope),
        (status = 404, description = "Unknown model", body = ErrorEnvelope),
        (status = 429, description = "Queue full", body = ErrorEnvelope),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    axum::extract::State(state): axum::extract::State<AppState>,
    axum::Extension(counting): axum::Extension<Counting>,
    ApiJson(req): ApiJson<EmbeddingRequest>,
) -> Result<axum::Json<EmbeddingList>, ApiError> {
    check_count(req.input.len(), "input")?;
    // Held until the reply is built, so the model is not unloaded under it.
    let (lease, place) = state.lease_queued(&req.model, None).await?;
    let input = req.input;
    let inputs = prepare(&lease, move |loaded| run_inputs(loaded, input)).await?;
    let out = vectors(&lease, place, inputs, req.dimensions, true, &counting).await?;
    let format = req.encoding_format.unwrap_or_default();
    let data = out
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = match format {
                EncodingFormat::Float => Vector::Float(v),
                EncodingFormat::Base64 => Vector::Base64(embed::base64_f32(&v)),
            };
            EmbeddingData { object: "embedding", index, embedding }
        })
        .collect();
    Ok(axum::Json(EmbeddingList {
        object: "list",
        data,
        model: lease.served_id(),
        usage: EmbeddingUsage { prompt_tokens: out.prompt_tokens, total_tokens: out.prompt_tokens },
    }))
}

/// What a hidden-layer job gave: one vector per input, in input order.
pub(super) struct Vectors {
    pub vectors: Vec<Vec<f32>>,
    /// The tokens the runtime read (`usage.prompt_tokens`).
    pub prompt_tokens: usize,
    pub timings: Timings,
}

/// Runs the inputs in hidden-layer mode and pools each per the model's
/// `embedding_pooling`, L2-normalised when `normalise`. `dimensions` must
/// be the model's own width: truncating a vector is honest only for models
/// trained for it, which the daemon cannot tell.
pub(super) async fn vectors(
    lease: &Lease,
    place: Place,
    inputs: Vec<RunInput>,
    dimensions: Option<u32>,
    normalise: bool,
    counting: &Counting,
) -> Result<Vectors, ApiError> {
    known_dimensions(lease, dimensions)?;
    let pooling = lease.embed.pooling;
    let capture = Capture::HiddenLayer { rows: pooling.rows() };
    let mut ran = forward::run(lease, place, Kind::Embedding, inputs, capture, counting).await?;
    let width = ran.outputs.first().map_or(0, |m| m.width);
    if width > 0 {
        let _ = lease.learned.embedding_width.set(width);
    }
    if let Some(asked) = dimensions.filter(|d| *d as usize != width) {
        return Err(ran.refuse(status::wrong_dimensions(wrong_dimensions(width, asked))));
    }
    let pool = if normalise { embed::embedding } else { embed::pooled };
    // Mean pooling reads every row of every input: a large batch is tens
    // of ms on a board's core, off the async thread that streams tokens.
    let outputs = std::mem::take(&mut ran.outputs);
    let pooled = tokio::task::spawn_blocking(move || outputs.iter().map(|m| pool(m, pooling)).collect()).await;
    let vectors = match pooled {
        Ok(vectors) => vectors,
        Err(e) => {
            let reason = EndReason::RuntimeError(format!("pooling the hidden states failed: {e}"));
            return Err(ran.refuse(status::forward(Err(&reason))));
        }
    };
    let prompt_tokens = ran.prompt_tokens;
    Ok(Vectors { vectors, prompt_tokens, timings: ran.answered() })
}

/// `dimensions` against the width an earlier run showed: a wrong one is
/// refused without spending the NPU on it (the document states the same).
pub(super) fn known_dimensions(lease: &Lease, dimensions: Option<u32>) -> Result<(), ApiError> {
    match (lease.learned.embedding_width.get(), dimensions) {
        (Some(&width), Some(asked)) if asked as usize != width => Err(wrong_dimensions(width, asked)),
        _ => Ok(()),
    }
}

fn wrong_dimensions(width: usize, asked: u32) -> ApiError {
    ApiError::invalid_value(
        "dimensions",
        format!("This model's embeddings have {width} dimensions; `dimensions` = {asked} cannot be honoured."),
    )
}

/// Each input as the runtime will read it: token ids (the model's
/// tokenizer, or the client's ids), or text when there is no tokenizer.
fn run_inputs(loaded: &Loaded, input: EmbeddingInput) -> Result<Vec<RunInput>, ApiError> {
    let inputs: Vec<RunInput> = match input {
        EmbeddingInput::Text(text) => text_inputs(loaded, vec![text], "input")?,
        EmbeddingInput::Texts(texts) => text_inputs(loaded, texts, "input")?,
        EmbeddingInput::Tokens(ids) => vec![token_input(ids, loaded)?],
        EmbeddingInput::TokenArrays(arrays) => {
            arrays.into_iter().map(|ids| token_input(ids, loaded)).collect::<Result<_, _>>()?
        }
    };
    check_inputs(&inputs, loaded.engine.limits().max_context_len, "input")?;
    Ok(inputs)
}

/// No inputs, or too many, are the client's to fix (400), and are refused
/// by their count right after parsing, before any is tokenized (`param`
/// names the list: `input`, `documents`).
pub(super) fn check_count(n: usize, param: &str) -> Result<(), ApiError> {
    if n == 0 {
        return Err(ApiError::invalid_value(param, format!("`{param}` is empty: give at least one.")));
    }
    if n > MAX_INPUTS {
        return Err(ApiError::invalid_value(
            param,
            format!("`{param}` has {n} items; at most {MAX_INPUTS} are allowed."),
        ));
    }
    Ok(())
}

/// Empty or too long inputs are the client's to fix (400); `param` names the list.
pub(super) fn check_inputs(inputs: &[RunInput], max_context_len: u32, param: &str) -> Result<(), ApiError> {
    check_count(inputs.len(), param)?;
    for (i, input) in inputs.iter().enumerate() {
        let (empty, tokens) = match input {
            RunInput::Prompt(text) => (text.is_empty(), None),
            RunInput::Tokens(ids) => (ids.is_empty(), Some(ids.len())),
        };
        if empty {
            return Err(ApiError::invalid_value(param, format!("{param}[{i}] is empty.")));
        }
        if let Some(n) = tokens.filter(|n| *n > max_context_len as usize) {
            return Err(ApiError::invalid_value(
                param,
                format!("{param}[{i}] has {n} tokens; the model's context holds {max_context_len} (max_context_len)."),
            ));
        }
    }
    Ok(())
}

/// Texts as the runtime will read them: every one far too long for the
/// context is refused by its bytes before any is tokenized (`param` names
/// the list).
pub(super) fn text_inputs(loaded: &Loaded, texts: Vec<String>, param: &str) -> Result<Vec<RunInput>, ApiError> {
    let context = loaded.engine.limits().max_context_len as usize;
    for text in &texts {
        super::request::refuse_unfittable(param, text.len(), context)?;
    }
    Ok(texts.into_iter().map(|text| tokenized(loaded, text)).collect())
}

/// A text as the runtime will read it: the model tokenizer's ids, or the
/// text when there is no tokenizer. Its bytes are checked first (`text_inputs`).
fn tokenized(loaded: &Loaded, text: String) -> RunInput {
    match loaded.prompter.tokenize(&text) {
        Some(ids) => RunInput::Tokens(ids.into_iter().map(|id| id as i32).collect()),
        None => RunInput::Prompt(text),
    }
}

/// A client's token ids: each must be one the model's tokenizer knows, when
/// there is one (without, the runtime judges them).
fn token_input(ids: Vec<i64>, loaded: &Loaded) -> Result<RunInput, ApiError> {
    let vocab = loaded.prompter.vocab_size();
    let valid = |id: i32| id >= 0 && vocab.is_none_or(|n| (id as usize) < n);
    let ids: Result<Vec<i32>, _> =
        ids.into_iter().map(|id| i32::try_from(id).ok().filter(|id| valid(*id)).ok_or(id)).collect();
    ids.map(RunInput::Tokens).map_err(|bad| {
        let known = vocab.map_or(String::new(), |n| format!(" (this model's are 0..{n})"));
        ApiError::invalid_value("input", format!("token id {bad} is not a valid token id{known}."))
    })
}
