//! From a chat request to the runtime's prompt: the model's template (or
//! the conversation folded for the runtime's own), tool choice, the thinking
//! state the reply starts in, and exact token counts when a tokenizer is
//! configured.

use super::fold::fold;
use super::template::{Arguments, ChatTemplate, RenderError};
use super::{ChatInput, Message, Rendered, Role, ToolChoice};
use serde_json::{json, Map, Value as Json};
use std::borrow::Cow;

/// What the daemon renders with, loaded once at startup.
pub struct Prompter {
    /// `None`: the runtime's built-in template wraps a single user message.
    pub(super) template: Option<ChatTemplate>,
    /// The tokenizer and where it came from: a file's, or borrowed from the
    /// runtime that brings one (the simulator's, not parsed twice).
    pub(super) tokenizer: Option<(Cow<'static, tokenizers::Tokenizer>, String)>,
    pub(super) choice: Choice,
}

/// Where the template came from, by precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TemplateMode {
    /// The configured `chat_template` file.
    File,
    /// `chat_template.jinja` or `tokenizer_config.json` next to the model.
    BesideModel,
    /// The configured built-in `template`.
    ConfiguredFamily,
    /// A built-in family detected from the model file.
    DetectedFamily,
    /// None known: the runtime's template, with the conversation folded
    /// into its one user message (lossy).
    RuntimeFolded,
}

impl TemplateMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TemplateMode::File => "file",
            TemplateMode::BesideModel => "beside-model",
            TemplateMode::ConfiguredFamily => "configured-family",
            TemplateMode::DetectedFamily => "detected-family",
            TemplateMode::RuntimeFolded => "runtime-folded",
        }
    }
}

/// How the template was chosen (set by `Prompter::load`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Choice {
    pub mode: TemplateMode,
    pub family: Option<&'static str>,
    pub reason: String,
    /// The model's file name and its tokens disagreed.
    pub conflict: bool,
}

/// What the daemon renders with and why, for the start log, `rkllmd
/// doctor` and the API.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TemplateInfo {
    pub mode: TemplateMode,
    /// The built-in family, when one renders.
    pub family: Option<&'static str>,
    /// The template's file or built-in name.
    pub origin: String,
    /// One sentence: what was found and why this template.
    pub reason: String,
    pub tokenizer: String,
    /// A guess is shaky: the file name and the file's tokens disagreed, or
    /// conversations are folded (say it at WARN level).
    pub warn: bool,
}

