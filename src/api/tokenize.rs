//! `POST /tokenize` and `POST /detokenize`, in the shapes of llama.cpp's
//! server (which benchmark tools and clients already speak), with the
//! model's tokenizer.json: the one the daemon counts prompts with.

use super::error::{ApiError, ErrorEnvelope};
use super::extract::{BodyBound, BoundedJson, JSON_BYTES_PER_TEXT_BYTE, OTHER_MEMBERS_BYTES};
use super::request::{most_token_ids, most_tokenized_bytes, prepare, refuse_unfittable};
use super::state::AppState;
use crate::registry::Lease;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct TokenizeRequest {
    /// The text to tokenize.
    pub content: String,
    /// Add the tokenizer's special tokens (e.g. a BOS), as its post-processor
    /// does for a model input (default: false).
    #[serde(default)]
    pub add_special: bool,
    /// Give each token's text beside its id (default: false).
    #[serde(default)]
    pub with_pieces: bool,
    /// Extension: the model whose tokenizer to use (default: the first configured).
    #[serde(default)]
    pub model: Option<String>,
}

/// A token id, or with `with_pieces` the id and its text.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Token {
    Id(u32),
    Piece {
        id: u32,
        /// The token's text as a stream decodes it: "" for a token that ends
        /// inside a character, whose next token then carries the character
        /// (the pieces join into the text).
        piece: String,
    },
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenizeResponse {
    pub tokens: Vec<Token>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    /// Token ids of the model's vocabulary.
    pub tokens: Vec<u32>,
    /// Extension: the model whose tokenizer to use (default: the first configured).
    #[serde(default)]
    pub model: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DetokenizeResponse {
    /// The text, special tokens included.
    pub content: String,
}

impl super::named::NamesModel for TokenizeRequest {
    fn model(&self) -> &str {
        self.model.as_deref().unwrap_or_default()
    }
}

impl super::named::NamesModel for DetokenizeRequest {
    fn model(&self) -> &str {
        self.model.as_deref().unwrap_or_default()
    }
}

/// The longest `content` tokenized, each byte as JSON's longest escape.
impl BodyBound for TokenizeRequest {
    const FIELD: &'static str = "content";
    fn most_bytes(context: usize) -> usize {
        most_tokenized_bytes(context) * JSON_BYTES_PER_TEXT_BYTE + OTHER_MEMBERS_BYTES
    }
}

/// A token id as JSON writes it: up to 10 digits (`u32`), an integral
/// float's `.0`, a comma and a space.
const JSON_BYTES_PER_ID: usize = 16;

/// The most ids turned into text, each as [`JSON_BYTES_PER_ID`].
impl BodyBound for DetokenizeRequest {
    const FIELD: &'static str = "tokens";
    fn most_bytes(context: usize) -> usize {
        most_token_ids(context) * JSON_BYTES_PER_ID + OTHER_MEMBERS_BYTES
    }
}

/// The model a request names, or the first configured.
async fn model(state: &AppState, named: Option<&str>) -> Result<Lease, ApiError> {
    let id = match named {
        Some(id) => id.to_owned(),
        None => state.models()?.default_id().unwrap_or_default(),
    };
    state.lease(&id, None).await
}

/// The model's context (`max_context_len`), which bounds what is tokenized.
fn context(lease: &Lease) -> usize {
    lease.engine.limits().max_context_len as usize
}

fn no_tokenizer(id: &str) -> ApiError {
    ApiError::not_supported(format!(
        "The model `{id}` has no tokenizer.json: put the one from its Hugging Face repository next to the \
         .rkllm file or set `tokenizer` (the runtime's own tokenizer is inside the model file, out of reach)."
    ))
}

/// Splits text into the model's token ids.
#[utoipa::path(
    post,
    path = "/tokenize",
    tag = "models",
    request_body = TokenizeRequest,
    responses(
        (status = 200, description = "The token ids (with `with_pieces`, `{id, piece}` objects)", body = TokenizeResponse),
        (status = 400, description = "Invalid request, or `content` far longer than the context (`context_length_exceeded`)", body = ErrorEnvelope),
        (status = 413, description = "The body is larger than `body_limit_bytes`, or than the longest `content` tokenized for the largest context served can be as JSON", body = ErrorEnvelope),
        (status = 404, description = "Unknown model", body = ErrorEnvelope),
        (status = 500, description = "The model failed to load", body = ErrorEnvelope),
        (status = 501, description = "The model has no tokenizer.json", body = ErrorEnvelope),
    ),
    security(("bearer" = []))
)]
pub async fn tokenize(
    State(state): State<AppState>,
    BoundedJson(req): BoundedJson<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let lease = model(&state, req.model.as_deref()).await?;
    // Tokenizing costs ~100 bytes of memory per byte: a text far longer than
    // the context is refused by its bytes first, as a chat's messages are.
    refuse_unfittable("content", req.content.len(), context(&lease))?;
    let id = lease.served_id();
    let tokens = prepare(&lease, move |loaded| {
        let ids =
            loaded.prompter.encode(&req.content, req.add_special).ok_or_else(|| no_tokenizer(&id))?.map_err(|e| {
                ApiError::invalid_value("content", format!("The tokenizer cannot encode `content`: {e}"))
            })?;
        if !req.with_pieces {
            return Ok(ids.into_iter().map(Token::Id).collect());
        }
        let pieces = loaded.prompter.pieces(&ids).ok_or_else(|| no_tokenizer(&id))?;
        Ok(ids.into_iter().zip(pieces).map(|(id, piece)| Token::Piece { id, piece }).collect())
    })
    .await?;
    Ok(Json(TokenizeResponse { tokens }))
}

