//! The rules validation holds that join fields or depend on a field's
//! value, written into the OpenAPI document as JSON Schema 2020-12 keywords
//! (`if`/`then`, `const`, per-type content blocks) that utoipa's model has
//! no field for. Each rule names the check it mirrors, so the two are
//! changed together; `tests/schemathesis.rs` sends what the document allows.

use serde_json::{json, Value};

/// Adds the rules to the serialised document's component schemas: a
/// keyword the schema has already is merged (`allOf` items appended,
/// `properties` entries replaced one by one).
pub fn add(doc: &mut Value) {
    let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) else { return };
    for (name, rules) in rules() {
        let Some(schema) = schemas.get_mut(name).and_then(Value::as_object_mut) else {
            tracing::error!(schema = name, "the OpenAPI document has no such schema: its rules are not stated");
            continue;
        };
        let Value::Object(rules) = rules else { continue };
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
}

/// Present and not null.
fn given(field: &str) -> Value {
    json!({"required": [field], "properties": {field: {"not": {"type": "null"}}}})
}

/// A `tool_choice` matching `choice` needs at least one tool.
fn needs_tools(choice: Value) -> Value {
    json!({
        "if": {"required": ["tool_choice"], "properties": {"tool_choice": choice}},
        "then": {"required": ["tools"], "properties": {"tools": {"type": "array", "minItems": 1}}},
    })
}

