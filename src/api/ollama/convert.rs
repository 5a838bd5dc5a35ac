//! Ollama requests → the OpenAI request types, validated by the same code
//! (`api::request`): one path from a request to an engine job.

use super::wire::{ChatRequest, Common, GenerateRequest, InMessage, Options};
use crate::api::error::ApiError;
use crate::api::named::NamesModel;
use crate::api::record::Counting;
use crate::api::request::{
    self as openai, ChatMessage, ChatPolicy, ChatRole, Content, ContentPart, ImageUrl, Prompt, StopSequences,
    Validated, MAX_STOPS,
};
use crate::conversation::{ReasoningMode, ToolsOverflow};
use crate::registry::KeepAlive;
use crate::registry::Loaded;
use serde_json::{json, Map, Value};

/// A counted request's body as JSON, whatever its content type (as
/// Ollama's server reads it); the model it names is told to its counting.
pub fn parse_counted<T: serde::de::DeserializeOwned + utoipa::ToSchema + NamesModel>(
    body: &[u8],
    counting: &Counting,
) -> Result<T, ApiError> {
    crate::api::extract::parse_named(body, Some(counting))
}

/// `keep_alive`: seconds or a duration string; `null`/absent = the daemon's.
pub fn keep_alive(value: Option<&Value>) -> Result<Option<KeepAlive>, ApiError> {
    let parsed = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => KeepAlive::from_secs(n.as_f64().unwrap_or(f64::NAN)),
        Some(Value::String(s)) => KeepAlive::parse(s),
        Some(_) => Err("keep_alive must be a number of seconds or a duration like \"5m\"".into()),
    };
    parsed.map(Some).map_err(|e| ApiError::invalid_value("keep_alive", e))
}

/// `think`: a boolean, or a level (any level turns thinking on).
pub(super) fn think(value: Option<&Value>) -> Result<Option<bool>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if matches!(s.as_str(), "high" | "medium" | "low") => Ok(Some(true)),
        Some(_) => {
            Err(ApiError::invalid_value("think", "`think` must be true, false, \"high\", \"medium\" or \"low\"."))
        }
    }
}

/// A message's text and Ollama `images` (base64 strings, no position of
/// their own) as OpenAI content: the images first, then the text, as the
/// vision models' own examples order them.
fn with_images(text: String, images: Option<&Vec<Value>>, param: &str) -> Result<Content, ApiError> {
    let Some(images) = images.filter(|i| !i.is_empty()) else { return Ok(Content::Text(text)) };
    let mut parts = Vec::with_capacity(images.len() + 1);
    for (k, image) in images.iter().enumerate() {
        let Some(data) = image.as_str() else {
            return Err(ApiError::image(
                &format!("{param}[{k}]"),
                "invalid_image",
                "Each image must be a base64 string.",
            ));
        };
        let url = if data.starts_with("data:") { data.to_owned() } else { format!("data:;base64,{data}") };
        parts.push(ContentPart { kind: "image_url".into(), text: None, image_url: Some(ImageUrl::Url(url)) });
    }
    parts.push(ContentPart { kind: "text".into(), text: Some(text), image_url: None });
    Ok(Content::Parts(parts))
}

/// The context an embedding input is cut to: `options.num_ctx`, at most
/// the model's (fixed when it was loaded), else the model's. A larger
/// `num_ctx` is capped, as Ollama caps it at the model's trained context:
/// clients send one setting for every model (Open WebUI's "Context Length").
/// 0 is no setting (llama.cpp's "the model's"), not an empty context.
pub fn context(num_ctx: Option<u32>, model: &Loaded) -> u32 {
    let num_ctx = num_ctx.filter(|&n| n > 0);
    let max = model.engine.limits().max_context_len;
    if let Some(n) = num_ctx.filter(|&n| n > max) {
        tracing::debug!(num_ctx = n, context = max, "num_ctx capped at the model's context");
    }
    num_ctx.map_or(max, |n| n.min(max))
}

/// `options` held to the document's ranges on every route, also where none
/// of them applies: a request that only loads the model, and `/api/embed`
/// (no sampling there).
pub fn check_options(options: Option<&Options>) -> Result<(), ApiError> {
    let Some(options) = options else { return Ok(()) };
    if options.stop.as_ref().is_some_and(|s| s.len() > MAX_STOPS) {
        return Err(ApiError::invalid_value("options.stop", "`stop` takes at most 4 sequences."));
    }
    openai::validate_sampling(&options.sampling.into())
}

/// The OpenAI fields `options` (and `stream`) map onto.
fn common(c: &Common, model: &Loaded) -> Result<openai::Common, ApiError> {
    let options = c.options.clone().unwrap_or_default();
    let Options { num_predict, stop, seed, num_ctx, sampling, other } = options;
    let limits = model.engine.limits();
    // The context is fixed when the model loads: a generation's prompt is
    // checked against it, whatever `num_ctx` says.
    if seed.is_some() || num_ctx.is_some() || !other.is_empty() {
        tracing::debug!(seed = seed.is_some(), num_ctx, options = ?other.keys().collect::<Vec<_>>(), "ignoring Ollama fields RKLLM cannot apply");
    }
    // num_predict ≤ 0 (-1 endless, -2 fill the context): the server's maximum.
    let max_tokens = num_predict.filter(|&n| n > 0).map(|n| n.min(i64::from(limits.max_new_tokens)) as u32);
    Ok(openai::Common {
        model: c.model.clone(),
        stream: Some(c.stream.unwrap_or(true)),
        max_tokens,
        stop: stop.map(StopSequences::Many),
        sampling,
        ..Default::default()
    })
}

