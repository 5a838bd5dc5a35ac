//! The HTTP layer in-process: the axum router on the simulated runtime,
//! driven with `tower::ServiceExt::oneshot` (no socket, no subprocess). The
//! through-the-binary suites cover the same surface end to end; these pin
//! validation, the status table and SSE assembly close to the code.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use rkllmd::api::{self, AppState};
use rkllmd::app;
use rkllmd::config::{Backend, Config};
use serde_json::{json, Value};
use tower::ServiceExt;

/// A router serving `spec` on the in-process simulator.
async fn router_with(spec: &str, tweak: impl FnOnce(&mut Config)) -> (Router, AppState) {
    let mut config = Config { backend: Backend::Sim, model: Some(spec.into()), ..Config::default() };
    tweak(&mut config);
    let registry = app::registry(&config).expect("the models register");
    let primary = app::primary_spec(&config, &Default::default()).expect("one model");
    drop(registry.acquire(&primary.id, None).await.expect("the simulated model loads"));
    let state = AppState::new(app::api_settings(&config));
    state.set_models(registry);
    (api::router(state.clone()), state)
}

async fn router(spec: &str) -> Router {
    router_with(spec, |_| {}).await.0
}

async fn post(router: Router, path: &str, body: Value) -> (StatusCode, axum::http::HeaderMap, String) {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = router.oneshot(request).await.expect("the router answers");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.expect("body");
    (parts.status, parts.headers, String::from_utf8(bytes.to_vec()).expect("utf-8"))
}

fn chat(model: &str, extra: Value) -> Value {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": "Hello"}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

fn error_of(text: &str) -> Value {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    v["error"].clone()
}

#[tokio::test]
async fn validation_names_the_field() {
    let r = router("sim:instant?reply_tokens=3").await;
    for (extra, param) in [
        (json!({"temperature": 2.5}), "temperature"),
        (json!({"top_k": -1}), "top_k"),
        (json!({"n": 2}), "n"),
        (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (json!({"stream_options": {"include_usage": true}}), "stream_options"),
        (json!({"messages": []}), "messages"),
        (json!({"messages": [{"role": "tool", "content": "x"}]}), "messages[0].tool_call_id"),
    ] {
        let (status, _, body) = post(r.clone(), "/v1/chat/completions", chat("sim-instant", extra.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        let e = error_of(&body);
        assert_eq!(e["param"], param, "{extra}: {body}");
        assert_eq!(e["type"], "invalid_request_error");
    }
    let (status, _, body) = post(r, "/v1/chat/completions", chat("nope", json!({}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_of(&body)["code"], "model_not_found");
}

#[tokio::test]
async fn the_status_table_reaches_the_client() {
    // A runtime error after two tokens: 500 runtime_error, not retried by SDKs.
    let r = router("sim:instant?reply_tokens=8&error_after=2").await;
    let (status, headers, body) = post(r, "/v1/chat/completions", chat("sim-instant", json!({}))).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(error_of(&body)["code"], "runtime_error");
    assert_eq!(headers.get("x-should-retry").map(|v| v.to_str().unwrap()), Some("false"));

    // No first token within the allowance (0 s, a 200 ms prefill): 504 timeout.
    let (r, _) = router_with("sim:instant?reply_tokens=8&prefill_extra_ms=200", |c| {
        c.first_token_timeout_secs = 0;
        c.first_token_timeout_ms_per_kib = 0;
    })
    .await;
    let (status, _, body) = post(r, "/v1/chat/completions", chat("sim-instant", json!({}))).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(error_of(&body)["code"], "timeout");

    // Shutting down: 503 before the engine is asked.
    let (r, state) = router_with("sim:instant?reply_tokens=2", |_| {}).await;
    state.begin_shutdown();
    let (status, _, body) = post(r, "/v1/chat/completions", chat("sim-instant", json!({}))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(error_of(&body)["code"], "shutting_down");
}

/// The `data:` payloads of an SSE body, in order.
fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).map(str::to_owned).collect()
}

#[tokio::test]
async fn sse_assembly() {
    let r = router("sim:instant?reply_tokens=5").await;
    let (status, headers, body) =
        post(r.clone(), "/v1/chat/completions", chat("sim-instant", json!({"stream": true}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/event-stream");
    assert_eq!(headers["x-accel-buffering"], "no");
    let events = sse_data(&body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{body}");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    // One chunk per token, then the finish chunk.
    assert_eq!(chunks.len(), 5 + 1, "{body}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks[1..5].iter().all(|c| c["choices"][0]["delta"].get("role").is_none()));
    let ids: std::collections::HashSet<_> = chunks.iter().map(|c| c["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 1, "one id per stream");
    let last = &chunks[5];
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["usage"]["completion_tokens"], 5);
    assert_eq!(last["timings"]["predicted_n"], 5);
    assert!(chunks[..5].iter().all(|c| c["choices"][0]["finish_reason"].is_null() && c.get("usage").is_none()));

    // include_usage: a separate last chunk with no choices.
    let (_, _, body) = post(
        r.clone(),
        "/v1/chat/completions",
        chat("sim-instant", json!({"stream": true, "stream_options": {"include_usage": true}})),
    )
    .await;
    let events = sse_data(&body);
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 5);

    // A failure after the first token: an error event, then [DONE].
    let r = router("sim:instant?reply_tokens=8&error_after=2").await;
    let (status, _, body) = post(r, "/v1/chat/completions", chat("sim-instant", json!({"stream": true}))).await;
    assert_eq!(status, StatusCode::OK, "the stream had started");
    let events = sse_data(&body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let error: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(error["error"]["code"], "runtime_error", "{body}");
}
