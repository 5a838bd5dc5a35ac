//! A web page in the user's browser cannot drive the daemon: requests from
//! a foreign `Origin` and requests under a foreign `Host` name (DNS
//! rebinding) are refused with 403 by default, before they run.

mod common;
use common::*;
use serde_json::Value;

/// One request with the given headers (a browser's: `Origin`, `Host`); status and body.
async fn send(d: &Daemon, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut r = d.client().request(method.parse().unwrap(), format!("{}{path}", d.url)).body(body.to_owned());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A 403 naming the setting that would let the request in: OpenAI's
/// envelope (with its code) on `/v1`, Ollama's `{"error": "…"}` on `/api`.
fn assert_refused((status, e): (u16, Value), path: &str, code: &str, setting: &str) {
    assert_eq!(status, 403, "{path}: {e}");
    let message = if path.starts_with("/api/") {
        e["error"].as_str()
    } else {
        assert_eq!(e["error"]["code"], code, "{path}: {e}");
        e["error"]["message"].as_str()
    };
    assert!(message.is_some_and(|m| m.contains(setting)), "{path}: {e}");
}

const GENERATE: &str = r#"{"model": "m", "prompt": "hi", "stream": false}"#;

#[tokio::test]
async fn foreign_origins_and_host_names_are_refused_by_default() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--model-id", "m"]);
    let own = d.url.clone();
    let evil = [("origin", "http://evil.example")];
    // Requests a page can send without a preflight.
    let text_plain = [("origin", "http://evil.example"), ("content-type", "text/plain")];
    for (method, path, headers, body) in [
        ("POST", "/api/generate", &text_plain[..], GENERATE),
        ("POST", "/api/chat", &text_plain[..], r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#),
        ("POST", "/v1/models/m/unload", &evil[..], ""),
        ("POST", "/v1/models/m/load", &evil[..], ""),
        ("OPTIONS", "/v1/chat/completions", &evil[..], ""),
        ("POST", "/api/generate", &[("origin", "null"), ("content-type", "text/plain")][..], GENERATE),
    ] {
        assert_refused(send(&d, method, path, headers, body).await, path, "origin_not_allowed", "cors_origins");
    }
    // DNS rebinding: the page's own name, resolved to this machine; no Origin is needed to read answers.
    for host in ["evil.example", "evil.example:80", "localhost.evil.example"] {
        let refused = send(&d, "POST", "/api/generate", &[("host", host)], GENERATE).await;
        assert_refused(refused, "/api/generate", "host_not_allowed", "allowed_hosts");
        let refused = send(&d, "POST", "/v1/models/m/unload", &[("host", host)], "").await;
        assert_refused(refused, "/v1/models/m/unload", "host_not_allowed", "allowed_hosts");
    }
    // Nothing ran: the model is still loaded and no generation was counted.
    let (_, ps) = d.get_json("/api/ps").await;
    assert_eq!(ps["models"].as_array().map(Vec::len), Some(1), "{ps}");

    // The server's own origin (its docs page), local names and clients that send no Origin pass.
    let own_origin = [("origin", own.as_str())];
    assert_eq!(send(&d, "POST", "/api/generate", &own_origin, GENERATE).await.0, 200);
    let port = own.rsplit(':').next().unwrap();
    let local = format!("localhost:{port}");
    assert_eq!(send(&d, "POST", "/api/generate", &[("host", local.as_str())], GENERATE).await.0, 200);
    assert_eq!(send(&d, "POST", "/api/generate", &[], GENERATE).await.0, 200);
    // The document names the refusal.
    let (_, doc) = d.get_json("/openapi.json").await;
    for path in ["/v1/chat/completions", "/v1/models/{id}/unload", "/api/generate"] {
        let responses = &doc["paths"][path]["post"]["responses"];
        assert!(responses.get("403").is_some(), "{path}: {responses}");
    }
    // In Ollama's shape on its routes.
    let schema = &doc["paths"]["/api/generate"]["post"]["responses"]["403"]["content"]["application/json"]["schema"];
    assert_eq!(schema["$ref"], "#/components/schemas/OllamaError", "{schema}");
}

#[tokio::test]
async fn configured_origins_and_host_names_pass() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant",
        "--model-id",
        "m",
        "--cors-origins",
        "http://webui.example",
        "--allowed-hosts",
        "board.example",
    ]);
    let (status, _) = send(&d, "POST", "/api/generate", &[("origin", "http://webui.example")], GENERATE).await;
    assert_eq!(status, 200);
    assert_eq!(send(&d, "POST", "/api/generate", &[("host", "board.example:8080")], GENERATE).await.0, 200);
    let refused = send(&d, "POST", "/api/generate", &[("origin", "http://evil.example")], GENERATE).await;
    assert_refused(refused, "/api/generate", "origin_not_allowed", "cors_origins");
}
