//! `response_format`, done honestly. RKLLM cannot constrain decoding, so
//! the format is asked for in the prompt (a system instruction with the
//! schema) and the finished reply is checked against it; a reply that is not
//! JSON of that schema ends in an error (`api/status.rs`), never in a
//! "stop" that presents it as JSON.
//!
//! The schema check is a small validator for the part of JSON Schema that
//! structured-output schemas use (what OpenAI's strict mode accepts, and what
//! Pydantic and Zod emit): `type` (one or a list), `enum`, `const`,
//! `properties`, `required`, `additionalProperties`, `items`, `minItems`,
//! `maxItems`, `minLength`, `maxLength`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `anyOf`, `oneOf`, `allOf`, and
//! `$ref` to a JSON pointer in the same schema (`#/$defs/…`). Other keywords
//! (`pattern`, `format`, …) are not checked. A full JSON Schema crate
//! (`jsonschema`) would add ~30 crates to the daemon for keywords such
//! schemas rarely use.

use super::error::ApiError;
use crate::conversation::{Message, Role};
use serde_json::Value;

/// A validated `response_format` other than `text`.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// `json_object`: any JSON object.
    JsonObject,
    /// `json_schema`: JSON matching `schema`.
    Schema { name: String, schema: Value },
}

/// How deep the check follows a schema (nesting and `$ref`s); a schema
/// that refers to itself without consuming the value stops here.
const MAX_DEPTH: usize = 128;

impl ResponseFormat {
    pub fn parse(value: Option<&Value>) -> Result<Option<ResponseFormat>, ApiError> {
        let Some(value) = value else { return Ok(None) };
        let bad = |param: &str, message: &str| Err(ApiError::invalid_value(param, message.to_owned()));
        match value.get("type").and_then(Value::as_str) {
            Some("text") => Ok(None),
            Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
            Some("json_schema") => {
                let Some(spec) = value.get("json_schema") else {
                    return bad("response_format.json_schema", "`json_schema` is required with `type: json_schema`.");
                };
                let Some(name) = spec.get("name").and_then(Value::as_str) else {
                    return bad("response_format.json_schema.name", "`json_schema.name` must be a string.");
                };
                let schema = match spec.get("schema") {
                    None => Value::Bool(true),
                    Some(schema @ (Value::Object(_) | Value::Bool(_))) => schema.clone(),
                    Some(_) => {
                        return bad(
                            "response_format.json_schema.schema",
                            "`json_schema.schema` must be a JSON Schema object.",
                        )
                    }
                };
                Ok(Some(ResponseFormat::Schema { name: name.to_owned(), schema }))
            }
            _ => bad("response_format.type", "`response_format.type` must be `text`, `json_object` or `json_schema`."),
        }
    }

    /// Asks for the format in the system message (added if there is none).
    pub fn instruct(&self, messages: &mut Vec<Message>) {
        let rule = "Reply with the JSON only: no other text, no Markdown code fences.";
        let instruction = match self {
            ResponseFormat::JsonObject => format!("Respond with a single JSON object. {rule}"),
            ResponseFormat::Schema { name, schema } => {
                format!("Respond with JSON that conforms to this JSON Schema (named \"{name}\"):\n{schema}\n{rule}")
            }
        };
        match messages.first_mut() {
            Some(Message { role: Role::System, content: Some(text), .. }) => {
                text.push_str("\n\n");
                text.push_str(&instruction);
            }
            _ => messages.insert(0, Message { role: Role::System, content: Some(instruction), ..Message::default() }),
        }
    }

    /// Whether the reply's text is what was asked for; `Err` says why not.
    pub fn check(&self, reply: &str) -> Result<(), String> {
        let value: Value = serde_json::from_str(reply.trim()).map_err(|e| {
            format!("The reply is not valid JSON ({e}); it began: {:?}", reply.chars().take(80).collect::<String>())
        })?;
        match self {
            ResponseFormat::JsonObject if value.is_object() => Ok(()),
            ResponseFormat::JsonObject => Err("The reply is JSON but not an object.".into()),
            ResponseFormat::Schema { name, schema } => Checker { root: schema }
                .check(schema, &value, "$", 0)
                .map_err(|e| format!("The reply does not match the schema \"{name}\": {e}.")),
        }
    }
}

