//! NUL characters in request bodies. The runtime takes its texts as C
//! strings, which end at a NUL, and rkllmd will not cut one short or drop
//! what follows: a body is refused when a text the OpenAPI document
//! declares holds U+0000. Every text a handler reads is declared, and the
//! document says "no NUL" of each (`schema_rules`: a pattern on every
//! string, `NoNul` where any value is taken). A member the document does
//! not declare (an unknown field) is ignored by the handlers and may hold
//! anything. The check walks the body along the document itself, so the
//! two cannot disagree.

use super::error::ApiError;
use serde_json::{Map, Value};

const SCHEMAS: &str = "#/components/schemas/";

/// Refuses a body whose texts, where `schema` (a component of the
/// document) declares them, hold a NUL, naming the first such text.
pub fn refuse(bytes: &[u8], schema: &str) -> Result<(), ApiError> {
    // JSON carries a NUL only as the escape `\u0000`.
    if memchr::memmem::find(bytes, br"\u0000").is_none() {
        return Ok(());
    }
    // The typed parse took the body, so it is valid JSON.
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(None, e.to_string()))?;
    let schemas = super::docs::request_schemas();
    // A body type the document does not name (a bug `tests` below would
    // catch) is held to the strictest rule: no NUL anywhere.
    let root = schemas.get(schema).or_else(|| schemas.get(super::schema_rules::NO_NUL_NAME));
    let mut path = String::new();
    if !Doc(schemas).nul_at(&value, &root.into_iter().collect::<Vec<_>>(), &mut path) {
        // An escaped backslash before `u0000` (text), or a NUL where nothing is declared.
        return Ok(());
    }
    let message = format!("`{path}` contains a NUL character (U+0000), which the runtime cannot take.");
    Err(ApiError::invalid_value(&path, message))
}

/// The document's component schemas.
struct Doc<'a>(&'a Map<String, Value>);

impl<'a> Doc<'a> {
    /// Whether `value`, described by `schemas`, holds a NUL where they
    /// declare a text or a key; if so, `path` ends at it, written as
    /// serde's paths are (`messages[0].content`).
    fn nul_at(&self, value: &Value, schemas: &[&'a Value], path: &mut String) -> bool {
        let mut here = Vec::new();
        for schema in schemas {
            self.expand(schema, &mut here);
        }
        let start = path.len();
        let found = match value {
            Value::String(text) => text.contains('\0'),
            Value::Array(items) => {
                let each: Vec<&Value> = here.iter().filter_map(|s| s.get("items")).collect();
                !each.is_empty()
                    && items.iter().enumerate().any(|(i, item)| {
                        path.truncate(start);
                        path.push_str(&format!("[{i}]"));
                        self.nul_at(item, &each, path)
                    })
            }
            Value::Object(map) => {
                let named = here.iter().any(|s| s.get("propertyNames").is_some());
                map.iter().any(|(key, item)| {
                    path.truncate(start);
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(&key.replace('\0', "\\u0000"));
                    let member = member(&here, key);
                    (named && key.contains('\0')) || (!member.is_empty() && self.nul_at(item, &member, path))
                })
            }
            _ => false,
        };
        if !found {
            path.truncate(start);
        }
        found
    }

    /// The schemas that may hold for a value `schema` describes: itself,
    /// what it refers to, its `allOf`/`anyOf`/`oneOf` branches and its
    /// `then`/`else` (a member any of them declares counts as declared) —
    /// not an `if` or a `not`, which declare nothing.
    fn expand(&self, schema: &'a Value, out: &mut Vec<&'a Value>) {
        let Some(map) = schema.as_object() else { return };
        if out.iter().any(|s| std::ptr::eq(*s, schema)) {
            return;
        }
        out.push(schema);
        let target = map.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(SCHEMAS));
        if let Some(target) = target.and_then(|name| self.0.get(name)) {
            self.expand(target, out);
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            for branch in map.get(key).and_then(Value::as_array).into_iter().flatten() {
                self.expand(branch, out);
            }
        }
        for key in ["then", "else"] {
            if let Some(branch) = map.get(key) {
                self.expand(branch, out);
            }
        }
    }
}

/// The schemas an object's member `key` takes from each of `here`: its
/// entry in `properties`, else `additionalProperties` when that is a schema.
fn member<'a>(here: &[&'a Value], key: &str) -> Vec<&'a Value> {
    here.iter()
        .filter_map(|s| {
            let declared = s.get("properties").and_then(|p| p.get(key));
            declared.or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::refuse;
    use utoipa::ToSchema;

    fn param(body: &[u8], schema: &str) -> Option<String> {
        refuse(body, schema).err().map(|e| e.body.param.unwrap_or_default())
    }

    #[test]
    fn a_nul_in_a_declared_text_is_refused_naming_where() {
        let chat = crate::api::request::ChatCompletionRequest::name();
        let body = br#"{"model": "m", "messages": [{"role": "user", "content": "a\u0000b"}]}"#;
        assert_eq!(param(body, &chat).as_deref(), Some("messages[0].content"));
        let tools = br#"{"model": "m", "messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"x": {"enum": ["ok", "\u0000"]}}}}}]}"#;
        assert_eq!(param(tools, &chat).as_deref(), Some("tools[0].function.parameters.properties.x.enum[1]"));
        let kwargs = br#"{"model": "m", "messages": [], "chat_template_kwargs": {"a\u0000": 1}}"#;
        assert_eq!(param(kwargs, &chat).as_deref(), Some("chat_template_kwargs.a\\u0000"));
        // Ollama's schemas are named as the document names them.
        let ollama = crate::api::ollama::wire::ChatRequest::name();
        let body = br#"{"model": "m", "messages": [{"role": "user", "content": "\u0000"}]}"#;
        assert_eq!(param(body, &ollama).as_deref(), Some("messages[0].content"));
    }

    #[test]
    fn a_nul_in_an_undeclared_member_is_left_alone_as_the_member_is() {
        let chat = crate::api::request::ChatCompletionRequest::name();
        for body in [
            &br#"{"model": "m", "messages": [], "x\u0000": "y"}"#[..],
            br#"{"model": "m", "messages": [], "unknown": {"a": "\u0000"}}"#,
            br#"{"model": "m", "messages": [{"role": "user", "content": "u", "extra": "\u0000"}]}"#,
            // An escaped backslash before `u0000` is text.
            br#"{"model": "m", "messages": [{"role": "user", "content": "C:\\u0000"}]}"#,
        ] {
            assert_eq!(param(body, &chat), None, "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn every_parsed_body_is_a_schema_of_the_document() {
        let schemas = crate::api::docs::request_schemas();
        for name in [
            crate::api::request::ChatCompletionRequest::name(),
            crate::api::request::CompletionRequest::name(),
            crate::api::responses::wire::CreateResponse::name(),
            crate::api::messages::wire::CreateMessage::name(),
            crate::api::messages::wire::CountTokens::name(),
            crate::api::embeddings::EmbeddingRequest::name(),
            crate::api::rerank::RerankRequest::name(),
            crate::api::tokenize::TokenizeRequest::name(),
            crate::api::tokenize::DetokenizeRequest::name(),
            crate::api::ollama::wire::ChatRequest::name(),
            crate::api::ollama::wire::GenerateRequest::name(),
            crate::api::ollama::wire::ShowRequest::name(),
        ] {
            assert!(schemas.contains_key(name.as_ref()), "{name} is not in the document");
        }
    }
}
