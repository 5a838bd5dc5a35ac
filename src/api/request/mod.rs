//! Requests: the wire types (`wire`), their pure conversion into the
//! conversation's input (`convert`), and here the validation that turns a
//! request into an engine [`Job`] (limits, prompt rendering and counting).

mod body_size;
mod convert;
mod images;
mod prepare;
mod size;
mod tools_fit;
mod wire;

pub use body_size::{is_client_metadata, BodySize};
pub use images::{vision_encoder, ImageRef};
pub use prepare::prepare;
pub use size::{
    most_token_ids, most_tokenized_bytes, refuse_unfittable, PromptSize, MAX_BYTES_PER_TOKEN, MAX_INPUTS, MAX_TOOLS,
};
pub use wire::*;

use super::ceiling::{clamp, Clamped};
use super::error::ApiError;
use super::structured::ResponseFormat;
use crate::conversation::{
    ChatInput, Message, PromptError, ReasoningMode, ReplyRules, Role, ToolChoice, ToolsOverflow,
};
use crate::engine::{CacheHints, Handoff, Job, Resent};
use crate::registry::Loaded;
use crate::sampling::SamplingOverrides;
use serde_json::Value;

/// The most stop sequences a request may give (OpenAI's bound).
pub const MAX_STOPS: usize = 4;

/// Range checks of the sampling fields.
pub fn validate_sampling(s: &SamplingOverrides) -> Result<(), ApiError> {
    s.check().map_err(|e| ApiError::invalid_value(e.field, e.to_string()))
}

/// A validated request, ready to become a job.
#[derive(Debug)]
pub struct Validated {
    pub job: Job,
    pub stream: bool,
    pub include_usage: bool,
    pub stops: Vec<String>,
    pub rules: ReplyRules,
    /// What the reply is checked against once it ends.
    pub checks: Checks,
}

/// What the api knows about a request that the engine's outcome is read
/// with (`status::ending`).
#[derive(Debug, Clone, Default)]
pub struct Checks {
    pub size: PromptSize,
    /// The reply must be JSON (of this schema).
    pub format: Option<ResponseFormat>,
    /// Tool definitions left out because they did not fit (`tools_overflow = "select"`).
    pub tools_dropped: usize,
}

/// The longest conversation key (`prompt_cache_key`, `X-Session-Id`) taken.
const MAX_CONVERSATION_KEY: usize = 256;

/// The `X-Session-Id` header: names the conversation like the body's
/// `prompt_cache_key`, which wins when both are given.
pub fn session_key(common: &mut Common, headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get("x-session-id") else { return Ok(()) };
    let value = value.to_str().map_err(|_| ApiError::bad_request(None, "`X-Session-Id` must be visible ASCII."))?;
    if value.len() > MAX_CONVERSATION_KEY {
        return Err(ApiError::bad_request(None, format!("`X-Session-Id` is at most {MAX_CONVERSATION_KEY} bytes.")));
    }
    common.prompt_cache_key.get_or_insert_with(|| value.to_owned());
    Ok(())
}

/// `max_tokens` default of the legacy endpoint (OpenAI's).
pub const LEGACY_MAX_TOKENS: u32 = 16;