struct Checker<'a> {
    root: &'a Value,
}

impl Checker<'_> {
    fn check(&self, schema: &Value, value: &Value, at: &str, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("at {at}, the schema nests deeper than {MAX_DEPTH} levels (or refers to itself)"));
        }
        let s = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(format!("{at} is not allowed")),
            Value::Object(s) => s,
            _ => return Ok(()),
        };
        let next = depth + 1;
        if let Some(pointer) = s.get("$ref").and_then(Value::as_str) {
            let target = pointer.strip_prefix('#').and_then(|p| self.root.pointer(p));
            let Some(target) = target else {
                return Err(format!("at {at}, the schema's $ref {pointer:?} points nowhere"));
            };
            self.check(target, value, at, next)?;
        }
        if let Some(kind) = s.get("type") {
            let kinds: Vec<&str> = match kind {
                Value::String(k) => vec![k.as_str()],
                Value::Array(ks) => ks.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !kinds.is_empty() && !kinds.iter().any(|k| is_type(value, k)) {
                return Err(format!("{at} should be {}, not {}", kinds.join(" or "), type_of(value)));
            }
        }
        if let Some(options) = s.get("enum").and_then(Value::as_array) {
            if !options.contains(value) {
                return Err(format!("{at} should be one of {}", Value::Array(options.clone())));
            }
        }
        if let Some(constant) = s.get("const") {
            if constant != value {
                return Err(format!("{at} should be {constant}"));
            }
        }
        for (key, sub) in ["allOf", "anyOf", "oneOf"].iter().filter_map(|k| Some((*k, s.get(*k)?.as_array()?))) {
            let passed = sub.iter().filter(|sub| self.check(sub, value, at, next).is_ok()).count();
            let ok = match key {
                "allOf" => passed == sub.len(),
                "anyOf" => passed > 0,
                _ => passed == 1,
            };
            if !ok {
                let first = sub.iter().find_map(|sub| self.check(sub, value, at, next).err()).unwrap_or_default();
                return Err(format!("{at} does not satisfy {key} ({first})"));
            }
        }
        match value {
            Value::Object(map) => {
                let properties = s.get("properties").and_then(Value::as_object);
                for name in s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
                {
                    if !map.contains_key(name) {
                        return Err(format!("{at} lacks the required property {name:?}"));
                    }
                }
                for (name, item) in map {
                    let path = format!("{at}.{name}");
                    // A property not in `properties` is checked against `additionalProperties`, if any.
                    if let Some(sub) = properties.and_then(|p| p.get(name)).or_else(|| s.get("additionalProperties")) {
                        self.check(sub, item, &path, next)?;
                    }
                }
            }
            Value::Array(items) => {
                bounds(at, "items", items.len(), s.get("minItems"), s.get("maxItems"))?;
                if let Some(sub) = s.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.check(sub, item, &format!("{at}[{i}]"), next)?;
                    }
                }
            }
            Value::String(text) => {
                bounds(at, "characters", text.chars().count(), s.get("minLength"), s.get("maxLength"))?;
            }
            Value::Number(n) => {
                let n = n.as_f64().unwrap_or(f64::NAN);
                let limit = |k: &str| s.get(k).and_then(Value::as_f64);
                let fails = [
                    ("at least", limit("minimum").filter(|m| n < *m)),
                    ("at most", limit("maximum").filter(|m| n > *m)),
                    ("more than", limit("exclusiveMinimum").filter(|m| n <= *m)),
                    ("less than", limit("exclusiveMaximum").filter(|m| n >= *m)),
                ];
                if let Some((rule, m)) = fails.iter().find_map(|(rule, m)| Some((rule, (*m)?))) {
                    return Err(format!("{at} should be {rule} {m}"));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn bounds(at: &str, what: &str, n: usize, min: Option<&Value>, max: Option<&Value>) -> Result<(), String> {
    if let Some(min) = min.and_then(Value::as_u64).filter(|m| (n as u64) < *m) {
        return Err(format!("{at} should have at least {min} {what}"));
    }
    if let Some(max) = max.and_then(Value::as_u64).filter(|m| (n as u64) > *m) {
        return Err(format!("{at} should have at most {max} {what}"));
    }
    Ok(())
}

fn is_type(value: &Value, kind: &str) -> bool {
    match kind {
        "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
        "number" => value.is_number(),
        other => type_of(value) == other,
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(schema: Value) -> ResponseFormat {
        ResponseFormat::Schema { name: "s".into(), schema }
    }

    #[test]
    fn json_object_wants_an_object() {
        let f = ResponseFormat::JsonObject;
        assert!(f.check(" {\"a\": 1}\n").is_ok());
        assert!(f.check("[1]").unwrap_err().contains("not an object"));
        assert!(f.check("Sure! {\"a\": 1}").unwrap_err().contains("not valid JSON"));
        assert!(f.check("```json\n{}\n```").is_err());
    }

    #[test]
    fn a_pydantic_schema() {
        // What Pydantic emits for `class Person(BaseModel): name: str; age: int; tags: list[Tag] | None`.
        let f = schema(json!({
            "$defs": {"Tag": {"type": "object", "properties": {"label": {"type": "string", "maxLength": 5}}, "required": ["label"]}},
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "minimum": 0},
                "tags": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/Tag"}}, {"type": "null"}]},
                "kind": {"enum": ["a", "b"]}
            },
            "required": ["name", "age"],
            "additionalProperties": false
        }));
        assert!(f.check(r#"{"name": "Ada", "age": 36, "tags": [{"label": "math"}], "kind": "a"}"#).is_ok());
        assert!(f.check(r#"{"name": "Ada", "age": 36.0, "tags": null}"#).is_ok());
        let fails = [
            (r#"{"name": "Ada"}"#, "lacks the required property \"age\""),
            (r#"{"name": "Ada", "age": "36"}"#, "$.age should be integer, not string"),
            (r#"{"name": "Ada", "age": -1}"#, "$.age should be at least 0"),
            (r#"{"name": "Ada", "age": 1, "x": 1}"#, "$.x is not allowed"),
            (r#"{"name": "Ada", "age": 1, "kind": "c"}"#, "$.kind should be one of"),
            (r#"{"name": "Ada", "age": 1, "tags": [{"label": "toolong"}]}"#, "does not satisfy anyOf"),
        ];
        for (reply, why) in fails {
            let e = f.check(reply).unwrap_err();
            assert!(e.contains(why), "{reply}: {e}");
        }
    }

    #[test]
    fn a_schema_that_refers_to_itself_stops() {
        let f = schema(json!({"$ref": "#"}));
        assert!(f.check("{}").unwrap_err().contains("refers to itself"));
        assert!(schema(json!({"$ref": "#/nowhere"})).check("{}").unwrap_err().contains("points nowhere"));
    }

    #[test]
    fn parsing_and_the_instruction() {
        assert_eq!(ResponseFormat::parse(Some(&json!({"type": "text"}))).unwrap(), None);
        assert!(ResponseFormat::parse(Some(&json!({"type": "xml"}))).is_err());
        assert!(ResponseFormat::parse(Some(&json!({"type": "json_schema", "json_schema": {"schema": {}}}))).is_err());
        let f = ResponseFormat::parse(Some(
            &json!({"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}}),
        ))
        .unwrap()
        .unwrap();
        let mut messages = vec![Message { content: Some("hi".into()), ..Message::default() }];
        f.instruct(&mut messages);
        assert_eq!(messages[0].role, Role::System);
        assert!(messages[0].content.as_deref().unwrap().contains(r#"{"type":"object"}"#));
        let mut messages =
            vec![Message { role: Role::System, content: Some("Be brief.".into()), ..Message::default() }];
        ResponseFormat::JsonObject.instruct(&mut messages);
        assert_eq!(messages.len(), 1);
        assert!(messages[0].content.as_deref().unwrap().starts_with("Be brief.\n\nRespond with a single JSON object."));
    }
}