fn message(i: usize, m: &InMessage, calls_before: &mut usize) -> Result<ChatMessage, ApiError> {
    let role = match m.role.as_str() {
        "system" => ChatRole::System,
        "user" => ChatRole::User,
        "assistant" => ChatRole::Assistant,
        "tool" => ChatRole::Tool,
        other => {
            return Err(ApiError::invalid_value(
                &format!("messages[{i}].role"),
                format!("Unknown role `{other}`: expected system, user, assistant or tool."),
            ))
        }
    };
    // Ollama's calls carry no ids: number them, and point a tool result at its function.
    let tool_calls = m.tool_calls.as_ref().map(|calls| {
        calls
            .iter()
            .map(|c| {
                *calls_before += 1;
                json!({"id": format!("call_{}", *calls_before), "type": "function",
                       "function": {"name": c.function.name, "arguments": c.function.arguments}})
            })
            .collect()
    });
    let tool_call_id = (role == ChatRole::Tool).then(|| m.tool_name.clone().unwrap_or_else(|| "tool".into()));
    Ok(ChatMessage {
        role,
        content: Some(with_images(m.content.clone(), m.images.as_ref(), &format!("messages[{i}].images"))?),
        tool_calls,
        tool_call_id,
        name: m.tool_name.clone().filter(|_| role == ChatRole::Tool),
        reasoning_content: m.thinking.clone(),
    })
}

/// A chat request as a job; `None` when it has no messages (a load request).
pub fn chat(
    req: &ChatRequest,
    id: &str,
    model: &Loaded,
    tools_overflow: ToolsOverflow,
) -> Result<Option<Validated>, ApiError> {
    let Some(messages) = req.messages.as_ref().filter(|m| !m.is_empty()) else {
        // Only a load; its tools are still held to the rules the document
        // states for them (a name of 1 to 64 characters, each once).
        openai::check_tools(req.tools.as_deref().unwrap_or_default(), model)?;
        return Ok(None);
    };
    let mut calls = 0;
    let messages = messages.iter().enumerate().map(|(i, m)| message(i, m, &mut calls)).collect::<Result<_, _>>()?;
    let openai = openai::ChatCompletionRequest {
        messages,
        max_completion_tokens: None,
        enable_thinking: think(req.common.think.as_ref())?,
        reasoning_effort: None,
        chat_template_kwargs: None,
        tools: req.tools.clone().filter(|t| !t.is_empty()),
        tool_choice: None,
        response_format: response_format(req.common.format.as_ref()),
        common: common(&req.common, model)?,
    };
    let policy = ChatPolicy { reasoning: ReasoningMode::Split, tools_overflow };
    openai.validate(id, model, policy).map(Some)
}

/// A generate request as a job; `None` when the prompt is empty (a load request).
pub fn generate(req: &GenerateRequest, id: &str, model: &Loaded) -> Result<Option<Validated>, ApiError> {
    for (param, given) in [("suffix", req.suffix.is_some()), ("template", req.template.is_some())] {
        if given {
            return Err(ApiError::invalid_value(
                param,
                format!("`{param}` is not supported: prompts are rendered with the model's chat template."),
            ));
        }
    }
    let Some(prompt) = req.prompt.clone().filter(|p| !p.is_empty()) else {
        // Only a load; its images are still held to the model, as Ollama
        // checks a model's vision before it loads it.
        if let Content::Parts(_) = with_images(String::new(), req.images.as_ref(), "images")? {
            crate::api::request::vision_encoder(model, "images[0]")?;
        }
        return Ok(None);
    };
    let mut common = common(&req.common, model)?;
    if req.raw == Some(true) {
        if req.images.as_ref().is_some_and(|i| !i.is_empty()) {
            return Err(ApiError::invalid_value(
                "raw",
                "`raw` prompts cannot carry images: they have no template to place them in.",
            ));
        }
        // Raw: the prompt as written, no template; no legacy 16-token default.
        common.max_tokens = common.max_tokens.or(Some(model.engine.limits().max_new_tokens));
        return openai::CompletionRequest { prompt: Prompt::One(prompt), common }.validate(id, model).map(Some);
    }
    let mut messages = Vec::new();
    for (role, text) in [(ChatRole::System, req.system.clone()), (ChatRole::User, Some(prompt))] {
        if let Some(text) = text {
            let images = (role == ChatRole::User).then_some(req.images.as_ref()).flatten();
            messages.push(ChatMessage {
                role,
                content: Some(with_images(text, images, "images")?),
                tool_calls: None,
                tool_call_id: None,
                name: None,
                reasoning_content: None,
            });
        }
    }
    let openai = openai::ChatCompletionRequest {
        messages,
        max_completion_tokens: None,
        enable_thinking: think(req.common.think.as_ref())?,
        reasoning_effort: None,
        chat_template_kwargs: None::<Map<String, Value>>,
        tools: None,
        tool_choice: None,
        response_format: response_format(req.common.format.as_ref()),
        common,
    };
    // No tools: the overflow policy has nothing to act on.
    let policy = ChatPolicy { reasoning: ReasoningMode::Split, tools_overflow: ToolsOverflow::Refuse };
    openai.validate(id, model, policy).map(Some)
}

/// Ollama's `format` as OpenAI's `response_format`: `"json"` asks for a JSON
/// object, an object is a JSON schema; both are checked the same way
/// (docs/api.md, "Structured output"). Anything else is left to the
/// validation of `response_format`, which refuses it.
fn response_format(format: Option<&Value>) -> Option<Value> {
    match format? {
        Value::String(s) if s == "json" => Some(json!({"type": "json_object"})),
        schema @ Value::Object(_) => {
            Some(json!({"type": "json_schema", "json_schema": {"name": "format", "schema": schema}}))
        }
        other => Some(json!({"type": other})),
    }
}
