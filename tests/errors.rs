//! Every bad input gets the OpenAI envelope with the right status, and the
//! daemon keeps serving; API key; runtime errors.

mod common;
use common::*;
use serde_json::{json, Value};

fn assert_envelope(body: &Value, param: Option<&str>) {
    let e = body["error"].as_object().unwrap_or_else(|| panic!("no error envelope: {body}"));
    for key in ["message", "type", "param", "code"] {
        assert!(e.contains_key(key), "{key} missing: {body}");
    }
    assert!(!e["message"].as_str().unwrap().is_empty());
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{body}");
    }
}

async fn raw(d: &Daemon, content_type: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let r = d
        .client()
        .post(format!("{}/v1/chat/completions", d.url))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}")))
}

#[tokio::test]
async fn bad_inputs_get_enveloped_errors_and_the_daemon_keeps_serving() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant?reply_tokens=4",
        "--model-id",
        "m",
        "--body-limit-bytes",
        "10000",
    ]);
    let (s, b) = raw(&d, "application/json", "{not json").await;
    assert_eq!(s, 400);
    assert_envelope(&b, None);
    let (s, b) = raw(&d, "text/plain", r#"{"model":"m","messages":[]}"#).await;
    assert_eq!(s, 415);
    assert_envelope(&b, None);
    let (s, b) = raw(&d, "application/json", "x".repeat(20_000)).await;
    assert_eq!(s, 413);
    assert_envelope(&b, None);

    let m = |extra: Value| {
        let mut body = chat("m", "hi");
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let cases: Vec<(Value, u16, Option<&str>)> = vec![
        (json!({"model": "m", "messages": "nope"}), 400, Some("messages")),
        (json!({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}), 400, Some("messages[0].role")),
        (json!({"messages": [{"role": "user", "content": "x"}]}), 400, None),
        (m(json!({"model": "other"})), 404, Some("model")),
        (m(json!({"n": 2})), 400, Some("n")),
        (m(json!({"temperature": 3})), 400, Some("temperature")),
        (m(json!({"top_p": -0.1})), 400, Some("top_p")),
        (m(json!({"presence_penalty": 2.5})), 400, Some("presence_penalty")),
        (m(json!({"max_tokens": 5, "max_completion_tokens": 6})), 400, Some("max_completion_tokens")),
        (m(json!({"max_tokens": 0})), 400, Some("max_tokens")),
        (m(json!({"stop": ["a", "b", "c", "d", "e"]})), 400, Some("stop")),
        (m(json!({"stream_options": {"include_usage": true}})), 400, Some("stream_options")),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}]}]}),
            400,
            Some("messages[0].content[0].image_url"),
        ),
        (json!({"model": "m", "messages": [{"role": "tool", "content": "42"}]}), 400, Some("messages[0].tool_call_id")),
        (json!({"model": "m", "messages": []}), 400, Some("messages")),
    ];
    for (body, status, param) in cases {
        let r = d.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(r.status().as_u16(), status, "{body}");
        assert_envelope(&r.json().await.unwrap(), param);
    }
    let r = d.client().get(format!("{}/v1/nothing", d.url)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_envelope(&r.json().await.unwrap(), None);
    let r = d.client().get(format!("{}/v1/chat/completions", d.url)).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_envelope(&r.json().await.unwrap(), None);

    // Unknown fields are ignored; a bare-string stop works; the daemon still serves.
    let b: Value = d
        .post("/v1/chat/completions", m(json!({"stop": "zzz", "seed": 1, "user": "u", "logit_bias": {}})))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(b["usage"]["completion_tokens"], 4, "{b}");
}

#[tokio::test]
async fn api_key_guards_the_api_but_not_health() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant?reply_tokens=2",
        "--model-id",
        "m",
        "--api-key",
        "sekrit",
    ]);
    let url = format!("{}/v1/chat/completions", d.url);
    for auth in [None, Some("Bearer wrong"), Some("sekrit"), Some("Bearer sekri")] {
        let mut req = d.client().post(&url).json(&chat("m", "hi"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401, "{auth:?}");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"]["code"], "invalid_api_key");
    }
    let r = d.client().post(&url).bearer_auth("sekrit").json(&chat("m", "hi")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(d.client().get(format!("{}/health", d.url)).send().await.unwrap().status(), 200);
    assert_eq!(d.client().get(format!("{}/v1/models", d.url)).send().await.unwrap().status(), 401);
    // Exactly what docs/api.md ("Authentication") says the key guards, and what stays public.
    for path in ["/api/tags", "/api/version", "/tokenize", "/detokenize", "/rerank", "/v1/system"] {
        let method = if path.starts_with("/api/") || path == "/v1/system" { "GET" } else { "POST" };
        let req = d.client().request(method.parse().unwrap(), format!("{}{path}", d.url));
        let r = req.json(&json!({"model": "m"})).send().await.unwrap();
        assert_eq!(r.status(), 401, "{method} {path}");
        // In the route's own error shape: Ollama's `{"error": "…"}` on its routes.
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"].is_string(), path.starts_with("/api/"), "{method} {path}: {b}");
    }
    // A path under Ollama's routes that is none, or a method they do not take: Ollama's shape too.
    for (method, path, status) in
        [("GET", "/api/no-such-route", 404), ("GET", "/api/chat", 405), ("GET", "/v1/nope", 404)]
    {
        let req = d.client().request(method.parse().unwrap(), format!("{}{path}", d.url)).bearer_auth("sekrit");
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), status, "{method} {path}");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"].is_string(), path.starts_with("/api/"), "{method} {path}: {b}");
    }
    for (path, status) in [("/metrics", 200), ("/health/ready", 200), ("/openapi.json", 200), ("/no-such-route", 404)] {
        let r = d.client().get(format!("{}{path}", d.url)).send().await.unwrap();
        assert_eq!(r.status(), status, "{path}");
    }
}

