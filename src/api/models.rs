//! `GET /v1/models`, `GET /v1/models/{id}`, and the admin endpoints
//! `POST /v1/models/{id}/load` and `POST /v1/models/{id}/unload`.

use super::error::{ApiError, ErrorEnvelope};
use super::runtime_info::Conversations;
use super::state::AppState;
use crate::registry::{adapter_id, KeepAlive, Status};
use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    /// The model file's modification time (Unix seconds); for the simulator, the daemon's start.
    pub created: u64,
    /// `rkllmd`.
    pub owned_by: &'static str,
    /// `loaded` or `unloaded`.
    pub state: &'static str,
    /// Unix seconds when the model finished loading (`null` when unloaded).
    pub loaded_since: Option<u64>,
    /// Unix seconds when the idle model will be unloaded (`null`: unloaded, in use, or kept forever).
    pub expires_at: Option<u64>,
    /// Extension: which chat template renders prompts, and why (`null` until the model is loaded).
    pub template: Option<TemplateCard>,
    /// Extension: for a LoRA adapter (id `BASE:NAME`), the base model's id; `null` for a model.
    pub parent: Option<String>,
    /// Extension: the conversations kept warm (`null`: unloaded, or the conversation cache is off).
    pub conversations: Option<Conversations>,
    /// Extension: what the model can do, as Ollama names it (`completion`,
    /// `embedding`, `tools`, `thinking`); `null` until the model is loaded.
    pub capabilities: Option<Vec<&'static str>>,
    /// Extension: a loaded vision-language model's image encoder (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<VisionCard>,
}

/// What the encoder said about itself at load (`rknn_query`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VisionCard {
    pub input_width: u32,
    pub input_height: u32,
    /// Prompt tokens per image: its image tokens and its start and end tags.
    pub tokens_per_image: usize,
    /// Floats per image token handed to the LLM.
    pub embed_size: usize,
    /// Start, end and content tags.
    pub image_tags: [String; 3],
    /// `librknnrt.so`'s path, or the in-process simulated encoder.
    pub origin: String,
    pub api_version: String,
    pub driver_version: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TemplateCard {
    /// `file`, `beside-model`, `configured-family`, `detected-family` or `runtime-folded`.
    pub mode: &'static str,
    /// The built-in family, when one renders.
    pub family: Option<&'static str>,
    /// What was found and why this template.
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn card(status: &Status) -> ModelCard {
    ModelCard {
        id: status.spec.id.clone(),
        object: "model",
        created: status.spec.modified,
        owned_by: "rkllmd",
        state: if status.loaded.is_some() { "loaded" } else { "unloaded" },
        loaded_since: status.loaded.as_ref().map(|l| unix_secs(l.since)),
        expires_at: status.loaded.as_ref().and_then(|l| l.expires).map(unix_secs),
        template: status.loaded.as_ref().map(|l| {
            let t = l.model.prompter.describe();
            TemplateCard { mode: t.mode.as_str(), family: t.family, reason: t.reason }
        }),
        parent: None,
        conversations: status
            .loaded
            .as_ref()
            .and_then(|l| l.model.engine.warm_conversations())
            .map(Conversations::from),
        capabilities: status
            .loaded
            .as_ref()
            .map(|l| capabilities(&l.model.prompter, l.model.engine.vision().is_some())),
        vision: status.loaded.as_ref().and_then(|l| l.model.engine.vision()).map(|v| VisionCard {
            input_width: v.encoder.width,
            input_height: v.encoder.height,
            tokens_per_image: v.tokens_per_image(),
            embed_size: v.encoder.embed_size,
            image_tags: [v.tags.start.clone(), v.tags.end.clone(), v.tags.content.clone()],
            origin: v.origin.clone(),
            api_version: v.encoder.api_version.clone(),
            driver_version: v.encoder.driver_version.clone(),
        }),
    }
}

/// What a model can do: every model completes and embeds (its hidden
/// states, `/v1/embeddings`); tools when they reach the model; thinking
/// when its template knows a `<think>` block (docs/api.md, "Thinking input");
/// vision when it has an image encoder.
pub fn capabilities(prompter: &crate::conversation::Prompter, vision: bool) -> Vec<&'static str> {
    let can = prompter.capabilities();
    let mut names = vec!["completion", "embedding"];
    names.extend(can.tools.then_some("tools"));
    names.extend(can.thinking.then_some("thinking"));
    names.extend(vision.then_some("vision"));
    names
}

/// A model's card, then one per LoRA adapter (loaded and unloaded with it).
fn cards(status: &Status) -> impl Iterator<Item = ModelCard> + '_ {
    let base = card(status);
    let adapters = status.spec.engine.loras.iter().map(move |lora| ModelCard {
        id: adapter_id(&status.spec.id, &lora.name),
        parent: Some(status.spec.id.clone()),
        ..card(status)
    });
    std::iter::once(base).chain(adapters)
}

fn find(state: &AppState, id: &str) -> Result<ModelCard, ApiError> {
    let statuses = state.models()?.statuses();
    let found = statuses.iter().flat_map(cards).find(|c| c.id == id);
    found.ok_or_else(|| ApiError::model_not_found(id))
}

/// Lists every registered model, loaded or not, and each model's LoRA adapters (`BASE:NAME`).
#[utoipa::path(get, path = "/v1/models", tag = "models", responses((status = 200, body = ModelList)), security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>) -> Result<Json<ModelList>, ApiError> {
    let data = state.models()?.statuses().iter().flat_map(cards).collect();
    Ok(Json(ModelList { object: "list", data }))
}

/// One registered model.
#[utoipa::path(
    get,
    path = "/v1/models/{id}",
    tag = "models",
    params(("id" = String, Path, description = "Model id")),
    responses((status = 200, body = ModelCard), (status = 404, body = ErrorEnvelope)),
    security(("bearer" = []))
)]
pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<ModelCard>, ApiError> {
    find(&state, &id).map(Json)
}

/// Loads the model now (unloading least recently used idle ones to make
/// room); it then stays loaded until unloaded or, idle, past `keep_alive`.
#[utoipa::path(
    post,
    path = "/v1/models/{id}/load",
    tag = "models",
    params(("id" = String, Path, description = "Model id")),
    responses((status = 200, body = ModelCard), (status = 404, body = ErrorEnvelope), (status = 503, description = "The load failed", body = ErrorEnvelope), (status = 500, description = "Larger than the memory budget", body = ErrorEnvelope)),
    security(("bearer" = []))
)]
pub async fn load(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<ModelCard>, ApiError> {
    drop(state.lease(&id, None::<KeepAlive>).await?);
    find(&state, &id).map(Json)
}

/// Unloads the model: at once when idle, else as soon as its queued and
/// running requests are done (`expires_at` then says when it was asked).
#[utoipa::path(
    post,
    path = "/v1/models/{id}/unload",
    tag = "models",
    params(("id" = String, Path, description = "Model id")),
    responses((status = 200, body = ModelCard), (status = 404, body = ErrorEnvelope)),
    security(("bearer" = []))
)]
pub async fn unload(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<ModelCard>, ApiError> {
    state.unload(&id).await?;
    find(&state, &id).map(Json)
}
