//! The rules validation holds that join fields or depend on a field's
//! value, written into the OpenAPI document as JSON Schema 2020-12 keywords
//! (`if`/`then`, `const`, per-type content blocks) that utoipa's model has
//! no field for; the one rule over every text of a body (`NoNul`) is
//! written by `nul.rs`, beside the check that reads it.
//! Each rule names the check it mirrors, so the two are changed together;
//! `tests/schemathesis.rs` sends what the document allows.

use super::messages::wire as messages;
use super::nul;
use super::ollama::wire as ollama;
use super::request::{AnyObject, ChatCompletionRequest, ChatMessage, Common, ContentPart, MAX_INPUTS, MAX_TOOLS};
use super::responses::wire as responses;
use serde_json::{json, Value};
use std::borrow::Cow;
use utoipa::ToSchema;

/// Adds the rules to the serialised document's component schemas: a
/// keyword the schema has already is merged (`allOf` items appended,
/// `properties` entries replaced one by one); and "no NUL" to `bodies`,
/// the request bodies the routes parse, and every schema they hold.
pub fn add(doc: &mut Value, bodies: &[Cow<'static, str>]) {
    let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) else { return };
    for (name, rules) in rules() {
        merge(schemas, &name, rules);
    }
    nul::say_no_nul(doc, bodies);
}

/// Merges `rules` into the component schema `name` (see [`add`]).
pub fn merge(schemas: &mut serde_json::Map<String, Value>, name: &str, rules: Value) {
    let Some(schema) = schemas.get_mut(name).and_then(Value::as_object_mut) else {
        tracing::error!(schema = name, "the OpenAPI document has no such schema: its rules are not stated");
        return;
    };
    let Value::Object(rules) = rules else { return };
    for (keyword, value) in rules {
        match (schema.get_mut(&keyword), value) {
            (Some(Value::Array(have)), Value::Array(more)) => have.extend(more),
            (Some(Value::Object(have)), Value::Object(more)) => have.extend(more),
            (_, value) => {
                schema.insert(keyword, value);
            }
        }
    }
}

/// A reference to the schema of `T`.
fn reference<T: ToSchema>() -> Value {
    json!({"$ref": format!("#/components/schemas/{}", T::name())})
}

/// An object read whole (`request::AnyObject`).
fn any_object() -> Value {
    reference::<AnyObject>()
}

/// Present and not null.
fn given(field: &str) -> Value {
    json!({"required": [field], "properties": {field: {"not": {"type": "null"}}}})
}

/// A `tool_choice` matching `choice` needs at least one tool.
fn needs_tools(choice: Value) -> Value {
    needs_offered(choice, json!({"type": "array", "minItems": 1}))
}

/// A `tool_choice` matching `choice` needs `tools` as `offered` states.
fn needs_offered(choice: Value, offered: Value) -> Value {
    json!({
        "if": {"required": ["tool_choice"], "properties": {"tool_choice": choice}},
        "then": {"required": ["tools"], "properties": {"tools": offered}},
    })
}

