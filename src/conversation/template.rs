//! One compiled Hugging Face chat template and how it is rendered: the
//! Jinja dialect of `transformers` (trim_blocks, lstrip_blocks, loop
//! controls, Python string methods) and the extras templates call
//! (`raise_exception`, `strftime_now`, a `tojson` like Python's).

use super::{pyjson, ToolSyntax};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde_json::{Map, Value as Json};

/// A template's text and the special tokens it may print.
#[derive(Debug, Clone)]
pub struct TemplateSource {
    /// Where it came from (for errors and the startup log).
    pub origin: String,
    pub default: String,
    /// The `tool_use` variant of a tokenizer_config.json with named
    /// templates, used when a request has tools.
    pub tool_use: Option<String>,
    pub bos_token: String,
    pub eos_token: String,
}

/// How `tool_calls[].function.arguments` reach the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arguments {
    /// Parsed JSON (what templates that `tojson` them expect: Qwen, Llama, Hermes).
    Objects,
    /// The client's JSON text (templates that concatenate it, like DeepSeek-R1's).
    Text,
}

/// Raised by the template itself through `raise_exception`: the client's
/// conversation is one the model's format cannot express.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The template called `raise_exception(message)`.
    #[error("{0}")]
    Raised(String),
    /// Any other failure of the template on this input.
    #[error("the chat template failed: {0}")]
    Failed(String),
}

pub struct ChatTemplate {
    env: Environment<'static>,
    has_tool_use: bool,
    bos_token: String,
    eos_token: String,
    pub origin: String,
    pub arguments: Arguments,
    pub tool_syntax: ToolSyntax,
    /// The template reads `tools` (Gemma's and Phi-3's do not: they cannot show tools).
    pub renders_tools: bool,
    /// The template knows a `<think>` block or the `enable_thinking` switch.
    pub thinks: bool,
}

const DEFAULT: &str = "default";
const TOOL_USE: &str = "tool_use";

impl ChatTemplate {
    /// Compiles the template(s); a syntax error names the line.
    pub fn compile(source: TemplateSource) -> Result<ChatTemplate, Error> {
        let mut env = Environment::new();
        env.set_syntax(minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build()?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        let text = |t: &Option<String>| t.as_deref().unwrap_or_default().to_owned();
        let all = format!("{}{}", source.default, text(&source.tool_use));
        let arguments = arguments_style(&all);
        let tool_syntax = tool_syntax(&all);
        let renders_tools = all.contains("tools");
        let thinks = all.contains("<think>") || all.contains("enable_thinking");
        env.add_template_owned(DEFAULT, source.default)?;
        let has_tool_use = source.tool_use.is_some();
        if let Some(tool_use) = source.tool_use {
            env.add_template_owned(TOOL_USE, tool_use)?;
        }
        Ok(ChatTemplate {
            env,
            has_tool_use,
            bos_token: source.bos_token,
            eos_token: source.eos_token,
            origin: source.origin,
            arguments,
            tool_syntax,
            renders_tools,
            thinks,
        })
    }

    /// Renders `messages` (already in the shape `transformers` passes) with
    /// `tools` (`None`: the template sees `tools = none`) and the extra
    /// variables (`chat_template_kwargs`, `enable_thinking`).
    pub fn render(
        &self,
        messages: &[Json],
        tools: Option<&[Json]>,
        extra: &Map<String, Json>,
        add_generation_prompt: bool,
    ) -> Result<String, RenderError> {
        let mut ctx = extra.clone();
        ctx.insert("messages".into(), Json::Array(messages.to_vec()));
        ctx.insert("tools".into(), tools.map_or(Json::Null, |t| Json::Array(t.to_vec())));
        ctx.insert("add_generation_prompt".into(), Json::Bool(add_generation_prompt));
        ctx.insert("bos_token".into(), Json::String(self.bos_token.clone()));
        ctx.insert("eos_token".into(), Json::String(self.eos_token.clone()));
        let name = if tools.is_some() && self.has_tool_use { TOOL_USE } else { DEFAULT };
        let template = self.env.get_template(name).map_err(|e| RenderError::Failed(e.to_string()))?;
        template.render(Value::from(minijinja::value::Serde(&ctx))).map_err(|e| match raised(&e) {
            Some(message) => RenderError::Raised(message),
            None => RenderError::Failed(describe(&e)),
        })
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// `strftime_now(format)`: the local time, formatted like Python's strftime.
fn strftime_now(format: String) -> Result<String, Error> {
    jiff::fmt::strtime::format(format.as_bytes(), &jiff::Zoned::now())
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("strftime_now: {e}")))
}

/// `value | tojson` or `tojson(indent=N)`, as `transformers` defines it.
fn tojson(value: Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v)?),
    };
    pyjson::dumps(&value, indent)
        .map(Value::from_safe_string)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))
}