impl Common {
    fn validate(&self, id: &str, prompt: String, max_tokens: Option<u32>, limit: u32) -> Result<Validated, ApiError> {
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::invalid_value(
                    "n",
                    "Only `n = 1` is supported: the NPU runs one sequence at a time.",
                ));
            }
        }
        let stream = self.stream.unwrap_or(false);
        if self.stream_options.is_some() && !stream {
            return Err(ApiError::invalid_value(
                "stream_options",
                "`stream_options` is only allowed with `stream: true`.",
            ));
        }
        if let Some(m) = max_tokens {
            if m == 0 || m > limit {
                return Err(ApiError::invalid_value(
                    "max_tokens",
                    format!("`max_tokens` must be between 1 and {limit} (the server's max_new_tokens)."),
                ));
            }
        }
        let stops = match &self.stop {
            None => Vec::new(),
            Some(StopSequences::One(s)) => vec![s.clone()],
            Some(StopSequences::Many(v)) if v.len() > MAX_STOPS => {
                return Err(ApiError::invalid_value("stop", "`stop` takes at most 4 sequences."));
            }
            Some(StopSequences::Many(v)) => v.clone(),
        };
        if !self.extra.is_empty() {
            tracing::debug!(fields = ?self.extra.keys().collect::<Vec<_>>(), "ignoring unknown request fields");
        }
        let sampling = SamplingOverrides::from(self.sampling);
        validate_sampling(&sampling)?;
        if self.prompt_cache_key.as_ref().is_some_and(|k| k.len() > MAX_CONVERSATION_KEY) {
            return Err(ApiError::invalid_value(
                "prompt_cache_key",
                format!("`prompt_cache_key` is at most {MAX_CONVERSATION_KEY} bytes."),
            ));
        }
        Ok(Validated {
            job: Job {
                max_new_tokens: max_tokens,
                sampling,
                cache: Handoff::new(CacheHints {
                    conversation: self.prompt_cache_key.clone(),
                    ..CacheHints::default()
                }),
                ..Job::new(id, prompt)
            },
            stream,
            include_usage: self.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false),
            stops,
            rules: ReplyRules { reasoning: ReasoningMode::Inline, starts_in_thinking: false, tool_syntax: None },
            checks: Checks::default(),
        })
    }
}

/// How a chat request is read: server settings the api applies.
#[derive(Debug, Clone, Copy)]
pub struct ChatPolicy {
    pub reasoning: ReasoningMode,
    pub tools_overflow: ToolsOverflow,
}

impl ChatCompletionRequest {
    /// `max_tokens` (or `max_completion_tokens`) above what the server produces
    /// is a ceiling, as the Responses and Messages front ends read it: agents
    /// ask for their own maximum whatever the model (opencode 32,000), and
    /// the reply is served with the server's `max_new_tokens`. Two values
    /// that differ are left for `validate` to refuse.
    pub(super) fn clamp_max_tokens(&mut self, limit: u32) -> Option<Clamped> {
        let asked = match (self.common.max_tokens, self.max_completion_tokens) {
            (Some(a), Some(b)) if a != b => return None,
            (a, b) => a.or(b)?,
        };
        let (served, clamped) = clamp(asked, limit);
        for field in [&mut self.common.max_tokens, &mut self.max_completion_tokens] {
            if field.is_some() {
                *field = Some(served);
            }
        }
        clamped
    }

    pub fn validate(&self, id: &str, model: &Loaded, policy: ChatPolicy) -> Result<Validated, ApiError> {
        let max_tokens = match (self.common.max_tokens, self.max_completion_tokens) {
            (Some(a), Some(b)) if a != b => {
                return Err(ApiError::invalid_value(
                    "max_completion_tokens",
                    "`max_tokens` and `max_completion_tokens` differ; send one of them.",
                ));
            }
            (a, b) => a.or(b),
        };
        self.refuse_oversized(model, policy.tools_overflow == ToolsOverflow::Refuse)?;
        let (mut chat, images) = convert::chat_input(self)?;
        let format = ResponseFormat::parse(self.response_format.as_ref())?;
        if let Some(format) = &format {
            format.instruct(&mut chat.messages);
        }
        let enable_thinking = chat.variables.get("enable_thinking").and_then(Value::as_bool).unwrap_or(false);
        let mut rendered = model.prompter.render(&chat).map_err(prompt_error)?;
        let limit = model.engine.limits().max_new_tokens;
        let markers = rendered.prompt.matches(images::MARKER).count();
        let mut v = self.common.validate(id, rendered.prompt.clone(), max_tokens, limit)?;
        images::attach(&mut v.job, &images, markers, model)?;
        let mut size = measure(&mut v.job, model, "messages");
        let room = tools_fit::reply_room(max_tokens, size.context, limit);
        // Read before a selection: a call the model writes to a tool that was
        // dropped (all of them, even) is still the client's tool call.
        let tool_syntax = rendered.tool_syntax;
        let mut tools_dropped = 0;
        if policy.tools_overflow == ToolsOverflow::Select && tools_fit::needed(&chat, &size, room) {
            if let Some(selection) = tools_fit::select(model, &chat, size.context, room) {
                log_selection(id, &selection, &size);
                tools_dropped = selection.dropped.len();
                (chat, rendered) = (selection.chat, selection.rendered);
                v.job.prompt.set_text(rendered.prompt.clone());
                size = measure(&mut v.job, model, "messages");
            }
        }
        v.job.cache.hints.resent = resent(&v.job, model, &chat);
        v.job.cache.hints.stable = stable(&v.job, model, &chat);
        let offered = chat.tool_choice != ToolChoice::None && !chat.tools.is_empty();
        // Only a prompt that may not fit is rendered a second time.
        if offered && (size.may_overflow() || size.check(&v.job).is_err()) {
            size.without_tools = without_tools(model, chat.clone());
        }
        size.check(&v.job)?;
        v.checks = Checks { size, format, tools_dropped };
        v.job.enable_thinking = enable_thinking;
        v.rules =
            ReplyRules { reasoning: policy.reasoning, starts_in_thinking: rendered.starts_in_thinking, tool_syntax };
        Ok(v)
    }

