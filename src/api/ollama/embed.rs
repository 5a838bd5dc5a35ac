//! `POST /api/embed` and the legacy `POST /api/embeddings`: Ollama's shapes
//! over the path of `/v1/embeddings` (validation, pooling, the engine's
//! hidden-layer job and the request record: `api::embeddings::vectors`).

use super::convert::{self, parse_counted};
use super::error::OllamaError;
use super::wire::{EmbedInput, EmbedRequest, EmbedResponse, LegacyEmbedRequest, LegacyEmbedResponse, Options};
use crate::api::body::Body;
use crate::api::embeddings::{check_count, check_inputs, known_dimensions, text_inputs, vectors, Vectors};
use crate::api::error::ApiError;
use crate::api::record::Counting;
use crate::api::request::{prepare, MAX_BYTES_PER_TOKEN};
use crate::api::state::AppState;
use crate::engine::RunInput;
use axum::extract::State;
use axum::{Extension, Json};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Ollama's embeddings: one normalised vector per input.
#[utoipa::path(
    post,
    path = "/api/embed",
    operation_id = "ollama_embed",
    tag = "ollama",
    request_body = EmbedRequest,
    responses(
        (status = 200, description = "One embedding per input, in input order", body = EmbedResponse),
    )
)]
pub async fn embed(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    Body(body): Body,
) -> Result<Json<EmbedResponse>, OllamaError> {
    let received = Instant::now();
    let req: EmbedRequest = parse_counted(&body, &counting)?;
    let texts = match req.input {
        None => Vec::new(),
        Some(EmbedInput::Text(text)) => Some(text).filter(|t| !t.is_empty()).into_iter().collect(),
        Some(EmbedInput::Texts(texts)) => texts,
    };
    let ask = Ask {
        model: &req.model,
        keep_alive: req.keep_alive.as_ref(),
        options: req.options.as_ref(),
        counting: &counting,
    };
    let truncate = req.truncate.unwrap_or(true);
    let (model, load, out) = run(&state, ask, texts, truncate, req.dimensions, true).await?;
    let ns = |ms: Option<f64>| ms.map_or(0, |ms| (ms * 1e6) as u64);
    Ok(Json(EmbedResponse {
        model,
        // A request with no input only loads the model, as Ollama's does.
        // Ollama's total includes the load, which comes before `received`.
        total_duration: out
            .as_ref()
            .map_or_else(|| received.elapsed().as_nanos() as u64, |o| ns(o.timings.e2e_ms) + load.as_nanos() as u64),
        load_duration: load.as_nanos() as u64,
        prompt_eval_count: out.as_ref().map_or(0, |o| o.prompt_tokens),
        embeddings: out.map(|o| o.vectors).unwrap_or_default(),
    }))
}

/// One prompt, never truncated, and its vector at its own length: the
/// legacy endpoint of Ollama's did not normalise.
#[utoipa::path(
    post,
    path = "/api/embeddings",
    operation_id = "ollama_embeddings",
    tag = "ollama",
    request_body = LegacyEmbedRequest,
    responses(
        (status = 200, description = "The prompt's embedding (empty without a prompt)", body = LegacyEmbedResponse),
    )
)]
pub async fn legacy(
    State(state): State<AppState>,
    Extension(counting): Extension<Counting>,
    Body(body): Body,
) -> Result<Json<LegacyEmbedResponse>, OllamaError> {
    let req: LegacyEmbedRequest = parse_counted(&body, &counting)?;
    let texts: Vec<String> = req.prompt.into_iter().filter(|p| !p.is_empty()).collect();
    let ask = Ask {
        model: &req.model,
        keep_alive: req.keep_alive.as_ref(),
        options: req.options.as_ref(),
        counting: &counting,
    };
    let (_, _, out) = run(&state, ask, texts, false, None, false).await?;
    let embedding = out.and_then(|o| o.vectors.into_iter().next()).unwrap_or_default();
    Ok(Json(LegacyEmbedResponse { embedding }))
}

/// What both endpoints name: the model and how long it stays loaded, and
/// `options` (of which only `num_ctx` applies: there is no sampling); and
/// who counts the request.
struct Ask<'a> {
    model: &'a str,
    keep_alive: Option<&'a Value>,
    options: Option<&'a Options>,
    counting: &'a Counting,
}

/// Loads the model and embeds the texts: the model's id, the time spent
/// loading it, and the vectors (`None` when there were no texts).
async fn run(
    state: &AppState,
    ask: Ask<'_>,
    texts: Vec<String>,
    truncate: bool,
    dimensions: Option<u32>,
    normalise: bool,
) -> Result<(String, Duration, Option<Vectors>), ApiError> {
    if ask.model.is_empty() {
        return Err(ApiError::invalid_value("model", "model is required"));
    }
    let keep_alive = convert::keep_alive(ask.keep_alive)?;
    convert::check_options(ask.options)?;
    // No texts only loads the model; too many are refused before it loads.
    if !texts.is_empty() {
        check_count(texts.len(), "input")?;
    }
    // Held until the vectors are made, so the model is not unloaded under them.
    let (lease, place) = state.lease_queued(ask.model, keep_alive).await?;
    let context = convert::context(ask.options.and_then(|o| o.num_ctx), &lease);
    if texts.is_empty() {
        // Only a load, with `dimensions` held to what the model has shown.
        known_dimensions(&lease, dimensions)?;
        return Ok((lease.served_id(), lease.load_duration, None));
    }
    let inputs = prepare(&lease, move |loaded| {
        // What the first `context` tokens can span, at most bytes-per-token on
        // average: the rest is cut before tokenizing, which costs by the byte.
        let most = context as usize * MAX_BYTES_PER_TOKEN;
        let texts = if truncate { texts.into_iter().map(|t| cut(t, most)).collect() } else { texts };
        let inputs = text_inputs(loaded, texts, "input")?;
        let inputs = inputs.into_iter().map(|input| fit(input, truncate, context)).collect::<Result<Vec<_>, _>>()?;
        check_inputs(&inputs, context, "input").map(|()| inputs)
    })
    .await?;
    let out = vectors(&lease, place, inputs, dimensions, normalise, ask.counting).await?;
    Ok((lease.served_id(), lease.load_duration, Some(out)))
}

/// An input as the runtime will read it, with `truncate`: cut to the first
/// `context` tokens. Exactly only with the model's tokenizer; without one, a
/// text that may be longer than the context is refused rather than cut at a
/// guess (one that cannot be is sent whole).
fn fit(input: RunInput, truncate: bool, context: u32) -> Result<RunInput, ApiError> {
    let context = context as usize;
    match input {
        RunInput::Tokens(mut ids) if truncate => {
            ids.truncate(context);
            Ok(RunInput::Tokens(ids))
        }
        // A token is at least one byte: a shorter text fits.
        RunInput::Prompt(text) if truncate && text.len() > context => Err(ApiError::invalid_value(
            "truncate",
            format!(
                "An input of {} bytes may be longer than the context ({context} tokens), and without the model's \
                 tokenizer.json it cannot be cut exactly: send shorter inputs, or `truncate: false` to send it whole.",
                text.len()
            ),
        )),
        input => Ok(input),
    }
}

/// `text` cut to at most `bytes`, at a character boundary.
fn cut(mut text: String, bytes: usize) -> String {
    if text.len() > bytes {
        let end = (0..=bytes).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.truncate(end);
        text.shrink_to_fit();
    }
    text
}
