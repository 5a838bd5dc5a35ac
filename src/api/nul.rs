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

/// The document's component schemas as served, where [`refuse`] reads which
/// members of a body are declared: set by the first router `docs.rs` builds
/// (the main one, which the daemon builds before it serves), so that this
/// walker does not import the document's maker. Which members exist does not
/// depend on the configuration (it changes statuses and ranges).
static DOCUMENT_SCHEMAS: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();

/// Sets the schemas walked, once (later routers serve the same members).
pub fn walk_schemas(schemas: impl FnOnce() -> Map<String, Value>) {
    DOCUMENT_SCHEMAS.get_or_init(schemas);
}

/// The served document's component schemas (empty before a router is built).
pub fn request_schemas() -> &'static Map<String, Value> {
    static NONE: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    DOCUMENT_SCHEMAS.get().unwrap_or_else(|| NONE.get_or_init(Map::new))
}

/// Refuses a body whose texts, where `schema` (a component of the served
/// document) declares them, hold a NUL, naming the first such text.
pub fn refuse(bytes: &[u8], schema: &str) -> Result<(), ApiError> {
    refuse_in(bytes, schema, request_schemas())
}

/// [`refuse`] along the component schemas `schemas`.
pub fn refuse_in(bytes: &[u8], schema: &str, schemas: &Map<String, Value>) -> Result<(), ApiError> {
    // JSON carries a NUL only as the escape `\u0000`.
    if memchr::memmem::find(bytes, br"\u0000").is_none() {
        return Ok(());
    }
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
            let no_nul = super::schema_rules::NO_NUL_NAME;
            strict = Map::from_iter([(no_nul.to_owned(), super::schema_rules::no_nul_anything())]);
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