    /// The rendered prompt's tokens by the model's tokenizer, every tool
    /// included (`None` without a tokenizer): what Anthropic's
    /// `count_tokens` answers. Not checked against the context, except that a
    /// request clearly too long to be worth counting is refused by its bytes,
    /// as a chat is; images (which the Messages API does not take) would not
    /// be counted.
    pub fn count_tokens(&self, model: &Loaded) -> Result<Option<usize>, ApiError> {
        self.refuse_oversized(model, true)?;
        let (chat, _images) = convert::chat_input(self)?;
        let rendered = model.prompter.render(&chat).map_err(prompt_error)?;
        Ok(model.prompter.tokenize(&rendered.prompt).map(|ids| ids.len()))
    }

    /// Refuses by bytes and counts, before anything is rendered or tokenized:
    /// the messages' text, and the tools (with the messages when
    /// `all_tools_sent`: no selection may drop some).
    fn refuse_oversized(&self, model: &Loaded, all_tools_sent: bool) -> Result<(), ApiError> {
        let context = model.engine.limits().max_context_len as usize;
        // What every template renders verbatim (assistant turns may be cut, e.g. their reasoning).
        let verbatim: usize =
            self.messages.iter().filter(|m| m.role != ChatRole::Assistant).map(|m| content_bytes(&m.content)).sum();
        size::refuse_unfittable("messages", verbatim, context)?;
        size::refuse_oversized_tools(self.tools.as_deref().unwrap_or_default(), verbatim, context, all_tools_sent)
    }
}

/// A tool list held to its count, its bytes and OpenAI's rules where no
/// prompt is made of it (an Ollama request that only loads the model), as
/// a chat would hold it.
pub fn check_tools(tools: &[Value], model: &Loaded) -> Result<(), ApiError> {
    size::refuse_oversized_tools(tools, 0, model.engine.limits().max_context_len as usize, false)?;
    convert::validate_tools(tools)
}

/// The operator's account of a selection: which tools the model did not see.
fn log_selection(id: &str, s: &tools_fit::Selection, before: &PromptSize) {
    let counted = if before.tokens.is_some() { "tokens" } else { "bytes (no tokenizer)" };
    tracing::warn!(
        %id,
        kept = s.kept,
        dropped = s.dropped.len(),
        dropped_tools = %s.dropped.join(","),
        context = before.context,
        counted,
        "the tools do not fit the context: sending the most relevant that do (tools_overflow = select)"
    );
}

impl CompletionRequest {
    pub fn validate(&self, id: &str, model: &Loaded) -> Result<Validated, ApiError> {
        let bytes = match &self.prompt {
            Prompt::One(p) => p.len(),
            Prompt::Many(v) => v.iter().map(String::len).sum(),
        };
        size::refuse_unfittable("prompt", bytes, model.engine.limits().max_context_len as usize)?;
        let prompt = match &self.prompt {
            Prompt::One(p) => p.clone(),
            Prompt::Many(v) if v.len() == 1 => v[0].clone(),
            Prompt::Many(_) => {
                return Err(ApiError::invalid_value(
                    "prompt",
                    "Only one prompt per request is supported (the NPU runs one sequence at a time).",
                ));
            }
        };
        let limit = model.engine.limits().max_new_tokens;
        let max_tokens = Some(self.common.max_tokens.unwrap_or(LEGACY_MAX_TOKENS.min(limit)));
        let mut v = self.common.validate(id, prompt, max_tokens, limit)?;
        let size = measure(&mut v.job, model, "prompt");
        size.check(&v.job)?;
        v.checks.size = size;
        Ok(v)
    }
}

