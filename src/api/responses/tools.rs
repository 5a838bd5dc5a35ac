//! The Responses API's `tools` → the chat request's function tools, and
//! back for the calls the model makes.
//!
//! * `function` tools pass as they are.
//! * `namespace` tools (`{"type": "namespace", "name", "description"?, "tools": […]}`,
//!   what Codex CLI groups its multi-agent and MCP tools in) are flattened:
//!   each tool inside is offered to the model as `NAMESPACE__NAME` (the
//!   `mcp__server__tool` convention agents already use), and a call of it
//!   is returned as `{"namespace": NAMESPACE, "name": NAME}`, as OpenAI does.
//! * `custom` tools (free-form text input, e.g. Codex's `apply_patch`) are
//!   offered as a function of one string parameter `input`; a call of one
//!   is returned as a `custom_tool_call` item with that text as its `input`.
//! * Every other type (`web_search`, `file_search`, `image_generation`,
//!   `code_interpreter`, `computer_use_preview`, `mcp`, …: tools OpenAI
//!   runs on its side) cannot run on a board: it is left out of the prompt
//!   and reported (`Tools::unsupported`), never refused.

use crate::api::error::ApiError;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// Between a namespace's name and its tool's in the name the model sees.
const SEPARATOR: &str = "__";

/// Who a name the model sees stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub namespace: Option<String>,
    pub name: String,
    /// A `custom` tool: its call's arguments are `{"input": TEXT}`.
    pub custom: bool,
}

/// The client's tools as the chat request takes them.
#[derive(Debug, Default)]
pub struct Tools {
    /// Chat function tools, in the client's order.
    pub chat: Vec<Value>,
    /// Where each of `chat` stands in the request (`tools[2].tools[0]`), to
    /// name it in an error.
    pub params: Vec<String>,
    /// The types of the tools left out, in the client's order.
    pub unsupported: Vec<String>,
    pub names: Names,
}

/// The names the model sees that are not the client's own: namespaced and
/// custom tools.
#[derive(Debug, Default, Clone)]
pub struct Names(HashMap<String, Origin>);

impl Names {
    /// What a call the model made of `name` is to the client.
    pub fn origin(&self, name: &str) -> Origin {
        self.0.get(name).cloned().unwrap_or_else(|| Origin { namespace: None, name: name.to_owned(), custom: false })
    }

    pub fn is_custom(&self, name: &str) -> bool {
        self.0.get(name).is_some_and(|o| o.custom)
    }

    /// The name the model sees for a call the client sends back.
    pub fn flat(namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) => format!("{ns}{SEPARATOR}{name}"),
            None => name.to_owned(),
        }
    }
}

fn bad(param: String, message: impl Into<String>) -> ApiError {
    ApiError::invalid_value(&param, message)
}

pub fn convert(tools: &[Value]) -> Result<Tools, ApiError> {
    let mut out = Tools::default();
    for (i, tool) in tools.iter().enumerate() {
        let param = format!("tools[{i}]");
        let Some(object) = tool.as_object() else {
            return Err(bad(param, "A tool must be an object."));
        };
        match kind(object) {
            "namespace" => {
                let namespace = text(object, "name", &param)?;
                let Some(inner) = object.get("tools").and_then(Value::as_array) else {
                    return Err(bad(format!("{param}.tools"), "A namespace tool needs `tools`, an array of tools."));
                };
                for (k, tool) in inner.iter().enumerate() {
                    let param = format!("{param}.tools[{k}]");
                    let Some(object) = tool.as_object() else {
                        return Err(bad(param, "A tool must be an object."));
                    };
                    out.add(object, Some(&namespace), param)?;
                }
            }
            _ => out.add(object, None, param)?,
        }
    }
    Ok(out)
}

/// A tool's `type`; none (or null) is `function`, as OpenAI's SDKs read a bare tool.
fn kind(object: &Map<String, Value>) -> &str {
    match object.get("type") {
        None | Some(Value::Null) => "function",
        Some(Value::String(s)) => s,
        Some(_) => "",
    }
}

fn text(object: &Map<String, Value>, field: &str, param: &str) -> Result<String, ApiError> {
    match object.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(bad(format!("{param}.{field}"), format!("`{field}` must be a non-empty string."))),
    }
}

impl Tools {
    fn add(&mut self, object: &Map<String, Value>, namespace: Option<&str>, param: String) -> Result<(), ApiError> {
        let custom = match kind(object) {
            "function" => false,
            "custom" => true,
            other => {
                let shown: String = other.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(64).collect();
                self.unsupported.push(if shown.is_empty() { "unknown".into() } else { shown });
                return Ok(());
            }
        };
        let name = text(object, "name", &param)?;
        let flat = Names::flat(namespace, &name);
        let mut function = Map::new();
        function.insert("name".into(), json!(flat));
        // A null field is an absent one (chat's tools take only text and objects).
        if let Some(d) = object.get("description").filter(|d| !d.is_null()) {
            function.insert("description".into(), d.clone());
        }
        if custom {
            function.insert("parameters".into(), custom_parameters(object.get("format")));
        } else if let Some(p) = object.get("parameters").filter(|p| !p.is_null()) {
            function.insert("parameters".into(), p.clone());
        }
        if namespace.is_some() || custom {
            self.names.0.insert(flat, Origin { namespace: namespace.map(str::to_owned), name, custom });
        }
        self.chat.push(json!({"type": "function", "function": function}));
        self.params.push(param);
        Ok(())
    }