/// What a model can do as far as its prompts go: read by `/v1/models` and
/// Ollama's `/api/show`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Tools reach the model: its template renders them, or the
    /// conversation is folded (the tools go into the text).
    pub tools: bool,
    /// The model thinks in a `<think>` block its template knows; the
    /// runtime's own template (folded) gives no sign, so it counts as not.
    pub thinking: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error(transparent)]
    Template(#[from] RenderError),
    /// The template failed, and rendering the conversation up to this
    /// message (the client's index) fails the same way.
    #[error("the chat template failed on messages[{index}] (a `{role}` message): {reason}")]
    AtMessage { index: usize, role: &'static str, reason: String },
}

impl Prompter {
    /// Whether the daemon renders prompts (and the runtime's template is off).
    pub fn renders(&self) -> bool {
        self.template.is_some()
    }

    /// Which template is used and why.
    pub fn describe(&self) -> TemplateInfo {
        let origin = match &self.template {
            Some(t) => t.origin.clone(),
            None => "the runtime's built-in template".into(),
        };
        let tokenizer = match &self.tokenizer {
            Some((_, origin)) => origin.clone(),
            None => "none (the runtime counts prompt tokens)".into(),
        };
        let Choice { mode, family, reason, conflict } = self.choice.clone();
        TemplateInfo { mode, family, origin, reason, tokenizer, warn: conflict || mode == TemplateMode::RuntimeFolded }
    }

    pub fn capabilities(&self) -> Capabilities {
        match &self.template {
            Some(t) => Capabilities { tools: t.renders_tools, thinking: t.thinks },
            None => Capabilities { tools: true, thinking: false },
        }
    }

    pub fn mode(&self) -> TemplateMode {
        self.choice.mode
    }

    /// The start log's account of the template: WARN when it is a shaky
    /// guess or lossy, so an operator sees it before a client does.
    pub fn log_choice(&self) {
        let i = self.describe();
        if i.warn {
            tracing::warn!(mode = i.mode.as_str(), template = %i.origin, tokenizer = %i.tokenizer, reason = %i.reason, "prompt rendering");
        } else {
            tracing::info!(mode = i.mode.as_str(), template = %i.origin, tokenizer = %i.tokenizer, reason = %i.reason, "prompt rendering");
        }
    }

    pub fn render(&self, chat: &ChatInput) -> Result<Rendered, PromptError> {
        let offered = chat.tool_choice != ToolChoice::None && !chat.tools.is_empty();
        let tools: Vec<Json> = match &chat.tool_choice {
            ToolChoice::Function(name) => chat.tools.iter().filter(|t| tool_name(t) == Some(name)).cloned().collect(),
            _ => chat.tools.clone(),
        };
        let tools = offered.then_some(tools.as_slice());
        let messages = with_tool_instruction(&chat.messages, &chat.tool_choice, offered);
        let Some(template) = &self.template else {
            return Ok(fold(&messages, tools));
        };
        let to_json = |null_as_empty| -> Vec<Json> {
            messages.iter().map(|m| to_template(m, template.arguments, null_as_empty)).collect()
        };
        let mut json = to_json(false);
        let mut prompt = template.render(&json, tools, &chat.variables, true);
        // Clients send `content: null` on tool-call turns, as `transformers`
        // passes it on; templates that cannot take it (`+` on none, Gemma's
        // "Invalid content type") get "" instead. Those that test for none
        // (DeepSeek-R1's calls) keep it.
        if prompt.is_err() && messages.iter().any(|m| m.content.is_none()) {
            json = to_json(true);
            prompt = template.render(&json, tools, &chat.variables, true);
        }
        let prompt = prompt.map_err(|e| locate(template, &json, tools, chat, e))?;
        let messages = json;
        // The generation prompt is what rendering adds for the reply to come.
        let opening = match template.render(&messages, tools, &chat.variables, false) {
            Ok(base) if prompt.starts_with(&base) => &prompt[base.len()..],
            _ => prompt.as_str(),
        };
        let starts_in_thinking = opens_think(opening);
        Ok(Rendered { starts_in_thinking, tool_syntax: offered.then_some(template.tool_syntax), prompt })
    }

    /// The prompt's token ids, when a tokenizer is configured. The text
    /// already holds the template's special tokens, so none are added.
    pub fn tokenize(&self, text: &str) -> Option<Vec<u32>> {
        let (tokenizer, origin) = self.tokenizer.as_ref()?;
        match tokenizer.encode(text, false) {
            Ok(encoding) => Some(encoding.get_ids().to_vec()),
            Err(e) => {
                tracing::warn!(tokenizer = %origin, error = %e, "cannot tokenize the prompt; the runtime will count it");
                None
            }
        }
    }

    /// Any text's token ids, with the tokenizer's special tokens added when
    /// asked (`/tokenize`); `None` without a tokenizer.
    pub fn encode(&self, text: &str, add_special: bool) -> Option<Result<Vec<u32>, String>> {
        let (tokenizer, _) = self.tokenizer.as_ref()?;
        Some(tokenizer.encode(text, add_special).map(|e| e.get_ids().to_vec()).map_err(|e| e.to_string()))
    }

    /// Token ids back to text, special tokens included (`/detokenize`).
    pub fn decode(&self, ids: &[u32]) -> Option<Result<String, String>> {
        let (tokenizer, _) = self.tokenizer.as_ref()?;
        Some(tokenizer.decode(ids, false).map_err(|e| e.to_string()))
    }

    /// Each token's text as a stream decodes it: a token that ends inside a
    /// character gives "" and the one that completes it the character, so
    /// the pieces join into the decoded text (`/tokenize`'s `with_pieces`).
    pub fn pieces(&self, ids: &[u32]) -> Option<Vec<String>> {
        let (tokenizer, _) = self.tokenizer.as_ref()?;
        let mut stream = tokenizer.decode_stream(false);
        let mut pieces = Vec::with_capacity(ids.len());
        for &id in ids {
            match stream.step(id) {
                Ok(piece) => pieces.push(piece.unwrap_or_default()),
                // A decoder that rewrites earlier text (cleaning up spaces)
                // breaks the stream: this token alone, and a new stream.
                Err(_) => {
                    stream = tokenizer.decode_stream(false);
                    pieces.push(tokenizer.decode(&[id], false).unwrap_or_default());
                }
            }
        }
        Some(pieces)
    }

    /// The id of one token of the tokenizer's vocabulary (e.g. `yes`).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.as_ref()?.0.token_to_id(token)
    }

    pub fn has_tokenizer(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// How many token ids the tokenizer knows (added tokens included); `None` without one.
    pub fn vocab_size(&self) -> Option<usize> {
        Some(self.tokenizer.as_ref()?.0.get_vocab_size(true))
    }
}

#[cfg(test)]
impl Prompter {
    /// A prompter with this template (`None`: folded) and nothing else.
    pub(super) fn bare(template: Option<ChatTemplate>) -> Prompter {
        let mode = if template.is_some() { TemplateMode::File } else { TemplateMode::RuntimeFolded };
        Prompter {
            template,
            tokenizer: None,
            choice: Choice { mode, family: None, reason: String::new(), conflict: false },
        }
    }
}

/// Names the message a template failure comes from: the first one that,
/// rendered with those before it, fails with the same error. Refusals
/// (`raise_exception`) carry the template's own message and stay as they are.
fn locate(
    template: &ChatTemplate,
    messages: &[Json],
    tools: Option<&[Json]>,
    chat: &ChatInput,
    error: RenderError,
) -> PromptError {
    let RenderError::Failed(reason) = &error else { return error.into() };
    let fails_alike = |n: usize| {
        let rendered = template.render(&messages[..n], tools, &chat.variables, true);
        matches!(rendered, Err(RenderError::Failed(r)) if r == *reason)
    };
    // A system message the tool instruction put first is not the client's.
    let shift = messages.len().saturating_sub(chat.messages.len());
    let at = (1..=messages.len()).find(|&n| fails_alike(n)).and_then(|n| (n - 1).checked_sub(shift));
    match at.and_then(|index| Some((index, chat.messages.get(index)?))) {
        Some((index, m)) => PromptError::AtMessage { index, role: m.role.as_str(), reason: reason.clone() },
        None => error.into(),
    }
}

fn tool_name(tool: &Json) -> Option<&str> {
    tool.get("function")?.get("name")?.as_str()
}

/// `required` and a named function are told to the model in the system
/// prompt (appended to the first system message, or a new one first).
fn with_tool_instruction<'a>(
    messages: &'a [Message],
    choice: &ToolChoice,
    offered: bool,
) -> std::borrow::Cow<'a, [Message]> {
    let instruction = match choice {
        ToolChoice::Required if offered => {
            "You must call at least one of the provided functions in your reply.".to_owned()
        }
        ToolChoice::Function(name) if offered => format!("You must call the function `{name}` in your reply."),
        _ => return messages.into(),
    };
    let mut messages = messages.to_vec();
    match messages.first_mut() {
        Some(Message { role: Role::System, content: Some(text), .. }) => {
            text.push_str("\n\n");
            text.push_str(&instruction);
        }
        _ => messages.insert(0, Message { role: Role::System, content: Some(instruction), ..Default::default() }),
    }
    messages.into()
}

