//! A web page in the user's browser cannot drive the daemon: requests from
//! a foreign `Origin` and requests under a foreign `Host` name (DNS
//! rebinding) are refused with 403 by default, before they run; a request
//! with the API key passes under any name. A malformed `Host` is 400 on
//! every route of both listeners (the main one and `--ollama-listen`).

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

/// One request with the given headers (a browser's: `Origin`, `Host`); status and body.
async fn send(d: &Daemon, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    send_to(&d.url, method, path, headers, body).await
}

async fn send_to(url: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut r = client.request(method.parse().unwrap(), format!("{url}{path}")).body(body.to_owned());
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
    let d = daemon(&[]);
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
    let d = daemon(&["--cors-origins", "http://webui.example", "--allowed-hosts", "board.example"]);
    let (status, _) = send(&d, "POST", "/api/generate", &[("origin", "http://webui.example")], GENERATE).await;
    assert_eq!(status, 200);
    assert_eq!(send(&d, "POST", "/api/generate", &[("host", "board.example:8080")], GENERATE).await.0, 200);
    let refused = send(&d, "POST", "/api/generate", &[("origin", "http://evil.example")], GENERATE).await;
    assert_refused(refused, "/api/generate", "origin_not_allowed", "cors_origins");
}

/// A keyed daemon with an Ollama clients' address (no key there); that address's URL.
fn keyed_with_ollama_address() -> (Daemon, String) {
    let d = daemon(&["--api-key", "k", "--ollama-listen", "127.0.0.1:0"]);
    let log = d.log();
    let at = log.find("Ollama clients' address: http://").expect("the Ollama address is logged") + 25;
    let url = log[at..].split_whitespace().next().unwrap().to_owned();
    (d, url)
}

#[tokio::test]
async fn a_request_with_the_key_passes_under_any_host_name() {
    let (d, ollama) = keyed_with_ollama_address();
    let key = [("host", "llm.example.lan"), ("authorization", "Bearer k")];
    assert_eq!(send(&d, "POST", "/api/generate", &key, GENERATE).await.0, 200);
    let x_api_key = [("host", "rkllmd.llm:8080"), ("x-api-key", "k")];
    assert_eq!(send(&d, "GET", "/v1/models", &x_api_key, "").await.0, 200);
    // Without it (a rebinding page cannot know it) the name is checked, on the public routes too.
    for path in ["/v1/models", "/health"] {
        let (status, e) = send(&d, "GET", path, &[("host", "llm.example.lan")], "").await;
        assert_eq!((status, &e["error"]["code"]), (403, &Value::from("host_not_allowed")), "{path}: {e}");
        let message = e["error"]["message"].as_str().unwrap();
        for setting in ["allowed_hosts", "--allowed-hosts", "RKLLMD_ALLOWED_HOSTS", "API key"] {
            assert!(message.contains(setting), "{path}: {message}");
        }
    }
    // The Ollama address has no key: its Host and Origin checks are the keyless daemon's.
    let (status, e) = send_to(&ollama, "POST", "/api/generate", &[("host", "evil.example")], GENERATE).await;
    assert_eq!(status, 403, "{e}");
    assert!(e["error"].as_str().is_some_and(|m| m.contains("allowed_hosts") && !m.contains("API key")), "{e}");
    let evil = [("origin", "http://evil.example"), ("content-type", "text/plain")];
    assert_eq!(send_to(&ollama, "POST", "/api/generate", &evil, GENERATE).await.0, 403);
    assert_eq!(send_to(&ollama, "POST", "/api/generate", &[], GENERATE).await.0, 200);
}

#[tokio::test]
async fn a_malformed_host_is_400_on_every_route_of_both_listeners() {
    let (d, ollama) = keyed_with_ollama_address();
    let main = d.url.trim_start_matches("http://").to_owned();
    let ollama = ollama.trim_start_matches("http://").to_owned();
    let hosts: [&[&str]; 4] = [
        &["127.0.0.1", "evil.example"],
        &["127.0.0.1:abc"],
        &["localhost:1:evil.example"],
        &["127.0.0.1:8080", "127.0.0.1:8080"],
    ];
    let routes = [
        (&main, "GET /health"),
        (&main, "GET /v1/models"),
        (&main, "POST /v1/chat/completions"),
        (&main, "GET /no/such/route"),
        (&main, "GET /api/version"),
        (&ollama, "GET /api/version"),
        (&ollama, "POST /api/chat"),
        (&ollama, "GET /v1/models"),
    ];
    for (addr, route) in routes {
        for host in hosts {
            let lines: String = host.iter().map(|h| format!("Host: {h}\r\n")).collect();
            let request = format!("{route} HTTP/1.1\r\n{lines}Content-Length: 0\r\nConnection: close\r\n\r\n");
            let (status, body) = parse(&raw_at(addr, request.as_bytes(), Duration::from_secs(10)));
            assert_eq!(status, 400, "{addr} {route} {host:?}: {body}");
            let message = if route.contains(" /api/") { &body["error"] } else { &body["error"]["message"] };
            assert!(message.as_str().is_some_and(|m| m.contains("Host")), "{addr} {route} {host:?}: {body}");
        }
    }
    // One well-formed Host still passes, and the daemon keeps serving.
    let ok = format!("GET /health HTTP/1.1\r\nHost: {main}\r\nConnection: close\r\n\r\n");
    assert_eq!(parse(&raw_at(&main, ok.as_bytes(), Duration::from_secs(10))).0, 200);
}

/// The simulated instant model as `m`, with `extra` settings.
fn daemon(extra: &[&str]) -> Daemon {
    Daemon::start(&[&["--backend", "sim", "--model", "sim:instant", "--model-id", "m"][..], extra].concat())
}
