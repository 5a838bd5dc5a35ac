//! NUL characters in request bodies. The runtime takes its texts as C
//! strings, which end at a NUL, and rkllmd will not cut one short or drop
//! what follows: a body is refused when a text the OpenAPI document
//! declares holds U+0000. Every text a handler reads is declared, and the
//! document says "no NUL" of each ([`say_no_nul`], here: a pattern on every
//! string, `NoNul` where any value is taken). A member the document does
//! not declare (an unknown field) is ignored by the handlers and may hold
//! anything. The check walks the body along the document itself, so the
//! two cannot disagree.

use super::error::ApiError;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::sync::Arc;

const SCHEMAS: &str = "#/components/schemas/";

/// The served document, as text, where [`refuse`] reads which members of a
/// body are declared: set by the first router `docs.rs` builds (the main
/// one, which the daemon builds before it serves), so that this walker does
/// not import the document's maker. Which members exist does not depend on
/// the configuration (it changes statuses and ranges). Text (~100 KB), not
/// a tree (~0.9 MB resident): the schemas are read from it only for a body
/// that holds a NUL, which no client has a reason to send.
static DOCUMENT: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();

/// Sets the document walked, once (later routers serve the same members).
pub fn walk_document(text: impl FnOnce() -> Arc<str>) {
    DOCUMENT.get_or_init(text);
}

/// The component schemas of the served document (empty before a router is
/// built, or if the text were not JSON: then [`refuse`] fails closed).
fn request_schemas() -> Map<String, Value> {
    let doc = DOCUMENT.get().and_then(|text| serde_json::from_str(text).ok());
    doc.map(component_schemas).unwrap_or_default()
}

/// The component schemas of an OpenAPI document.
pub fn component_schemas(mut doc: Value) -> Map<String, Value> {
    match doc.pointer_mut("/components/schemas").map(Value::take) {
        Some(Value::Object(schemas)) => schemas,
        _ => Map::new(),
    }
}

/// Refuses a body whose texts, where `schema` (a component of the served
/// document) declares them, hold a NUL, naming the first such text.
pub fn refuse(bytes: &[u8], schema: &str) -> Result<(), ApiError> {
    refuse_along(bytes, schema, || Cow::Owned(request_schemas()))
}

/// [`refuse`] along the component schemas `schemas` (the tests' own tables).
#[cfg(test)]
pub fn refuse_in(bytes: &[u8], schema: &str, schemas: &Map<String, Value>) -> Result<(), ApiError> {
    refuse_along(bytes, schema, || Cow::Borrowed(schemas))
}

/// [`refuse`], the schemas read only for a body that holds a NUL.
fn refuse_along<'a>(
    bytes: &[u8],
    schema: &str,
    schemas: impl FnOnce() -> Cow<'a, Map<String, Value>>,
) -> Result<(), ApiError> {
    // JSON carries a NUL only as the escape `\u0000`.
    if memchr::memmem::find(bytes, br"\u0000").is_none() {
        return Ok(());
    }
    let schemas = schemas();
    let schemas = schemas.as_ref();
    // The typed parse took the body, so it is valid JSON.
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(None, e.to_string()))?;
    // A body type the document does not name (a bug `api/tests.rs` would
    // catch), or no document yet (no router was built), is held to the
    // strictest rule: no NUL in any text or key. The check fails closed.
    let strict: Map<String, Value>;
    let (schemas, root) = match schemas.get(schema) {
        Some(root) => (schemas, root),
        None => {
            tracing::error!(schema, "no schema for this body (the document does not name its type, or no router was built): no NUL is taken anywhere in it");
            let no_nul = NO_NUL_NAME;
            strict = Map::from_iter([(no_nul.to_owned(), no_nul_anything())]);
            (&strict, &strict[no_nul])
        }
    };
    let mut path = String::new();
    let found = Doc(schemas).nul_at(&value, &[root], &mut path);
    if !found {
        // An escaped backslash before `u0000` (text), or a NUL where nothing is declared.
        return Ok(());
    }
    let message = format!("`{path}` contains a NUL character (U+0000), which the runtime cannot take.");
    Err(ApiError::invalid_value(&path, message))
}

/// No text of a request body holds U+0000 ([`refuse`] reads the
/// document to know where), said where each text is declared, so that a
/// generator makes such texts directly: every string schema gets a
/// pattern, and a schema that takes any value becomes `NoNul`, which says
/// it of any JSON value, recursively (objects read whole are `AnyObject`:
/// `rules`). A member a schema does not declare is ignored by the handlers,
/// and may hold anything. Only request schemas — `bodies` and the schemas
/// they refer to: a reply may hold a NUL (`/detokenize` of a token that is one).
pub fn say_no_nul(doc: &mut Value, bodies: &[Cow<'static, str>]) {
    let mut requests = std::collections::BTreeSet::new();
    let mut pending: Vec<String> = bodies.iter().map(|body| body.to_string()).collect();
    while let Some(name) = pending.pop() {
        if let Some(schema) = doc.pointer(&format!("/components/schemas/{name}")).filter(|_| !requests.contains(&name))
        {
            pending.extend(refs(schema));
        }
        requests.insert(name);
    }
    let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) else { return };
    for name in &requests {
        schemas.get_mut(name).into_iter().for_each(no_nul);
    }
    schemas.insert(NO_NUL_NAME.into(), no_nul_anything());
}