/// A message as `transformers` hands it to a template: only the keys that
/// apply (templates test `'tool_calls' in message`), OpenAI-shaped calls.
/// `null_as_empty`: a null content (a tool-call turn's) is given as "".
fn to_template(m: &Message, arguments: Arguments, null_as_empty: bool) -> Json {
    let mut out = Map::new();
    out.insert("role".into(), json!(m.role.as_str()));
    let content = match m.content.as_deref() {
        Some(c) => json!(c),
        None if null_as_empty => json!(""),
        None => Json::Null,
    };
    out.insert("content".into(), content);
    if let Some(name) = &m.name {
        out.insert("name".into(), json!(name));
    }
    if !m.tool_calls.is_empty() {
        let calls = m.tool_calls.iter().map(|c| {
            let args = match arguments {
                // Text that is not JSON stays text: the template shows what the client sent.
                Arguments::Objects => serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!(c.arguments)),
                Arguments::Text => json!(c.arguments),
            };
            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": args}})
        });
        out.insert("tool_calls".into(), Json::Array(calls.collect()));
    }
    if let Some(id) = &m.tool_call_id {
        out.insert("tool_call_id".into(), json!(id));
    }
    if let Some(r) = &m.reasoning_content {
        out.insert("reasoning_content".into(), json!(r));
    }
    Json::Object(out)
}