fn raised(e: &Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(r) = err.downcast_ref::<Raised>() {
            return Some(r.0.clone());
        }
        source = err.source();
    }
    None
}

/// The error with its template line, and its causes.
fn describe(e: &Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        text.push_str(": ");
        text.push_str(&err.to_string());
        source = err.source();
    }
    text
}

/// Templates that `tojson` the arguments (or test their type) want parsed
/// objects; the rest concatenate the client's text.
fn arguments_style(source: &str) -> Arguments {
    let compact: String = source.chars().filter(|c| !c.is_whitespace()).collect();
    let wants_objects =
        ["arguments|tojson", "argumentsisstring", "argumentsismapping", "arguments.items()", "arguments|items"]
            .iter()
            .any(|p| compact.contains(p));
    if wants_objects {
        Arguments::Objects
    } else {
        Arguments::Text
    }
}

/// How the model writes tool calls, told by the format its template teaches.
fn tool_syntax(source: &str) -> ToolSyntax {
    if !source.contains("<tool_call>") && source.contains("<|start_header_id|>") {
        ToolSyntax::Llama3Json
    } else {
        ToolSyntax::Hermes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compile(text: &str) -> ChatTemplate {
        ChatTemplate::compile(TemplateSource {
            origin: "test".into(),
            default: text.into(),
            tool_use: None,
            bos_token: "<s>".into(),
            eos_token: "</s>".into(),
        })
        .unwrap()
    }

    #[test]
    fn hf_dialect_extras() {
        let t = compile(concat!(
            "{% for m in messages %}{% if loop.index0 == 2 %}{% break %}{% endif %}",
            "{{ m.content.strip().upper() }}|{% endfor %}\n",
            "{{ bos_token }}{{ {'a': '<b>'} | tojson }}{{ eos_token }}{{ strftime_now('%Y') | length }}",
            "{% if add_generation_prompt %}!{% endif %}"
        ));
        let msgs = [json!({"role": "user", "content": " x "}), json!({"content": "y"}), json!({"content": "z"})];
        assert_eq!(t.render(&msgs, None, &Map::new(), true).unwrap(), "X|Y|<s>{\"a\": \"<b>\"}</s>4!");
    }

    #[test]
    fn raise_exception_keeps_the_templates_message() {
        let t = compile("{{ raise_exception('Only user and assistant roles are supported!') }}");
        match t.render(&[], None, &Map::new(), true) {
            Err(RenderError::Raised(m)) => assert_eq!(m, "Only user and assistant roles are supported!"),
            other => panic!("{other:?}"),
        }
        let t = compile("{{ messages[0].content.nope() }}");
        assert!(matches!(t.render(&[json!({"content": "a"})], None, &Map::new(), true), Err(RenderError::Failed(_))));
    }

    #[test]
    fn extra_variables_and_tools_reach_the_template() {
        let t = compile("{{ enable_thinking }} {{ tools | length if tools else 'none' }}");
        let extra = Map::from_iter([("enable_thinking".to_owned(), json!(false))]);
        assert_eq!(t.render(&[], None, &extra, true).unwrap(), "False none", "Jinja prints booleans the Python way");
        assert_eq!(t.render(&[], Some(&[json!({})]), &extra, true).unwrap(), "False 1");
    }
}
