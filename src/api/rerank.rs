//! `POST /v1/rerank` and `/rerank` (the shape of llama.cpp's server, Jina
//! and Cohere): each document is put to the model in its reranker prompt
//! format (`rerank_format`, `crate::embed::RerankFormat`), run in logits
//! mode, and scored from the logits of the answer tokens.

use super::embeddings::{check_count, check_inputs, text_inputs};
use super::error::{ApiError, ErrorEnvelope};
use super::extract::ApiJson;
use super::forward;
use super::named::NamesModel;
use super::record::Counting;
use super::request::prepare;
use super::state::AppState;
use crate::embed::DEFAULT_INSTRUCTION;
use crate::engine::{Capture, Rows};
use crate::metrics::Kind;
use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A document: a string, or Jina's `{"text": …}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Document {
    Text(String),
    Object { text: String },
}

impl Document {
    fn text(&self) -> &str {
        match self {
            Document::Text(text) | Document::Object { text } => text,
        }
    }
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct RerankRequest {
    pub model: String,
    pub query: String,
    pub documents: Vec<Document>,
    /// Return only the best N (default: all).
    #[serde(default)]
    pub top_n: Option<usize>,
    /// Echo each document's text in its result (default: false).
    #[serde(default)]
    pub return_documents: Option<bool>,
    /// Extension: the reranker's task instruction (Qwen3-Reranker's `<Instruct>`).
    #[serde(default)]
    pub instruction: Option<String>,
}

impl NamesModel for RerankRequest {
    fn model(&self) -> &str {
        &self.model
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DocumentText {
    pub text: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RerankResult {
    /// The document's position in the request.
    pub index: usize,
    /// 0..1, higher is more relevant.
    pub relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<DocumentText>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RerankUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RerankResponse {
    pub object: &'static str,
    pub model: String,
    /// Sorted by `relevance_score`, best first.
    pub results: Vec<RerankResult>,
    pub usage: RerankUsage,
}

/// Scores documents against a query, best first.
#[utoipa::path(
    post,
    path = "/v1/rerank",
    tag = "embeddings",
    request_body = RerankRequest,
    responses(
        (status = 200, description = "The documents' scores, best first", body = RerankResponse),
        (status = 400, description = "No documents, too many (more than 2048), or a document too long", body = ErrorEnvelope),
        (status = 404, description = "Unknown model", body = ErrorEnvelope),
        (status = 501, description = "No tokenizer.json, or it lacks the answer tokens", body = ErrorEnvelope),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    state: State<AppState>,
    counting: Extension<Counting>,
    req: ApiJson<RerankRequest>,
) -> Result<Json<RerankResponse>, ApiError> {
    rerank(state, counting, req).await
}

/// The same as `/v1/rerank` (the path Jina's and Cohere's clients use).
#[utoipa::path(
    post,
    path = "/rerank",
    tag = "embeddings",
    request_body = RerankRequest,
    responses(
        (status = 200, description = "The documents' scores, best first", body = RerankResponse),
        (status = 400, description = "No documents, too many (more than 2048), or a document too long", body = ErrorEnvelope),
        (status = 404, description = "Unknown model", body = ErrorEnvelope),
        (status = 501, description = "No tokenizer.json, or it lacks the answer tokens", body = ErrorEnvelope),
    ),
    security(("bearer" = []))
)]
pub async fn create_unversioned(
    state: State<AppState>,
    counting: Extension<Counting>,
    req: ApiJson<RerankRequest>,
) -> Result<Json<RerankResponse>, ApiError> {
    rerank(state, counting, req).await
}

async fn rerank(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    ApiJson(req): ApiJson<RerankRequest>,
) -> Result<Json<RerankResponse>, ApiError> {
    check_count(req.documents.len(), "documents")?;
    // Held until the reply is built, so the model is not unloaded under it.
    let (lease, place) = state.lease_queued(&req.model, None).await?;
    let loaded: &crate::registry::Loaded = &lease;
    let format = loaded.embed.rerank_format;
    let answers = format.answer_tokens();
    let columns: Option<Vec<u32>> = answers.iter().map(|t| loaded.prompter.token_id(t)).collect();
    let Some(columns) = columns else {
        return Err(ApiError::not_supported(format!(
            "Reranking reads the logits of the tokens {answers:?}: it needs the model's tokenizer.json \
             (`tokenizer`), and that tokenizer must have them."
        )));
    };
    let instruction = req.instruction.clone().unwrap_or_else(|| DEFAULT_INSTRUCTION.to_owned());
    let prompts: Vec<String> =
        req.documents.iter().map(|d| format.prompt(&instruction, &req.query, d.text())).collect();
    let inputs = prepare(&lease, move |loaded| {
        let inputs = text_inputs(loaded, prompts, "documents")?;
        check_inputs(&inputs, loaded.engine.limits().max_context_len, "documents").map(|()| inputs)
    })
    .await?;
    let capture = Capture::Logits { rows: Rows::Last, columns };
    let ran = forward::run(&lease, place, Kind::Rerank, inputs, capture, &counting).await?;
    let prompt_tokens = ran.prompt_tokens;
    let mut results: Vec<RerankResult> = ran
        .outputs
        .iter()
        .enumerate()
        .map(|(index, m)| RerankResult { index, relevance_score: format.score(m.row(0)), document: None })
        .collect();
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score).then(a.index.cmp(&b.index)));
    ran.answered();
    results.truncate(req.top_n.unwrap_or(usize::MAX));
    if req.return_documents == Some(true) {
        for r in &mut results {
            r.document = Some(DocumentText { text: req.documents[r.index].text().to_owned() });
        }
    }
    Ok(Json(RerankResponse {
        object: "list",
        model: lease.served_id(),
        results,
        usage: RerankUsage { prompt_tokens, total_tokens: prompt_tokens },
    }))
}
