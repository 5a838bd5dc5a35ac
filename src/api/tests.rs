//! The route tables as the daemon builds them: the document `nul.rs` walks,
//! the body types the routes name, and the key on exactly the routes
//! described as guarded.

use super::nul::refuse_in;
use super::route::Routes;
use super::state::{AppState, Settings};
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Map, Value};
use tower::ServiceExt;
use utoipa::ToSchema;

fn schemas() -> Map<String, Value> {
    let mut table = Routes::default();
    let (_, openapi) = super::api_routes(&mut table);
    super::docs::schemas_of(&openapi, &table)
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

/// Without the document (no router built yet) or without the body's
/// schema in it, the check fails closed: no NUL anywhere, keys included.
#[test]
fn without_its_schema_a_body_takes_no_nul_anywhere() {
    let chat = super::request::ChatCompletionRequest::name();
    let none = Map::new();
    for (body, at) in [
        (&br#"{"model": "m", "messages": [], "unknown": {"a": ["\u0000"]}}"#[..], "unknown.a[0]"),
        (br#"{"model": "m", "messages": [], "x\u0000": "y"}"#, "x\\u0000"),
    ] {
        let e = refuse_in(body, &chat, &none).expect_err(&String::from_utf8_lossy(body));
        assert_eq!(e.body.param.as_deref(), Some(at));
    }
    assert!(refuse_in(br#"{"model": "C:\\u0000"}"#, &chat, &none).is_ok(), "an escaped backslash is text");
    assert!(refuse_in(br#"{"a": "\u0000"}"#, "NoSuchBody", &schemas()).is_err());
}

/// Each route names the body type its handler parses (`Route::takes`),
/// which is the one its document's operation declares, and a schema of the
/// document, which `nul.rs` walks bodies along.
#[test]
fn every_route_names_the_body_its_operation_declares() {
    let mut table = Routes::default();
    let (_, openapi) = super::api_routes(&mut table);
    let schemas = super::docs::schemas_of(&openapi, &table);
    let doc = serde_json::to_value(&openapi).unwrap();
    let mut bodies = Vec::new();
    for (path, route) in table.iter() {
        let declared = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .map(|r| r.trim_start_matches("#/components/schemas/"));
        let named = route.body_schema();
        assert_eq!(named.as_deref(), declared, "{path}");
        if let Some(name) = named {
            assert!(schemas.contains_key(name.as_ref()), "{path}: {name} is not in the document");
            bodies.push(name);
        }
    }
    // Chat, completions, responses, messages and count_tokens, embeddings,
    // rerank (twice), tokenize, detokenize; Ollama's chat, generate, show,
    // pull, embed and the legacy embed.
    assert_eq!(bodies.len(), 16, "{bodies:?}");
}

/// With a key, exactly the routes the table describes as guarded answer
/// 401 without it (to the method they take: another one is 405 whatever
/// the key); without a key, none does.
#[tokio::test]
async fn the_key_guards_exactly_the_routes_described_as_guarded() {
    for key in [None, Some("k")] {
        let state = AppState::new(Settings { api_key: key.map(str::to_owned), ..Settings::example() });
        let (_, table) = super::main_routes(&state);
        let app = super::router(state);
        let mut guarded = 0;
        for (path, route) in table.iter() {
            let uri = path.replace("{id}", "m");
            let mut statuses = Vec::new();
            for method in [Method::GET, Method::POST] {
                let request = Request::builder().method(method).uri(&uri).body(Body::empty()).unwrap();
                statuses.push(app.clone().oneshot(request).await.unwrap().status());
            }
            let refused = statuses.contains(&StatusCode::UNAUTHORIZED);
            assert_eq!(refused, key.is_some() && route.guarded, "{path}: {statuses:?}");
            guarded += usize::from(route.guarded);
        }
        let public = table.iter().filter(|(_, route)| !route.guarded).map(|(path, _)| path).collect::<Vec<_>>();
        for path in ["/", "/health", "/health/ready", "/metrics", "/openapi.json", "/docs", "/docs/"] {
            assert!(public.contains(&path), "{path} is public: {public:?}");
        }
        assert!(guarded >= 20, "{guarded}");
        // A path that is no route is 404, with or without the key.
        let response = app.clone().oneshot(Request::get("/v1/nope").body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
}