    /// A chat validation error about `tools[j]…` renamed to the client's
    /// own tool (`tools[i]` or `tools[i].tools[k]`, its fields flat).
    pub fn rename(&self, mut e: ApiError) -> ApiError {
        let Some(param) = e.body.param.as_deref() else { return e };
        let Some(rest) = param.strip_prefix("tools[") else { return e };
        let Some((j, field)) = rest.split_once(']') else { return e };
        if let Some(origin) = j.parse::<usize>().ok().and_then(|j| self.params.get(j)) {
            let field = field.strip_prefix(".function").unwrap_or(field);
            e.body.param = Some(format!("{origin}{field}"));
        }
        e
    }
}

/// A custom tool's one parameter: its free text, with the grammar or
/// syntax the client states for it (the model has no other way to see it).
fn custom_parameters(format: Option<&Value>) -> Value {
    let mut description = String::from("The tool's whole input, as free text.");
    if let Some(format) = format.and_then(Value::as_object) {
        if let Some(definition) = format.get("definition").and_then(Value::as_str) {
            let syntax = format.get("syntax").and_then(Value::as_str).unwrap_or("grammar");
            description.push_str(&format!(" It must follow this {syntax} grammar:\n{definition}"));
        }
    }
    json!({"type": "object", "properties": {"input": {"type": "string", "description": description}}, "required": ["input"]})
}

/// A custom tool call's text from the arguments the model wrote: `input`,
/// else an object's only string, else the arguments as written.
pub fn custom_input(arguments: &str) -> String {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(arguments) else {
        return arguments.to_owned();
    };
    if let Some(Value::String(input)) = object.get("input") {
        return input.clone();
    }
    let mut strings = object.values().filter_map(Value::as_str);
    match (strings.next(), strings.next(), object.len()) {
        (Some(only), None, 1) => only.to_owned(),
        _ => arguments.to_owned(),
    }
}

/// A custom tool call's text as the arguments the model is shown it wrote.
pub fn custom_arguments(input: &str) -> String {
    json!({ "input": input }).to_string()
}

/// `tool_choice` naming a function or custom tool (in a namespace or not)
/// → chat's `{"type": "function", "function": {"name"}}`; strings as they are.
pub fn choice(choice: &Value) -> Value {
    let name = choice.get("name").and_then(Value::as_str);
    match (choice.get("type").and_then(Value::as_str), name) {
        (Some("function" | "custom"), Some(name)) => {
            let namespace = choice.get("namespace").and_then(Value::as_str);
            json!({"type": "function", "function": {"name": Names::flat(namespace, name)}})
        }
        _ => choice.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_flatten_customs_take_text_and_built_ins_are_left_out() {
        let tools = convert(&[
            json!({"type": "function", "name": "exec_command", "parameters": {"type": "object"}}),
            json!({"type": "web_search"}),
            json!({"type": "namespace", "name": "multi_agent_v1", "description": "Agents",
                   "tools": [{"type": "function", "name": "spawn_agent", "description": "Spawn"},
                             {"type": "image_generation"}]}),
            json!({"type": "custom", "name": "apply_patch",
                   "format": {"type": "grammar", "syntax": "lark", "definition": "start: patch"}}),
            json!({"type": 7, "junk": true}),
        ])
        .unwrap();
        let names: Vec<&str> = tools.chat.iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["exec_command", "multi_agent_v1__spawn_agent", "apply_patch"]);
        assert_eq!(tools.params, ["tools[0]", "tools[2].tools[0]", "tools[3]"]);
        assert_eq!(tools.unsupported, ["web_search", "image_generation", "unknown"]);
        let spawn = tools.names.origin("multi_agent_v1__spawn_agent");
        assert_eq!(
            (spawn.namespace.as_deref(), spawn.name.as_str(), spawn.custom),
            (Some("multi_agent_v1"), "spawn_agent", false)
        );
        assert!(tools.names.origin("apply_patch").custom);
        assert_eq!(tools.names.origin("exec_command").namespace, None);
        let input = &tools.chat[2]["function"]["parameters"]["properties"]["input"]["description"];
        assert!(input.as_str().unwrap().contains("lark grammar:\nstart: patch"), "{input}");
    }

    #[test]
    fn only_a_tool_that_is_not_an_object_or_lacks_its_name_is_refused() {
        let e = convert(&[json!({"type": "web_search"}), json!("web_search")]).unwrap_err();
        assert_eq!(e.body.param.as_deref(), Some("tools[1]"));
        let e = convert(&[json!({"type": "namespace", "name": "ns", "tools": [{"type": "function"}]})]).unwrap_err();
        assert_eq!(e.body.param.as_deref(), Some("tools[0].tools[0].name"));
        let e = convert(&[json!({"type": "namespace", "tools": []})]).unwrap_err();
        assert_eq!(e.body.param.as_deref(), Some("tools[0].name"));
    }

    #[test]
    fn a_chat_error_names_the_clients_tool() {
        let tools = convert(&[
            json!({"type": "web_search"}),
            json!({"type": "namespace", "name": "ns",
            "tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "b c"}]}),
        ])
        .unwrap();
        let e = tools.rename(ApiError::invalid_value("tools[1].function.name", "bad"));
        assert_eq!(e.body.param.as_deref(), Some("tools[1].tools[1].name"));
    }

    #[test]
    fn custom_input_is_the_text_the_model_gave() {
        assert_eq!(custom_input(r#"{"input": "*** Begin Patch"}"#), "*** Begin Patch");
        assert_eq!(custom_input(r#"{"patch": "x"}"#), "x");
        assert_eq!(custom_input(r#"{"a": "x", "b": "y"}"#), r#"{"a": "x", "b": "y"}"#);
        assert_eq!(custom_input("not json"), "not json");
        assert_eq!(custom_input(&custom_arguments("a \"quoted\"\nline")), "a \"quoted\"\nline");
    }
}