#[tokio::test]
async fn runtime_error_is_reported_in_both_shapes_and_serving_goes_on() {
    // An ASCII reply, so the three tokens before the error are three whole pieces of text.
    let script = script(&[("boom", "one two three four five six")]);
    let spec = format!("sim:instant?error_after=3&script={}", script.path().display());
    let d = Daemon::start(&["--backend", "sim", "--model", &spec, "--model-id", "m"]);
    let r = d.post("/v1/chat/completions", chat("m", "boom")).await;
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["x-should-retry"], "false");
    let b: Value = r.json().await.unwrap();
    assert_envelope(&b, None);
    assert_eq!(b["error"]["type"], "server_error");

    let mut body = chat("m", "boom");
    body["stream"] = json!(true);
    let (events, _) = read_sse(d.post("/v1/chat/completions", body).await).await;
    let n = events.len();
    assert_eq!(events[n - 1].data, "[DONE]");
    let err = events[n - 2].json();
    assert_envelope(&err, None);
    let tokens = events[..n - 2].iter().filter(|e| !e.json()["choices"][0]["delta"]["content"].is_null()).count();
    assert_eq!(tokens, 3, "the tokens before the error were streamed");

    // The other front ends' shapes carry the same headers: the SDKs retry a
    // 5xx unless told not to.
    let messages = json!({"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "boom"}]});
    let r = d.post("/v1/messages", messages).await;
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["x-should-retry"], "false", "Messages");
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["type"], "api_error");
    let r = d
        .post("/api/chat", json!({"model": "m", "stream": false, "messages": [{"role": "user", "content": "boom"}]}))
        .await;
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["x-should-retry"], "false", "Ollama");
    assert_eq!(d.get_json("/health/ready").await.0, 200, "still serving");
}

#[tokio::test]
async fn a_model_that_fails_to_load_exits_non_zero_with_the_runtimes_words() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--backend", "sim", "--port", "0", "--model", "/nonexistent/model.rkllm"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("invalid rkllm model"), "{log}");
}

#[tokio::test]
async fn print_config_shows_precedence_file_env_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "port = 1111\nqueue_depth = 3\nmax_new_tokens = 100\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--config", file.to_str().unwrap(), "--print-config", "--queue-depth", "5"])
        .env("RKLLMD_PORT", "2222")
        .env("RKLLMD_QUEUE_DEPTH", "4")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("port = 2222"), "env beats file: {text}");
    assert!(text.contains("queue_depth = 5"), "flag beats env: {text}");
    assert!(text.contains("max_new_tokens = 100"), "file beats default: {text}");
    std::fs::write(&file, "colour = \"blue\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--config", file.to_str().unwrap(), "--print-config"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("colour"));
}

/// Two models with one id: `--print-config` refuses the configuration as
/// `serve` does, with the same words and the configuration's exit status.
#[test]
fn print_config_checks_the_registered_models_as_start_does() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "[[models]]\nid = \"m\"\npath = \"sim:instant\"\n\n[[models]]\nid = \"m\"\npath = \"sim:qwen2-0.5b\"\n",
    )
    .unwrap();
    for print in [true, false] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"));
        command.args(["--config", file.to_str().unwrap(), "--port", "0"]);
        if print {
            command.arg("--print-config");
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "print {print}: {stderr}");
        assert!(stderr.contains("two models have the id `m`: sim:instant and sim:qwen2-0.5b"), "{stderr}");
    }
}

/// The start's messages say each thing once: the failed load's prefix, the
/// runtime's own lines; and `model loaded` once for a load that worked.
#[tokio::test]
async fn load_messages_say_each_thing_once() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--backend", "sim", "--port", "0", "--model", "sim:instant?fail_init=npu_memory"])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("loading the model `sim-instant` failed: rkllm_init failed with code -1"), "{log}");
    assert_eq!(log.matches("failed to malloc npu memory").count(), 1, "the runtime's line once: {log}");
    assert_eq!(log.matches("rkllm-runtime version").count(), 1, "{log}");

    // No library and no model file: both are said, not only the library.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--port", "0", "--model", "/nonexistent/model.rkllm"])
        .env_remove("RKLLM_LIB")
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("no librkllmrt.so found"), "{log}");
    assert!(log.contains("the model file /nonexistent/model.rkllm does not exist either"), "{log}");

    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant"]);
    assert_eq!(d.log().matches("model loaded").count(), 1, "{}", d.log());
}