/// Turns the model's token ids back into text.
#[utoipa::path(
    post,
    path = "/detokenize",
    tag = "models",
    request_body = DetokenizeRequest,
    responses(
        (status = 200, description = "The text", body = DetokenizeResponse),
        (status = 400, description = "Invalid request, an id outside the vocabulary, or more ids than the model turns into text at once", body = ErrorEnvelope),
        (status = 413, description = "The body is larger than `body_limit_bytes`, or than the most ids turned into text for the largest context served can be as JSON", body = ErrorEnvelope),
        (status = 404, description = "Unknown model", body = ErrorEnvelope),
        (status = 500, description = "The model failed to load", body = ErrorEnvelope),
        (status = 501, description = "The model has no tokenizer.json", body = ErrorEnvelope),
    ),
    security(("bearer" = []))
)]
pub async fn detokenize(
    State(state): State<AppState>,
    BoundedJson(req): BoundedJson<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let lease = model(&state, req.model.as_deref()).await?;
    let most = most_token_ids(context(&lease));
    if req.tokens.len() > most {
        return Err(ApiError::invalid_value(
            "tokens",
            format!(
                "`tokens` has {} ids; this model turns at most {most} into text at once (as many as the longest \
                 text `/tokenize` takes can give).",
                req.tokens.len()
            ),
        ));
    }
    let id = lease.served_id();
    let content = prepare(&lease, move |loaded| {
        let vocab = loaded.prompter.vocab_size().ok_or_else(|| no_tokenizer(&id))?;
        if let Some(i) = req.tokens.iter().position(|&t| t as usize >= vocab) {
            return Err(ApiError::invalid_value(
                &format!("tokens[{i}]"),
                format!("Token id {} is outside the vocabulary (0 to {}).", req.tokens[i], vocab - 1),
            ));
        }
        let text = loaded.prompter.decode(&req.tokens).ok_or_else(|| no_tokenizer(&id))?;
        text.map_err(|e| ApiError::invalid_value("tokens", format!("The tokenizer cannot decode `tokens`: {e}")))
    })
    .await?;
    Ok(Json(DetokenizeResponse { content }))
}