fn prompt_error(e: PromptError) -> ApiError {
    match e {
        PromptError::Template(e) => ApiError::bad_request(Some("messages"), e.to_string()),
        e @ PromptError::AtMessage { index, .. } => {
            ApiError::bad_request(Some(&format!("messages[{index}]")), e.to_string())
        }
    }
}

/// The prompt's size: its bytes, and with a tokenizer its exact count
/// (the prompt's sequence of ids and images then goes with the job). A
/// prompt that clearly cannot fit is not tokenized: `check` refuses it by
/// its bytes.
fn measure(job: &mut Job, model: &Loaded, param: &'static str) -> PromptSize {
    // With images, the text is what remains around the markers: the runtime
    // replaces each marker with the image's tags and tokens.
    let bytes = job.prompt.text_bytes();
    let context = model.engine.limits().max_context_len as usize;
    let not_tokenized = size::too_long_to_tokenize(bytes, context);
    job.prompt.tokenize(|text| if not_tokenized { None } else { model.prompter.tokenize(text) });
    let images = job.prompt.image_count();
    PromptSize {
        param,
        bytes,
        tokens: job.prompt.text_tokens(),
        not_tokenized,
        context,
        without_tools: None,
        images: (images > 0).then_some((images, job.image_timings.tokens as usize)),
    }
}

/// Where the prompt resends the conversation's last reply, for the
/// conversation cache to match by what the client saw (`engine/kv.rs`).
fn resent(job: &Job, model: &Loaded, chat: &ChatInput) -> Option<Resent> {
    if !model.engine.conversation_cache() {
        return None;
    }
    // An image's positions are ids no rendering tokenizes to.
    let ids: Vec<u32> = job.prompt.ids()?.iter().map(|&id| id as u32).collect();
    let found = crate::conversation::resend::locate(&model.prompter, chat, &ids)?;
    Some(Resent { start: found.start, end: found.end, view: found.view, before: found.before })
}

/// On a conversation's first turn, how many of the prompt's ids its
/// leading system messages and tools render to: the start that a new
/// conversation of the same agent shares, kept as a file of its own by the
/// engine (`engine/shared_prefix.rs`). Found as the ids the prompt shares
/// with the same start followed by an empty user message, so no template
/// needs to render a conversation without one.
fn stable(job: &Job, model: &Loaded, chat: &ChatInput) -> Option<usize> {
    let ids = job.prompt.ids()?;
    if !model.engine.shares_prefixes() || chat.messages.iter().any(|m| m.role == Role::Assistant) {
        return None;
    }
    let lead = chat.messages.iter().take_while(|m| m.role == Role::System).count();
    let mut start = chat.clone();
    start.messages.truncate(lead);
    start.messages.push(Message { role: Role::User, content: Some(String::new()), ..Message::default() });
    let start = model.prompter.tokenize(&model.prompter.render(&start).ok()?.prompt)?;
    Some(ids.iter().zip(&start).take_while(|(&a, &b)| u32::try_from(a).is_ok_and(|a| a == b)).count())
}

/// The bytes of a message's text.
fn content_bytes(content: &Option<Content>) -> usize {
    match content {
        None => 0,
        Some(Content::Text(text)) => text.len(),
        Some(Content::Parts(parts)) => parts.iter().filter_map(|p| p.text.as_ref()).map(String::len).sum(),
    }
}

/// The same conversation rendered without its tools, to name their share
/// of a prompt that does not fit.
fn without_tools(model: &Loaded, mut chat: ChatInput) -> Option<size::WithoutTools> {
    let tools = chat.tools.len();
    chat.tools.clear();
    chat.tool_choice = ToolChoice::None;
    let prompt = model.prompter.render(&chat).ok()?.prompt;
    let context = model.engine.limits().max_context_len as usize;
    let tokens =
        if size::too_long_to_tokenize(prompt.len(), context) { None } else { model.prompter.tokenize(&prompt) };
    Some(size::WithoutTools { tools, bytes: prompt.len(), tokens: tokens.map(|ids| ids.len()) })
}
