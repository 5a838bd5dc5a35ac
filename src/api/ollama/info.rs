//! `GET /api/version`, `GET /api/tags`, `GET /api/ps`, `POST /api/show`.

use super::error::OllamaError;
use super::wire::{Details, ModelEntry, Models, Show, ShowRequest, Version};
use crate::api::body::Body;
use crate::api::error::ApiError;
use crate::api::state::AppState;
use crate::conversation::Prompter;
use crate::registry::{adapter_id, ModelSpec, Status};
use axum::extract::State;
use axum::Json;
use serde_json::{json, Map};
use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The Ollama version `/api/version` reports. Clients read it as Ollama's
/// and gate on it (VS Code Copilot refuses a server below 0.6.4), so it is
/// an Ollama release, not rkllmd's 0.x: 0.12.0, whose API covers what is
/// served here (chat with tools and `think`, embed, show with
/// `capabilities`), a release clients of 2025-26 accept. rkllmd's own
/// version is beside it, in `rkllmd_version`, which Ollama clients ignore.
pub const OLLAMA_VERSION: &str = "0.12.0";

/// The Ollama version clients check, and rkllmd's own.
#[utoipa::path(get, path = "/api/version",
    operation_id = "ollama_version", tag = "ollama", responses((status = 200, description = "The version", body = Version)))]
pub async fn version() -> Json<Version> {
    Json(Version { version: OLLAMA_VERSION, rkllmd_version: env!("CARGO_PKG_VERSION") })
}

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t).map(|t| t.to_string()).unwrap_or_default()
}

fn unix(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// Not the file's sha256 (hashing gigabytes per listing is too slow): a
/// fingerprint of its path, size and mtime, which changes when the file does.
fn digest(spec: &ModelSpec) -> String {
    let part = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, &spec.path, spec.size_bytes, spec.modified).hash(&mut h);
        format!("{:016x}", h.finish())
    };
    (0..4).map(part).collect()
}

fn details() -> Details {
    Details {
        parent_model: String::new(),
        format: "rkllm",
        family: String::new(),
        families: Vec::new(),
        parameter_size: String::new(),
        quantization_level: String::new(),
    }
}

fn entry(status: &Status, running: bool) -> ModelEntry {
    let spec = &status.spec;
    let loaded = status.loaded.as_ref().filter(|_| running);
    ModelEntry {
        name: spec.id.clone(),
        model: spec.id.clone(),
        modified_at: (!running).then(|| rfc3339(unix(spec.modified))),
        size: spec.size_bytes,
        digest: digest(spec),
        details: details(),
        expires_at: loaded.and_then(|l| l.expires).map(rfc3339),
        size_vram: loaded.map(|_| spec.size_bytes),
        context_length: loaded.map(|l| l.model.engine.limits().max_context_len),
        conversations: loaded.and_then(|l| l.model.engine.warm_conversations()).map(Into::into),
    }
}

/// Every registered model, each followed by its LoRA adapters (`BASE:NAME`,
/// as Ollama names a model's variants by tag).
#[utoipa::path(get, path = "/api/tags",
    operation_id = "ollama_tags", tag = "ollama", responses((status = 200, description = "The registered models", body = Models)))]
pub async fn tags(State(state): State<AppState>) -> Result<Json<Models>, OllamaError> {
    let statuses = state.models()?.statuses();
    let models = statuses
        .iter()
        .flat_map(|s| {
            let adapters = s.spec.engine.loras.iter().map(|lora| {
                let id = adapter_id(&s.spec.id, &lora.name);
                let base = entry(s, false);
                ModelEntry {
                    name: id.clone(),
                    model: id,
                    details: Details { parent_model: s.spec.id.clone(), ..base.details.clone() },
                    ..base
                }
            });
            std::iter::once(entry(s, false)).chain(adapters)
        })
        .collect();
    Ok(Json(Models { models }))
}

/// The loaded models.
#[utoipa::path(get, path = "/api/ps",
    operation_id = "ollama_ps", tag = "ollama", responses((status = 200, description = "The loaded models", body = Models)))]
pub async fn ps(State(state): State<AppState>) -> Result<Json<Models>, OllamaError> {
    let statuses = state.models()?.statuses();
    let models = statuses.iter().filter(|s| s.loaded.is_some()).map(|s| entry(s, true)).collect();
    Ok(Json(Models { models }))
}

/// A loaded model's capabilities; an unloaded one's from its prompt
/// settings alone (its template found and compiled, the model not loaded).
async fn capabilities(status: &Status) -> Vec<&'static str> {
    // An encoder is configured before the model is loaded.
    let vision = status.spec.engine.vision.is_some();
    if let Some(loaded) = &status.loaded {
        return crate::api::models::capabilities(&loaded.model.prompter, vision);
    }
    let (settings, path) = (status.spec.prompt.clone(), status.spec.path.clone());
    let prompter = tokio::task::spawn_blocking(move || Prompter::load(&settings, &path)).await;
    let error = match prompter {
        Ok(Ok(prompter)) => return crate::api::models::capabilities(&prompter, vision),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    // The model will not load either (and say so then): only what every model does.
    tracing::warn!(model = %status.spec.id, %error, "/api/show: the model's chat template or tokenizer does not load");
    [&["completion", "embedding"][..], if vision { &["vision"] } else { &[] }].concat()
}

/// What is known of a model without loading it; the template once it is loaded.
#[utoipa::path(
    post,
    path = "/api/show",
    operation_id = "ollama_show",
    tag = "ollama",
    request_body = ShowRequest,
    responses(
        (status = 200, description = "The model's template, parameters and capabilities", body = Show),
    )
)]
pub async fn show(State(state): State<AppState>, Body(body): Body) -> Result<Json<Show>, OllamaError> {
    let req: ShowRequest = crate::api::extract::parse(&body)?;
    let registry = state.models()?;
    // An adapter (`BASE:NAME`) is shown as its base model.
    let (base, _) = registry.resolve(&req.model).ok_or_else(|| ApiError::model_not_found(&req.model))?;
    let statuses = registry.statuses();
    let status = statuses.iter().find(|s| s.spec.id == base.id).ok_or_else(|| ApiError::model_not_found(&req.model))?;
    let spec = &status.spec;
    // Once loaded, the context it is served with (the model's own, by default).
    let limits = status.loaded.as_ref().map_or(&spec.engine.limits, |l| l.model.engine.limits());
    let mut parameters: Vec<String> =
        crate::sampling::named(&spec.engine.sampling_defaults()).iter().map(|(k, v)| format!("{k} {v}")).collect();
    parameters.push(format!("num_ctx {}\nnum_predict {}", limits.max_context_len, limits.max_new_tokens));
    let parameters = parameters.join("\n");
    let template = status.loaded.as_ref().map(|l| l.model.prompter.describe().origin).unwrap_or_default();
    let mut model_info = Map::new();
    model_info.insert("general.architecture".into(), json!("rkllm"));
    model_info.insert("rkllm.context_length".into(), json!(limits.max_context_len));
    model_info.insert("rkllm.path".into(), json!(spec.path));
    Ok(Json(Show {
        modelfile: format!("FROM {}\n", spec.path),
        parameters,
        template,
        details: details(),
        model_info,
        capabilities: capabilities(status).await,
        modified_at: rfc3339(unix(spec.modified)),
    }))
}
