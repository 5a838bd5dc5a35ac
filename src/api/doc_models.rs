//! The served models' own bounds in the OpenAPI document, added each time
//! it is served: one document for every model cannot say that this model
//! takes no images, that its token ids stop at its vocabulary, or that its
//! embeddings have so many dimensions. Each bound is a JSON Schema `if` on
//! the request's `model` (every name that resolves to it) with a `then`
//! that mirrors a check:
//! - no vision encoder: no image (`request::images::attach`);
//! - a tokenizer.json: token ids below its vocabulary (`/detokenize`,
//!   `/v1/embeddings`' token-id input), and `/detokenize` at most as many
//!   ids as its context allows (`request::most_token_ids`);
//! - an embedding run seen: `dimensions` only as its width (`embeddings::vectors`).
//!
//! What a model has not shown yet (the width before its first embedding,
//! the vocabulary before its first load) is not stated, and the check alone
//! holds it.

use super::embeddings::EmbeddingRequest;
use super::ollama::wire as ollama;
use super::request::ChatCompletionRequest;
use super::tokenize::DetokenizeRequest;
use crate::registry::Registry;
use serde_json::{json, Value};
use std::borrow::Cow;
use utoipa::ToSchema;

/// What the document states of one registered model.
pub struct Served {
    /// Every name a request may give it: its id, `ID:latest`, `ID:ADAPTER`.
    names: Vec<String>,
    /// The model a request without `model` gets (`/tokenize`, `/detokenize`).
    default: bool,
    images: bool,
    vocab: Option<usize>,
    /// `max_context_len`, known from the configuration.
    context: usize,
    embedding_width: Option<usize>,
}

/// The registry's models as the document states them.
pub fn served(registry: &Registry) -> Vec<Served> {
    let default = registry.default_id();
    registry
        .statuses()
        .iter()
        .map(|status| {
            let spec = &status.spec;
            Served {
                names: Registry::names(spec),
                default: default.as_ref() == Some(&spec.id),
                images: spec.engine.vision.is_some(),
                vocab: spec.learned.vocab.get().copied(),
                context: spec.engine.limits.max_context_len as usize,
                embedding_width: spec.learned.embedding_width.get().copied(),
            }
        })
        .collect()
}

/// Adds each model's bounds to the serialised document's request schemas.
pub fn add(doc: &mut Value, models: &[Served]) {
    let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) else { return };
    for model in models {
        // Without `model` (or with `null`), a route that takes none serves
        // the default model; where `model` is required, both are refused anyway.
        let mut names: Vec<Value> = model.names.iter().map(|n| json!(n)).collect();
        let named = match model.default {
            true => {
                names.push(Value::Null);
                json!({"properties": {"model": {"enum": names}}})
            }
            false => json!({"required": ["model"], "properties": {"model": {"enum": names}}}),
        };
        for (schema, then) in bounds(model) {
            super::schema_rules::merge(schemas, &schema, json!({"allOf": [{"if": named, "then": then}]}));
        }
    }
}

/// Which request schemas each of the model's bounds narrows, and how.
fn bounds(model: &Served) -> Vec<(Cow<'static, str>, Value)> {
    let mut bounds = Vec::new();
    if !model.images {
        bounds.extend([
            // A content part's type: text only.
            (
                ChatCompletionRequest::name(),
                json!({"properties": {"messages": {"items": {"properties": {"content":
                    {"items": {"properties": {"type": {"const": "text"}}}}}}}}}),
            ),
            (
                ollama::ChatRequest::name(),
                json!({"properties": {"messages": {"items": {"properties": {"images": {"maxItems": 0}}}}}}),
            ),
            (ollama::GenerateRequest::name(), json!({"properties": {"images": {"maxItems": 0}}})),
        ]);
    }
    if let Some(last) = model.vocab.and_then(|v| v.checked_sub(1)) {
        bounds.extend([
            (
                DetokenizeRequest::name(),
                json!({"properties": {"tokens": {
                    "maxItems": crate::api::request::most_token_ids(model.context), "items": {"maximum": last},
                }}}),
            ),
            // An array of ids, or of arrays of them (`maximum` leaves texts alone).
            (
                EmbeddingRequest::name(),
                json!({"properties": {"input": {"items": {"maximum": last, "items": {"maximum": last}}}}}),
            ),
        ]);
    }
    if let Some(width) = model.embedding_width {
        // `minimum`/`maximum` leave `null` (no `dimensions`) allowed.
        let only = json!({"properties": {"dimensions": {"minimum": width, "maximum": width}}});
        bounds.extend([(EmbeddingRequest::name(), only.clone()), (ollama::EmbedRequest::name(), only)]);
    }
    bounds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(images: bool, vocab: Option<usize>, embedding_width: Option<usize>) -> Served {
        Served {
            names: vec!["m".into(), "m:latest".into()],
            default: true,
            images,
            vocab,
            context: 16,
            embedding_width,
        }
    }

    fn doc() -> Value {
        let names = [
            ChatCompletionRequest::name(),
            ollama::ChatRequest::name(),
            ollama::GenerateRequest::name(),
            DetokenizeRequest::name(),
            ollama::EmbedRequest::name(),
        ];
        let mut schemas: serde_json::Map<String, Value> =
            names.iter().map(|n| (n.to_string(), json!({"type": "object"}))).collect();
        schemas.insert(EmbeddingRequest::name().into(), json!({"allOf": [{"required": ["input"]}]}));
        json!({"components": {"schemas": schemas}})
    }

    fn rules(doc: &Value, schema: Cow<str>) -> Vec<Value> {
        doc["components"]["schemas"][schema.as_ref()]["allOf"].as_array().cloned().unwrap_or_default()
    }

    #[test]
    fn a_model_states_only_what_it_has_shown() {
        let mut d = doc();
        add(&mut d, &[model(true, None, None)]);
        assert_eq!(d, doc(), "a vision model that has shown nothing narrows nothing");

        add(&mut d, &[model(false, Some(100), Some(256))]);
        let chat = rules(&d, ChatCompletionRequest::name());
        assert_eq!(chat.len(), 1);
        assert_eq!(chat[0]["if"], json!({"properties": {"model": {"enum": ["m", "m:latest", null]}}}));
        let tokens = &rules(&d, DetokenizeRequest::name())[0]["then"]["properties"]["tokens"];
        assert_eq!((&tokens["items"]["maximum"], &tokens["maxItems"]), (&json!(99), &json!(16 * 32)));
        // The schema's own `allOf` item stays first; the bounds follow.
        let embed = rules(&d, EmbeddingRequest::name());
        assert_eq!(embed[0], json!({"required": ["input"]}));
        assert_eq!(embed.len(), 3, "vocabulary and width: {embed:?}");
        assert_eq!(embed[2]["then"]["properties"]["dimensions"], json!({"minimum": 256, "maximum": 256}));
    }

    #[test]
    fn a_model_other_than_the_default_is_matched_only_when_named() {
        let mut d = doc();
        add(&mut d, &[Served { default: false, ..model(false, None, None) }]);
        assert_eq!(rules(&d, ollama::GenerateRequest::name())[0]["if"]["required"], json!(["model"]));
    }
}
