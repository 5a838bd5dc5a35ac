//! The route table's document as `nul.rs` walks it: built here, where every
//! route is known, as the daemon serves it.

use super::nul::refuse_in;
use super::route::Routes;
use serde_json::{Map, Value};
use utoipa::ToSchema;

fn schemas() -> Map<String, Value> {
    let (_, openapi) = super::api_routes(&mut Routes::default());
    super::docs::schemas_of(&openapi)
}

fn param(body: &[u8], schema: &str) -> Option<String> {
    refuse_in(body, schema, &schemas()).err().map(|e| e.body.param.unwrap_or_default())
}

#[test]
fn a_nul_in_a_declared_text_is_refused_naming_where() {
    let chat = super::request::ChatCompletionRequest::name();
    let body = br#"{"model": "m", "messages": [{"role": "user", "content": "a\u0000b"}]}"#;
    assert_eq!(param(body, &chat).as_deref(), Some("messages[0].content"));
    let tools = br#"{"model": "m", "messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"x": {"enum": ["ok", "\u0000"]}}}}}]}"#;
    assert_eq!(param(tools, &chat).as_deref(), Some("tools[0].function.parameters.properties.x.enum[1]"));
    let kwargs = br#"{"model": "m", "messages": [], "chat_template_kwargs": {"a\u0000": 1}}"#;
    assert_eq!(param(kwargs, &chat).as_deref(), Some("chat_template_kwargs.a\\u0000"));
    // Ollama's schemas are named as the document names them.
    let ollama = super::ollama::wire::ChatRequest::name();
    let body = br#"{"model": "m", "messages": [{"role": "user", "content": "\u0000"}]}"#;
    assert_eq!(param(body, &ollama).as_deref(), Some("messages[0].content"));
}

#[test]
fn a_nul_in_an_undeclared_member_is_left_alone_as_the_member_is() {
    let chat = super::request::ChatCompletionRequest::name();
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
    let schemas = schemas();
    for name in [
        super::request::ChatCompletionRequest::name(),
        super::request::CompletionRequest::name(),
        super::responses::wire::CreateResponse::name(),
        super::messages::wire::CreateMessage::name(),
        super::messages::wire::CountTokens::name(),
        super::embeddings::EmbeddingRequest::name(),
        super::rerank::RerankRequest::name(),
        super::tokenize::TokenizeRequest::name(),
        super::tokenize::DetokenizeRequest::name(),
        super::ollama::wire::ChatRequest::name(),
        super::ollama::wire::GenerateRequest::name(),
        super::ollama::wire::ShowRequest::name(),
    ] {
        assert!(schemas.contains_key(name.as_ref()), "{name} is not in the document");
    }
}