/// (schema name, keywords to add to it).
fn rules() -> Vec<(Cow<'static, str>, Value)> {
    let text_block = json!({
        "type": "object", "required": ["type", "text"],
        "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    });
    let text_or_blocks = |blocks: Value| json!({"oneOf": [{"type": "string"}, {"type": "array", "items": blocks}]});
    let tool_result = json!({
        "type": "object", "required": ["type", "tool_use_id"],
        "properties": {
            "type": {"const": "tool_result"},
            "tool_use_id": {"type": "string"},
            "content": text_or_blocks(text_block.clone()),
        },
    });
    let tool_use = json!({
        "type": "object", "required": ["type", "id", "name"],
        "properties": {
            "type": {"const": "tool_use"}, "id": {"type": "string"}, "name": {"type": "string"},
            "input": any_object(),
        },
    });
    let thinking = json!({
        "type": "object", "required": ["type", "thinking"],
        "properties": {"type": {"const": "thinking"}, "thinking": {"type": "string"}},
    });
    // OpenAI's rule for a function's name.
    let tool_name = json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"});
    // At most MAX_TOOLS of them (`request::size`).
    let function_tools = json!({"type": ["array", "null"], "maxItems": MAX_TOOLS, "items": {
        "type": "object", "required": ["type", "function"],
        "properties": {"type": {"const": "function"}, "function": {
            "type": "object", "required": ["name"],
            "properties": {"name": tool_name, "description": {"type": "string"}, "parameters": any_object()},
        }},
    }});
    // A Responses tool the model can call: a function (its type absent or
    // null) or a custom tool, named as a chat function; only a function's
    // `parameters` are read.
    let callable = json!({"anyOf": [
        {"not": {"required": ["type"]}},
        {"properties": {"type": {"enum": ["function", "custom", null]}}},
    ]});
    let callable_tool = json!({"allOf": [
        {"if": callable.clone(), "then": {"required": ["name"], "properties": {
            "name": tool_name.clone(), "description": {"type": ["string", "null"]},
        }}},
        {"if": {"anyOf": [{"not": {"required": ["type"]}}, {"properties": {"type": {"enum": ["function", null]}}}]},
         "then": {"properties": {"parameters": {"oneOf": [{"type": "null"}, any_object()]}}}},
    ]});
    // A Responses input's text part.
    let text_part = json!({
        "type": "object", "required": ["type", "text"],
        "properties": {"type": {"enum": ["input_text", "output_text", "text"]}, "text": {"type": "string"}},
    });
    let redacted =
        json!({"type": "object", "required": ["type"], "properties": {"type": {"const": "redacted_thinking"}}});
    vec![
        // `request::AnyObject`: an object read whole, whose keys and texts reach the prompt.
        (AnyObject::name(), nul::any_value_object()),
        // request/convert.rs `to_message`: a `tool` message needs
        // `tool_call_id`; only `assistant` messages carry `tool_calls`;
        // `content` may be absent or null only beside tool calls; only a
        // `user` message carries images.
        (
            ChatMessage::name(),
            json!({"allOf": [
                // `to_tool_call`: each call's id, name and arguments (JSON text or an object).
                {"properties": {"tool_calls": {"items": {
                    "type": "object", "required": ["id", "function"],
                    "properties": {
                        "id": {"type": "string"},
                        "type": {"const": "function"},
                        "function": {"type": "object", "required": ["name", "arguments"], "properties": {
                            "name": {"type": "string"},
                            "arguments": {"oneOf": [{"type": "string"}, any_object()]},
                        }},
                    },
                }}}},
                {"if": {"properties": {"role": {"not": {"const": "user"}}}},
                 "then": {"properties": {"content": {"oneOf": [
                     {"type": "null"}, {"type": "string"},
                     {"type": "array", "items": {"properties": {"type": {"const": "text"}}}},
                 ]}}}},
                {"if": {"properties": {"role": {"const": "tool"}}}, "then": given("tool_call_id")},
                {"if": given("tool_calls"), "then": {"properties": {"role": {"const": "assistant"}}}},
                {"if": {"not": given("content")},
                 "then": {"required": ["tool_calls"], "properties": {"tool_calls": {"type": "array", "minItems": 1}}}},
            ]}),
        ),
        // request/mod.rs `Common::validate`: `stream_options` only with `stream: true`.
        (
            Common::name(),
            json!({"if": given("stream_options"),
                   "then": {"required": ["stream"], "properties": {"stream": {"const": true}}}}),
        ),
        // messages/convert.rs `add_message`: the blocks each role may carry.
        (
            messages::InMessage::name(),
            json!({"allOf": [
                {"if": {"properties": {"role": {"const": "user"}}},
                 "then": {"properties": {"content": text_or_blocks(json!({"oneOf": [text_block.clone(), tool_result]}))}}},
                {"if": {"properties": {"role": {"const": "assistant"}}},
                 "then": {"properties": {"content": text_or_blocks(json!({"oneOf": [text_block.clone(), tool_use, thinking, redacted]}))}}},
                {"if": {"properties": {"role": {"const": "system"}}},
                 "then": {"properties": {"content": text_or_blocks(text_block.clone())}}},
            ]}),
        ),
        // request/convert.rs `validate_tools` and `tool_choice`: function
        // tools named as OpenAI allows (that names are unique is checked, not
        // stated); `tool_choice` one of its shapes, `required` or a function
        // only with tools (that the function is one of them is checked, not stated).
        (
            ChatCompletionRequest::name(),
            json!({
                "properties": {
                    "tools": function_tools.clone(),
                    "tool_choice": {"oneOf": [
                        {"type": "null"},
                        {"enum": ["none", "auto", "required"]},
                        {"type": "object", "required": ["type", "function"], "properties": {
                            "type": {"const": "function"},
                            "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
                        }},
                    ]},
                },
                "allOf": [needs_tools(json!({"anyOf": [{"const": "required"}, {"type": "object"}]}))],
            }),
        ),
        // Ollama's chat takes the same tools, and its messages become chat
        // messages (ollama/convert.rs `message`), held to the same roles.
        (ollama::ChatRequest::name(), json!({"properties": {"tools": function_tools}})),
        // ollama/convert.rs `message` → request/convert.rs `to_tool_call`: JSON text or an object.
        (
            ollama::InFunction::name(),
            json!({"properties": {"arguments": {"oneOf": [{"type": "string"}, any_object()]}}}),
        ),
        (
            ollama::InMessage::name(),
            json!({"allOf": [
                {"if": given("tool_calls"), "then": {"properties": {"role": {"const": "assistant"}}}},
                {"if": {"required": ["images"], "properties": {"images": {"type": "array", "minItems": 1}}},
                 "then": {"properties": {"role": {"const": "user"}}}},
            ]}),
        ),
        // ollama/convert.rs `generate`: a `raw` prompt has no template to place images in.
        (
            ollama::GenerateRequest::name(),
            json!({"allOf": [{
                "if": {"required": ["raw"], "properties": {"raw": {"const": true}}},
                "then": {"properties": {"images": {"oneOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}}},
            }]}),
        ),
        // request/convert.rs `to_message`: a part is text or an image, and
        // only a user message carries images.
        (
            ContentPart::name(),
            json!({"allOf": [
                {"properties": {"type": {"enum": ["text", "image_url"]}}},
                {"if": {"properties": {"type": {"const": "text"}}}, "then": given("text")},
                {"if": {"properties": {"type": {"const": "image_url"}}}, "then": given("image_url")},
            ]}),
        ),
        // ollama/embed.rs: several inputs, none empty (one empty input only
        // loads the model), at most MAX_INPUTS (`embeddings::check_count`).
        (
            ollama::EmbedInput::name(),
            json!({"allOf": [{"if": {"type": "array"}, "then": {"items": {"minLength": 1}, "maxItems": MAX_INPUTS}}]}),
        ),
        // responses/tools.rs `convert` and `choice`: function and custom tools
        // (a tool without a type is a function) as on chat, flat; a namespace
        // holds such tools; any other type is left out, whatever it holds.
        // `tool_choice` `required` or naming a tool needs one the model can call.
        (
            responses::CreateResponse::name(),
            json!({
                "properties": {
                    "tools": {"type": ["array", "null"], "maxItems": MAX_TOOLS, "items": {
                        "type": "object",
                        "allOf": [callable_tool.clone(), {
                            "if": {"required": ["type"], "properties": {"type": {"const": "namespace"}}},
                            "then": {"required": ["name", "tools"], "properties": {
                                "name": tool_name,
                                "tools": {"type": "array", "items": {"type": "object", "allOf": [callable_tool]}},
                            }},
                        }],
                    }},
                    "tool_choice": {"oneOf": [
                        {"type": "null"},
                        {"enum": ["none", "auto", "required"]},
                        {"type": "object", "required": ["type", "name"], "properties": {
                            "type": {"enum": ["function", "custom"]}, "name": {"type": "string"},
                            "namespace": {"type": ["string", "null"]},
                        }},
                    ]},
                },
                "allOf": [
                    needs_offered(json!({"anyOf": [{"const": "required"}, {"type": "object"}]}), json!({
                        "type": "array", "contains": {"type": "object", "anyOf": [callable.clone(), {
                            "required": ["type", "tools"],
                            "properties": {"type": {"const": "namespace"}, "tools": {"type": "array", "contains": callable}},
                        }]},
                    })),
                    // `chat_request`: without `instructions`, `input` holds an item that is not reasoning.
                    {"if": {"properties": {"instructions": {"type": "null"}}},
                     "then": {"properties": {"input": {"anyOf": [
                         {"type": "string"},
                         {"contains": {"not": {"required": ["type"], "properties": {"type": {"const": "reasoning"}}}}},
                     ]}}}},
                ],
            }),
        ),
        // messages/convert.rs: only custom tools (no server tool's `type`), named as above.
        (
            messages::Tool::name(),
            json!({"properties": {"type": {"oneOf": [{"type": "null"}, {"const": "custom"}]}, "name": tool_name}}),
        ),
        // responses/convert.rs `add_item`: the item kinds (none: a message),
        // a message's roles.
        (
            responses::InputItem::name(),
            json!({"allOf": [
                {"properties": {"type": {"enum": ["message", "function_call", "function_call_output",
                    "custom_tool_call", "custom_tool_call_output", "reasoning"]}}},
                {"if": {"properties": {"type": {"const": "message"}}},
                 "then": {"required": ["role", "content"], "properties": {
                     "role": {"enum": ["user", "assistant", "system", "developer"]},
                     "content": text_or_blocks(text_part.clone()),
                 }}},
                {"if": {"required": ["type"], "properties": {"type": {"const": "function_call"}}},
                 "then": {"required": ["call_id", "name", "arguments"],
                          "properties": {"call_id": {"type": "string"}, "name": {"type": "string"}, "arguments": {"type": "string"},
                                         "namespace": {"type": ["string", "null"]}}}},
                {"if": {"required": ["type"], "properties": {"type": {"const": "custom_tool_call"}}},
                 "then": {"required": ["call_id", "name", "input"],
                          "properties": {"call_id": {"type": "string"}, "name": {"type": "string"}, "input": {"type": "string"},
                                         "namespace": {"type": ["string", "null"]}}}},
                {"if": {"required": ["type"], "properties": {"type": {"enum": ["function_call_output", "custom_tool_call_output"]}}},
                 "then": {"required": ["call_id", "output"],
                          "properties": {"call_id": {"type": "string"}, "output": text_or_blocks(text_part)}}},
            ]}),
        ),
        // messages/convert.rs `text`, `tool_choice` and the thinking switch:
        // the system prompt is text or text blocks; `tool_choice` is one of
        // four shapes; `thinking.type` enabled, disabled or adaptive;
        // `output_config.effort` one of Anthropic's.
        (
            messages::Conversation::name(),
            json!({
                "allOf": [needs_tools(json!({"type": "object", "properties": {"type": {"enum": ["any", "tool"]}}}))],
                "properties": {
                    "messages": {"type": "array", "minItems": 1, "items": reference::<messages::InMessage>()},
                    "system": {"oneOf": [{"type": "null"}, text_or_blocks(text_block)]},
                    "thinking": {"oneOf": [
                        {"type": "null"},
                        {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["enabled", "disabled", "adaptive"]}}},
                    ]},
                    "output_config": {"oneOf": [
                        {"type": "null"},
                        {"type": "object", "properties": {"effort": {"enum": [null, "low", "medium", "high", "max"]}}},
                    ]},
                    "tool_choice": {"oneOf": [
                        {"type": "null"},
                        {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["auto", "any", "none"]}}},
                        {"type": "object", "required": ["type", "name"],
                         "properties": {"type": {"const": "tool"}, "name": {"type": "string"}}},
                    ]},
                },
            }),
        ),
    ]
}