/// (schema name, keywords to add to it).
fn rules() -> Vec<(&'static str, Value)> {
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
            "input": {"type": "object"},
        },
    });
    let thinking = json!({
        "type": "object", "required": ["type", "thinking"],
        "properties": {"type": {"const": "thinking"}, "thinking": {"type": "string"}},
    });
    // OpenAI's rule for a function's name.
    let tool_name = json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"});
    let function_tools = json!({"type": ["array", "null"], "items": {
        "type": "object", "required": ["type", "function"],
        "properties": {"type": {"const": "function"}, "function": {
            "type": "object", "required": ["name"],
            "properties": {"name": tool_name, "description": {"type": "string"}, "parameters": {"type": "object"}},
        }},
    }});
    // A Responses input's text part.
    let text_part = json!({
        "type": "object", "required": ["type", "text"],
        "properties": {"type": {"enum": ["input_text", "output_text", "text"]}, "text": {"type": "string"}},
    });
    let redacted =
        json!({"type": "object", "required": ["type"], "properties": {"type": {"const": "redacted_thinking"}}});
    vec![
        // request/convert.rs `to_message`: a `tool` message needs
        // `tool_call_id`; only `assistant` messages carry `tool_calls`;
        // `content` may be absent or null only beside tool calls; only a
        // `user` message carries images.
        (
            "ChatMessage",
            json!({"allOf": [
                // `to_tool_call`: each call's id, name and arguments (JSON text or an object).
                {"properties": {"tool_calls": {"items": {
                    "type": "object", "required": ["id", "function"],
                    "properties": {
                        "id": {"type": "string"},
                        "type": {"const": "function"},
                        "function": {"type": "object", "required": ["name", "arguments"], "properties": {
                            "name": {"type": "string"},
                            "arguments": {"type": ["string", "object"]},
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
            "Common",
            json!({"if": given("stream_options"),
                   "then": {"required": ["stream"], "properties": {"stream": {"const": true}}}}),
        ),
        // messages/convert.rs `add_message`: the blocks each role may carry.
        (
            "InMessage",
            json!({"allOf": [
                {"if": {"properties": {"role": {"const": "user"}}},
                 "then": {"properties": {"content": text_or_blocks(json!({"oneOf": [text_block, tool_result]}))}}},
                {"if": {"properties": {"role": {"const": "assistant"}}},
                 "then": {"properties": {"content": text_or_blocks(json!({"oneOf": [text_block, tool_use, thinking, redacted]}))}}},
            ]}),
        ),
        // request/convert.rs `validate_tools` and `tool_choice`: function
        // tools named as OpenAI allows (that names are unique is checked, not
        // stated); `tool_choice` one of its shapes, `required` or a function
        // only with tools (that the function is one of them is checked, not stated).
        (
            "ChatCompletionRequest",
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
        // Ollama's chat takes the same tools.
        ("OllamaChatRequest", json!({"properties": {"tools": function_tools}})),
        // ollama/convert.rs `generate`: a `raw` prompt has no template to place images in.
        (
            "OllamaGenerateRequest",
            json!({"allOf": [{
                "if": {"required": ["raw"], "properties": {"raw": {"const": true}}},
                "then": {"properties": {"images": {"oneOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}}},
            }]}),
        ),
        // request/convert.rs `to_message`: a part is text or an image, and
        // only a user message carries images.
        (
            "ContentPart",
            json!({"allOf": [
                {"properties": {"type": {"enum": ["text", "image_url"]}}},
                {"if": {"properties": {"type": {"const": "text"}}}, "then": given("text")},
                {"if": {"properties": {"type": {"const": "image_url"}}}, "then": given("image_url")},
            ]}),
        ),
        // ollama/embed.rs: several inputs, none empty (one empty input only loads the model).
        ("OllamaEmbedInput", json!({"allOf": [{"if": {"type": "array"}, "then": {"items": {"minLength": 1}}}]})),
        // responses/convert.rs `tool` and `tool_choice`: the same, flat.
        (
            "CreateResponse",
            json!({
                "properties": {
                    "tools": {"type": ["array", "null"], "items": {
                        "type": "object", "required": ["type", "name"],
                        "properties": {
                            "type": {"const": "function"}, "name": tool_name,
                            "description": {"type": ["string", "null"]}, "parameters": {"type": ["object", "null"]},
                        },
                    }},
                    "tool_choice": {"oneOf": [
                        {"type": "null"},
                        {"enum": ["none", "auto", "required"]},
                        {"type": "object", "required": ["type", "name"],
                         "properties": {"type": {"const": "function"}, "name": {"type": "string"}}},
                    ]},
                },
                "allOf": [needs_tools(json!({"anyOf": [{"const": "required"}, {"type": "object"}]}))],
            }),
        ),
        // messages/convert.rs: only custom tools (no server tool's `type`), named as above.
        (
            "Tool",
            json!({"properties": {"type": {"oneOf": [{"type": "null"}, {"const": "custom"}]}, "name": tool_name}}),
        ),
        // responses/convert.rs `add_item`: the item kinds (none: a message),
        // a message's roles.
        (
            "InputItem",
            json!({"allOf": [
                {"properties": {"type": {"enum": ["message", "function_call", "function_call_output", "reasoning"]}}},
                {"if": {"properties": {"type": {"const": "message"}}},
                 "then": {"required": ["role", "content"], "properties": {
                     "role": {"enum": ["user", "assistant", "system", "developer"]},
                     "content": text_or_blocks(text_part.clone()),
                 }}},
                {"if": {"required": ["type"], "properties": {"type": {"const": "function_call"}}},
                 "then": {"required": ["call_id", "name", "arguments"],
                          "properties": {"call_id": {"type": "string"}, "name": {"type": "string"}, "arguments": {"type": "string"}}}},
                {"if": {"required": ["type"], "properties": {"type": {"const": "function_call_output"}}},
                 "then": {"required": ["call_id", "output"],
                          "properties": {"call_id": {"type": "string"}, "output": text_or_blocks(text_part)}}},
            ]}),
        ),
        // messages/convert.rs `text`, `tool_choice` and the thinking switch:
        // the system prompt is text or text blocks; `tool_choice` is one of
        // four shapes; `thinking.type` enabled or disabled.
        (
            "Conversation",
            json!({
                "allOf": [needs_tools(json!({"type": "object", "properties": {"type": {"enum": ["any", "tool"]}}}))],
                "properties": {
                    "messages": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/InMessage"}},
                    "system": {"oneOf": [{"type": "null"}, text_or_blocks(text_block)]},
                    "thinking": {"oneOf": [
                        {"type": "null"},
                        {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["enabled", "disabled"]}}},
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