/// Any JSON value whose texts and keys hold no NUL (`NoNul`).
fn no_nul_anything() -> Value {
    json!({
        "description": "Any JSON value whose texts and keys hold no NUL character (U+0000): the runtime takes C strings.",
        "anyOf": [
            no_nul_text(),
            {"type": ["number", "boolean", "null"]},
            {"type": "array", "items": {"$ref": NO_NUL}},
            {"type": "object", "propertyNames": no_nul_text(), "additionalProperties": {"$ref": NO_NUL}},
        ],
    })
}

/// The schema of any value without NUL, by name and as a reference.
const NO_NUL_NAME: &str = "NoNul";
const NO_NUL: &str = "#/components/schemas/NoNul";

/// The component schemas `schema` refers to.
fn refs(schema: &Value) -> Vec<String> {
    match schema {
        Value::Object(map) => map
            .iter()
            .flat_map(|(key, value)| match (key.as_str(), value) {
                ("$ref", Value::String(to)) => {
                    to.strip_prefix("#/components/schemas/").map(str::to_owned).into_iter().collect()
                }
                _ => refs(value),
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(refs).collect(),
        _ => Vec::new(),
    }
}

/// A text without NUL.
fn no_nul_text() -> Value {
    json!({"type": "string", "pattern": "^[^\\u0000]*$"})
}

/// Says "no NUL" in `schema` and in the schemas it holds — not in an `if`
/// or a `not`, whose meaning that would turn around.
fn no_nul(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else {
        if *schema == Value::Bool(true) {
            *schema = json!({"$ref": NO_NUL});
        }
        return;
    };
    let annotation =
        |key: &String| matches!(key.as_str(), "description" | "title" | "default" | "examples" | "deprecated");
    if map.keys().all(annotation) {
        // Any value at all.
        map.insert("$ref".into(), json!(NO_NUL));
        return;
    }
    let types: Vec<String> = match map.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let has = |key: &str| map.contains_key(key);
    if types.iter().any(|t| t == "string") && !has("pattern") && !has("enum") && !has("const") {
        map.insert("pattern".into(), no_nul_text()["pattern"].clone());
    }
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            "items" | "additionalProperties" | "then" | "else" => no_nul(value),
            "properties" => value.as_object_mut().into_iter().flat_map(|m| m.values_mut()).for_each(no_nul),
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                value.as_array_mut().into_iter().flatten().for_each(no_nul);
            }
            _ => {}
        }
    }
}

/// An object read whole, whose keys and values hold no NUL (`AnyObject`).
pub fn any_value_object() -> Value {
    json!({"propertyNames": no_nul_text(), "additionalProperties": {"$ref": NO_NUL}})
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
    use super::*;

    #[test]
    fn request_texts_say_no_nul_and_replies_do_not() {
        let mut doc = json!({
            "components": {"schemas": {
                "Ask": {
                    "type": "object",
                    "properties": {
                        "text": {"type": ["string", "null"]},
                        "role": {"type": "string", "enum": ["user"]},
                        "name": {"type": "string", "pattern": "^[a-z]+$"},
                        "extra": {"description": "any value"},
                        "parts": {"type": "array", "items": {"$ref": "#/components/schemas/Part"}},
                    },
                    "allOf": [{"if": {"properties": {"text": {"type": "string"}}}, "then": {"properties": {"role": {"type": "string"}}}}],
                },
                "Part": {"oneOf": [{"type": "string"}, true]},
                "Reply": {"type": "object", "properties": {"content": {"type": "string"}}},
            }},
        });
        // A route takes `Ask` and answers `Reply`.
        say_no_nul(&mut doc, &["Ask".into()]);
        let schema = |pointer: &str| doc.pointer(&format!("/components/schemas{pointer}")).cloned().unwrap();
        let pattern = json!("^[^\\u0000]*$");
        assert_eq!(schema("/Ask/properties/text/pattern"), pattern);
        assert_eq!(schema("/Ask/properties/name/pattern"), json!("^[a-z]+$"), "a pattern of its own is kept");
        assert!(schema("/Ask/properties/role").get("pattern").is_none(), "an enum says it already");
        assert_eq!(schema("/Ask/properties/extra/$ref"), json!(NO_NUL));
        assert_eq!(schema("/Part/oneOf/0/pattern"), pattern, "reached through a reference");
        assert_eq!(schema("/Part/oneOf/1"), json!({"$ref": NO_NUL}));
        assert_eq!(schema("/Ask/allOf/0/then/properties/role/pattern"), pattern);
        assert!(schema("/Ask/allOf/0/if/properties/text").get("pattern").is_none(), "a condition keeps its meaning");
        assert!(schema("/Reply/properties/content").get("pattern").is_none(), "a reply may hold a NUL");
        assert!(schema("/NoNul/anyOf").is_array());
    }
}
