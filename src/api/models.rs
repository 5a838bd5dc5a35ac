//! `GET /v1/models` and `GET /v1/models/{id}`.

use super::error::{ApiError, ErrorEnvelope};
use super::AppState;
use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    /// The model file's modification time (Unix seconds); for the simulator, the load time.
    pub created: u64,
    /// `rkllmd-<backend>-<runtime version>`.
    pub owned_by: String,
    /// Extension: which chat template renders prompts, and why.
    pub template: TemplateCard,
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

/// Lists the served models.
#[utoipa::path(get, path = "/v1/models", tag = "models", responses((status = 200, body = ModelList)), security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>) -> Result<Json<ModelList>, ApiError> {
    Ok(Json(ModelList { object: "list", data: vec![state.loaded()?.card()] }))
}

/// One served model.
#[utoipa::path(
    get,
    path = "/v1/models/{id}",
    tag = "models",
    params(("id" = String, Path, description = "Model id")),
    responses((status = 200, body = ModelCard), (status = 404, body = ErrorEnvelope)),
    security(("bearer" = []))
)]
pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<ModelCard>, ApiError> {
    let loaded = state.loaded()?;
    if id == loaded.model_id {
        Ok(Json(loaded.card()))
    } else {
        Err(ApiError::model_not_found(&id))
    }
}