/// `<think>` opened and not closed.
fn opens_think(text: &str) -> bool {
    text.rfind("<think>").is_some_and(|at| !text[at..].contains("</think>"))
}

#[cfg(test)]
mod tests {
    use super::super::template::TemplateSource;
    use super::super::ToolSyntax;
    use super::*;

    fn prompter(text: &str) -> Prompter {
        let source = TemplateSource {
            origin: "test".into(),
            default: text.into(),
            tool_use: None,
            bos_token: String::new(),
            eos_token: String::new(),
        };
        Prompter::bare(Some(ChatTemplate::compile(source).unwrap()))
    }

    fn user(text: &str) -> Message {
        Message { role: Role::User, content: Some(text.into()), ..Default::default() }
    }

    #[test]
    fn thinking_state_comes_from_the_generation_prompt_only() {
        let t = "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% if not enable_thinking %}<think>\n{% endif %}{% endif %}";
        let p = prompter(t);
        let mut chat = ChatInput { messages: vec![user("<think>")], ..Default::default() };
        assert!(p.render(&chat).unwrap().starts_in_thinking);
        chat.variables.insert("enable_thinking".into(), json!(true));
        let r = p.render(&chat).unwrap();
        assert_eq!(r.prompt, "<think><a>");
        assert!(!r.starts_in_thinking, "an open <think> in the user's text is not the reply's");
    }

    #[test]
    fn tool_choice_shapes_tools_and_system_prompt() {
        let t = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{% for t in tools or [] %}{{ t.function.name }};{% endfor %}";
        let p = prompter(t);
        let tools = vec![
            json!({"type": "function", "function": {"name": "a"}}),
            json!({"type": "function", "function": {"name": "b"}}),
        ];
        let mut chat = ChatInput { messages: vec![user("hi")], tools, ..Default::default() };
        let r = p.render(&chat).unwrap();
        assert_eq!(r.prompt, "[user:hi]a;b;");
        assert_eq!(r.tool_syntax, Some(ToolSyntax::Hermes));
        chat.tool_choice = ToolChoice::None;
        let r = p.render(&chat).unwrap();
        assert_eq!((r.prompt.as_str(), r.tool_syntax), ("[user:hi]", None));
        chat.tool_choice = ToolChoice::Function("b".into());
        assert_eq!(
            p.render(&chat).unwrap().prompt,
            "[system:You must call the function `b` in your reply.][user:hi]b;"
        );
        chat.tool_choice = ToolChoice::Required;
        chat.messages
            .insert(0, Message { role: Role::System, content: Some("Be brief.".into()), ..Default::default() });
        assert_eq!(
            p.render(&chat).unwrap().prompt,
            "[system:Be brief.\n\nYou must call at least one of the provided functions in your reply.][user:hi]a;b;"
        );
    }

    #[test]
    fn without_a_template_the_conversation_is_folded_with_the_tool_instruction() {
        let p = Prompter::bare(None);
        let system = Message { role: Role::System, content: Some("Be brief.".into()), ..Default::default() };
        let tools = vec![json!({"type": "function", "function": {"name": "a"}})];
        let mut chat = ChatInput { messages: vec![system, user("hi")], tools, ..Default::default() };
        chat.tool_choice = ToolChoice::Required;
        let r = p.render(&chat).unwrap();
        assert!(r.prompt.starts_with("System: Be brief.\n\nYou must call at least one"), "{}", r.prompt);
        assert!(r.prompt.ends_with("\n\nUser: hi"), "{}", r.prompt);
        assert_eq!(r.tool_syntax, Some(ToolSyntax::Hermes));
        chat.tool_choice = ToolChoice::None;
        let r = p.render(&chat).unwrap();
        assert_eq!((r.prompt.as_str(), r.tool_syntax), ("System: Be brief.\n\nUser: hi", None));
    }
}
