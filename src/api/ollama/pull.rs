//! Ollama's `POST /api/pull`: a model from Hugging Face into `models_dir`
//! (`crate::pull`), with Ollama's progress lines, then served at once.
//! Off unless `allow_pull`: a pull writes gigabytes to the board's disk.

use super::error::OllamaError;
use crate::api::body::Body as RequestBody;
use crate::api::error::ApiError;
use crate::api::state::AppState;
use crate::pull::{Event, Hub, Options, PullError, Wanted};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use utoipa::ToSchema;

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[schema(as = OllamaPullRequest)]
pub struct PullRequest {
    /// `OWNER/NAME`, `hf.co/OWNER/NAME`, with `:QUANTIZATION` or `:FILE_NAME`.
    #[serde(alias = "name")]
    pub model: String,
    // Ollama's `insecure` is ignored: the Hub is reached at its own URL (`HF_ENDPOINT`).
    /// Progress lines as the pull goes (the default), or one object at its end.
    #[serde(default)]
    pub stream: Option<bool>,
}

/// One line of progress, as Ollama's: `status`, and for a file being
/// fetched its `digest`, `total` and `completed` bytes; or the error.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = OllamaPullProgress)]
pub struct Progress {
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<u64>,
}

impl Progress {
    fn status(status: impl Into<String>) -> Progress {
        Progress { status: status.into(), digest: None, total: None, completed: None }
    }
}

/// A progress line or the pull's end.
enum Line {
    Progress(Progress),
    Done(Result<String, ApiError>),
}

/// Ends the pull when its client is gone (the body or the handler dropped):
/// what it downloaded stays for the next pull to resume.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Downloads a converted model (`.rkllm`, tokenizer, template, vision
/// encoder) from Hugging Face into `models_dir`; it is served at once.
#[utoipa::path(
    post,
    path = "/api/pull",
    operation_id = "ollama_pull",
    tag = "ollama",
    request_body = PullRequest,
    responses(
        (status = 200, description = "With `stream` (the default) one progress object per line, the last `{\"status\":\"success\"}` or `{\"error\":…}`; else that last object alone",
            content((Progress = "application/json"), (Progress = "application/x-ndjson"))),
        (status = 403, description = "Pulling is off (allow_pull), or the Hub refused the token"),
        (status = 404, description = "No such repository, or no .rkllm file in it for this chip and tag"),
        (status = 409, description = "The same model is being pulled already"),
        (status = 500, description = "The models directory could not be written"),
        (status = 502, description = "The Hub failed, the download broke off (a new pull resumes it), or a file's digest was wrong"),
    )
)]
pub async fn pull(State(state): State<AppState>, RequestBody(body): RequestBody) -> Result<Response, OllamaError> {
    let req: PullRequest = crate::api::extract::parse(&body)?;
    if !state.settings.allow_pull {
        return Err(ApiError::pull_off().into());
    }
    let registry = state.models()?.clone();
    let models_dir = registry.models_dir().ok_or_else(ApiError::pull_off)?.to_owned();
    let wanted = Wanted::parse(&req.model).map_err(|e| ApiError::invalid_value("model", e.to_string()))?;
    let hub = Hub::from_env().map_err(|e| ApiError::pull(&e))?;
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let _ = tx.send(Line::Progress(Progress::status("pulling manifest")));
        let mut files = Vec::new();
        let mut on = |event: Event| {
            let line = match event {
                Event::Chosen(choice) => {
                    files = choice.files.iter().map(|(e, local)| (e.clone(), local.clone())).collect();
                    return;
                }
                Event::Bytes { index, completed } => {
                    let (entry, local) = &files[index];
                    Progress {
                        status: format!("pulling {local}"),
                        digest: Some(entry.digest.named()),
                        total: Some(entry.size),
                        completed: Some(completed),
                    }
                }
                Event::Placed { .. } => return,
            };
            let _ = tx.send(Line::Progress(line));
        };
        let options = Options::for_this_board();
        let pulled = crate::pull::pull(&hub, &wanted, &options, &models_dir, &mut on).await;
        let done = match pulled {
            Ok(pulled) => {
                let _ = tx.send(Line::Progress(Progress::status("verifying sha256 digest")));
                // The model joins the registry now (`models_dir` is where it went).
                let served =
                    |id: &str| registry.spec(id).is_some_and(|s| std::path::Path::new(&s.path) == pulled.model);
                match registry.rescan().await {
                    Ok(_) if served(&pulled.id) => Ok(pulled.id),
                    Ok(_) => Err(ApiError::pull(&PullError::Setup(format!(
                        "{} was pulled to {}, but another model has its id: rename one (the daemon's log says which)",
                        pulled.id,
                        pulled.model.display()
                    )))),
                    Err(e) => Err(ApiError::pull(&PullError::Setup(e))),
                }
            }
            Err(e) => Err(ApiError::pull(&e)),
        };
        if let Ok(id) = &done {
            tracing::info!(model = %id, repo = %wanted.repo, "pulled");
        }
        let _ = tx.send(Line::Done(done));
    });
    let guard = AbortOnDrop(task);
    let mut rx = rx;
    if req.stream == Some(false) {
        while let Some(line) = rx.recv().await {
            if let Line::Done(done) = line {
                drop(guard);
                return Ok(done.map(|_| Json(Progress::status("success")).into_response())?);
            }
        }
        return Err(ApiError::pull(&PullError::Setup("the pull ended without a result".into())).into());
    }
    let body = async_stream::stream! {
        // The guard lives as long as the body: a client that leaves ends the pull.
        let _guard = guard;
        while let Some(line) = rx.recv().await {
            let json = match line {
                Line::Progress(p) => serde_json::to_value(p).unwrap_or_default(),
                Line::Done(Ok(_)) => serde_json::json!({ "status": "success" }),
                Line::Done(Err(e)) => serde_json::json!({ "error": e.body.message }),
            };
            let mut bytes = serde_json::to_vec(&json).unwrap_or_default();
            bytes.push(b'\n');
            yield Ok::<_, std::convert::Infallible>(Bytes::from(bytes));
        }
    };
    Ok(([(CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(body)).into_response())
}
