//! The HTTP edges, through the binary: protocol errors with the envelope,
//! header/body time-outs and the connection cap, shutdown that ends a stream
//! honestly and exits even with a wedged runtime, readiness of a stalled
//! runtime, NUL in prompts, tool-call arguments, auth headers, CORS, `GET /`
//! and the OpenAPI document.

mod common;
use common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn addr(d: &Daemon) -> String {
    d.url.trim_start_matches("http://").to_owned()
}

fn raw(d: &Daemon, bytes: &[u8], wait: Duration) -> Vec<u8> {
    raw_at(&addr(d), bytes, wait)
}

#[tokio::test]
async fn protocol_errors_carry_the_envelope() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant"]);
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(200_000));
    let cases: [(&str, Vec<u8>, u16, &str); 4] = [
        ("obs-fold", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n".to_vec(), 400, "invalid_http"),
        (
            "negative Content-Length",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n".to_vec(),
            400,
            "invalid_http",
        ),
        ("200 kB URI", long_uri.into_bytes(), 414, "uri_too_long"),
        ("TLS ClientHello", [&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01][..], &[0u8; 64]].concat(), 400, "invalid_http"),
    ];
    for (what, bytes, status, code) in cases {
        let (got, body) = parse(&raw(&d, &bytes, Duration::from_secs(10)));
        assert_eq!((got, body["error"]["code"].as_str()), (status, Some(code)), "{what}: {body}");
        assert!(body["error"]["message"].is_string() && body["error"].get("param").is_some(), "{what}: {body}");
    }
    // The connection-level rewrite leaves ordinary answers alone.
    let (s, h) = d.get_json("/health").await;
    assert_eq!((s, h["status"].as_str()), (200, Some("ok")));
}

#[tokio::test]
async fn slow_heads_and_bodies_time_out_and_connections_are_capped() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant",
        "--header-read-timeout-secs",
        "1",
        "--body-idle-timeout-secs",
        "1",
        "--body-timeout-secs",
        "2",
        "--max-connections",
        "3",
        // The cap itself, from one address (tests/connection_share.rs has the share).
        "--client-connection-share",
        "100",
    ]);
    // A head that never ends: the connection is closed, with no answer.
    let started = Instant::now();
    let out = raw(&d, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ", Duration::from_secs(10));
    assert!(out.is_empty(), "{:?}", String::from_utf8_lossy(&out));
    assert!(started.elapsed() < Duration::from_secs(5), "held {:?}", started.elapsed());

    // 5 bytes of a 100-byte body: 408 once the body has been idle for 1 s.
    let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    let started = Instant::now();
    let out = raw(&d, format!("{head}Content-Length: 100\r\n\r\n{{\"mod").as_bytes(), Duration::from_secs(10));
    let (s, body) = parse(&out);
    assert_eq!((s, body["error"]["code"].as_str()), (408, Some("body_timeout")), "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The listener's own answer names the board like every other response.
    let head_text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert!(head_text.contains("\r\nx-rkllmd-instance: "), "{head_text}");
    // The same in the route's own error shape: Anthropic's on the Messages API, Ollama's on its routes.
    for path in ["/v1/messages", "/v1/messages/count_tokens", "/api/chat"] {
        let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n");
        let (s, body) =
            parse(&raw(&d, format!("{head}Content-Length: 100\r\n\r\n{{\"mod").as_bytes(), Duration::from_secs(10)));
        assert_eq!(s, 408, "{path}: {body}");
        let message = match path {
            "/api/chat" => body["error"].as_str(),
            _ => {
                assert_eq!(
                    (body["type"].as_str(), body["error"]["type"].as_str()),
                    (Some("error"), Some("invalid_request_error"))
                );
                body["error"]["message"].as_str()
            }
        };
        assert!(message.is_some_and(|m| m.contains("body_idle_timeout_secs")), "{path}: {body}");
    }

    // A body trickling in (a byte every 300 ms, never idle for 1 s): 408 once it took 2 s in all.
    let started = Instant::now();
    let mut s = TcpStream::connect(addr(&d)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    s.write_all(format!("{head}Content-Length: 100\r\n\r\n").as_bytes()).unwrap();
    let mut out = Vec::new();
    while started.elapsed() < Duration::from_secs(10) {
        if s.write_all(b" ").is_err() {
            break;
        }
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) if !out.is_empty() => break,
            Err(_) => {}
        }
    }
    let took = started.elapsed();
    let (status, body) = parse(&out);
    assert_eq!((status, body["error"]["code"].as_str()), (408, Some("body_timeout")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("body_timeout_secs"), "{body}");
    // Held for as long as bytes came, it would last the whole 10 s loop: 4 × the 2 s is generous.
    assert!(took < Duration::from_secs(8), "held {took:?}");

    // A body announced over the limit is refused before any of it arrives.
    let (s, body) =
        parse(&raw(&d, format!("{head}Content-Length: 50000000\r\n\r\n{{\"mo").as_bytes(), Duration::from_secs(10)));
    assert_eq!((s, body["error"]["code"].as_str()), (413, Some("payload_too_large")), "{body}");

    // Three open connections fill the cap; the fourth is answered 503 and closed,
    // unless it is a health probe: liveness and readiness are never refused
    // (readiness says the cap is full).
    let held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr(&d)).unwrap()).collect();
    let (s, body) = parse(&raw(&d, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(10)));
    assert_eq!((s, body["error"]["code"].as_str()), (503, Some("too_many_connections")), "{body}");
    for (probe, status) in [("/health", 200), ("/health/ready", 503)] {
        let started = Instant::now();
        let request = format!("GET {probe} HTTP/1.1\r\nHost: x\r\n\r\n");
        let (s, body) = parse(&raw(&d, request.as_bytes(), Duration::from_secs(10)));
        assert_eq!(s, status, "{probe}: {body}");
        // A probe waiting for a place would wait the whole 10 s: none frees up.
        assert!(started.elapsed() < Duration::from_secs(5), "{probe} took {:?}", started.elapsed());
    }
    drop(held);
    // Closed connections give their places back (the server notices the close).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = raw(&d, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", Duration::from_secs(10));
        if out.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "{:?}", String::from_utf8_lossy(&out));
    }
}

#[tokio::test]
async fn a_stream_cut_off_at_the_end_of_the_grace_ends_with_the_shutting_down_error() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        // Far longer than the grace (16.7 tokens/s); the simulator plans a reply whole, so not 10^5.
        "sim:qwen2.5-1.5b?reply_tokens=2000",
        "--model-id",
        "m",
        "--shutdown-grace-secs",
        "1",
    ]);
    let mut body = chat("m", "hi");
    body["stream"] = json!(true);
    let response = d.post("/v1/chat/completions", body).await;
    assert_eq!(response.status(), 200);
    let reader = tokio::spawn(read_sse(response));
    d.wait_generating().await;
    let status = tokio::task::spawn_blocking(move || d.terminate()).await.unwrap();
    let (events, _) = reader.await.unwrap();
    let n = events.len();
    assert!(n >= 3, "{events:?}");
    assert_eq!(events[n - 1].data, "[DONE]");
    let last = events[n - 2].json();
    assert_eq!(last["error"]["code"], "shutting_down", "{last}");
    for e in &events[..n - 2] {
        let chunk = e.json();
        assert!(chunk["choices"][0]["finish_reason"].is_null() && chunk.get("usage").is_none(), "{chunk}");
    }
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn sigterm_with_a_wedged_runtime_still_ends_the_process() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant?hang_after=3&reply_tokens=10",
        "--model-id",
        "m",
        // One slot: the subject is a request's run that hangs, not `batch = auto`'s timing runs at load (they would meet it).
        "--batch",
        "1",
        "--shutdown-grace-secs",
        "1",
    ]);
    let (client, url) = (d.client(), d.url.clone());
    let request =
        tokio::spawn(
            async move { client.post(format!("{url}/v1/chat/completions")).json(&chat("m", "hang")).send().await },
        );
    d.wait_generating().await;
    // `terminate` fails the test if the process is still there after 20 s.
    let status = tokio::task::spawn_blocking(move || d.terminate()).await.unwrap();
    // The model is left to the exit (it cannot be destroyed while its
    // runtime is inside `rkllm_run`): the daemon shut down as asked.
    assert!(status.success(), "{status:?}");
    request.abort();
}

#[tokio::test]
async fn nul_characters_are_refused_and_tool_call_arguments_pass_through() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--model-id", "m"]);
    let cases = [
        ("/v1/chat/completions", chat("m", "a\u{0}b"), "messages[0].content"),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u", "name": "x\u{0}"}]}),
            "messages[1].name",
        ),
        ("/v1/completions", json!({"model": "m", "prompt": "a\u{0}"}), "prompt"),
        // Deep inside what the template renders, and in a key.
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "u"}],
                   "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"enum": ["a", "b\u{0}"]}}}}}]}),
            "tools[0].function.parameters.properties.x.enum[1]",
        ),
        ("/v1/embeddings", json!({"model": "m", "input": ["ok", "b\u{0}"]}), "input[1]"),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "u"}], "chat_template_kwargs": {"k\u{0}": 1}}),
            "chat_template_kwargs.k\\u0000",
        ),
    ];
    for (path, body, param) in cases {
        let r = d.post(path, body).await;
        let status = r.status().as_u16();
        let e: Value = r.json().await.unwrap();
        assert_eq!((status, e["error"]["param"].as_str()), (400, Some(param)), "{e}");
        assert!(e["error"]["message"].as_str().unwrap_or_default().contains("NUL"), "{e}");
    }
    // Ollama's and Anthropic's routes, in their own error shapes.
    let r = d.post("/api/chat", json!({"model": "m", "messages": [{"role": "user", "content": "a\u{0}"}]})).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert!(e["error"].as_str().is_some_and(|m| m.contains("messages[0].content") && m.contains("NUL")), "{e}");
    let r = d
        .post(
            "/v1/messages",
            json!({"model": "m", "max_tokens": 8, "system": "s\u{0}", "messages": [{"role": "user", "content": "a"}]}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("`system`") && m.contains("NUL")), "{e}");
    // A backslash before `u0000` is text, not a NUL.
    assert_eq!(d.post("/v1/chat/completions", chat("m", "C:\\u0000")).await.status(), 200);
    // A field the document does not declare is ignored, whatever it holds (OpenAI's `user`).
    let undeclared =
        json!({"model": "m", "messages": [{"role": "user", "content": "u"}], "user": "\u{0}", "x\u{0}": 1});
    assert_eq!(d.post("/v1/chat/completions", undeclared).await.status(), 200);
    // As OpenAI does: a model's malformed arguments are sent back as written.
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{bad"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "noon"}]});
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
}

#[tokio::test]
async fn keys_cors_root_and_the_document() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--api-key", "k", "--cors-origins", "*"]);
    let get = |h: (&'static str, &'static str)| {
        let req = d.client().get(format!("{}/v1/models", d.url)).header(h.0, h.1);
        async move { req.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(get(("x-api-key", "k")).await, 200);
    assert_eq!(get(("authorization", "Bearer k")).await, 200);
    assert_eq!(get(("x-api-key", "wrong")).await, 401);
    // The public /health names no file while the key keeps /v1/system private.
    let (_, h) = d.get_json("/health").await;
    assert_eq!(h["runtime"]["backend"], "sim", "{h}");
    assert!(h["runtime"].get("origin").is_none() && h["runtime"].get("model_path").is_none(), "{h}");
    let system = d.client().get(format!("{}/v1/system", d.url)).header("x-api-key", "k").send().await.unwrap();
    let system: Value = system.json().await.unwrap();
    assert_eq!(system["runtime"]["model_path"], "sim:instant", "{system}");

    let preflight = d
        .client()
        .request(reqwest::Method::OPTIONS, format!("{}/v1/chat/completions", d.url))
        .header("Origin", "http://webui.local")
        .header("Access-Control-Request-Method", "POST")
        .header("Access-Control-Request-Headers", "authorization,content-type")
        .send()
        .await
        .unwrap();
    let allowed = preflight.headers()["access-control-allow-headers"].to_str().unwrap().to_ascii_lowercase();
    assert!(allowed.split(',').any(|h| h.trim() == "authorization"), "{allowed}");

    let root = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = root.get(format!("{}/", d.url)).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["location"].to_str().unwrap()), (307, "/docs/"));

    let (_, doc) = d.get_json("/openapi.json").await;
    let chat = &doc["paths"]["/v1/chat/completions"]["post"];
    for status in ["401", "415", "413"] {
        assert!(chat["responses"].get(status).is_some(), "{status} missing: {}", chat["responses"]);
    }
    assert!(doc["components"]["securitySchemes"].get("bearer").is_some(), "{}", doc["components"]);
    assert!(doc["paths"]["/health"]["get"].get("security").is_none());
    let schemas = &doc["components"]["schemas"];
    let top_p = &schemas["SamplingFields"]["properties"]["top_p"];
    assert_eq!((top_p["minimum"].as_f64(), top_p["maximum"].as_f64()), (Some(0.0), Some(1.0)), "{top_p}");
    let messages = &schemas["ChatCompletionRequest"]["allOf"][1]["properties"]["messages"];
    assert_eq!(messages["minItems"], 1, "{messages}");
    // The rules that join fields (api/schema_rules.rs), each on a schema the document has.
    let tool_rule = &schemas["ChatMessage"]["allOf"];
    assert!(tool_rule
        .as_array()
        .is_some_and(|rules| rules.iter().any(|r| r["if"]["properties"]["role"]["const"] == "tool")));
    // Ollama's routes, in its shapes: NDJSON lines, `{"error": "…"}`.
    let ollama = &doc["paths"]["/api/chat"]["post"]["responses"];
    let ndjson = &ollama["200"]["content"]["application/x-ndjson"]["schema"]["$ref"];
    assert_eq!(ndjson, "#/components/schemas/OllamaStreamLine", "{ollama}");
    assert_eq!(ollama["401"]["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/OllamaError");
    assert_eq!(schemas["OllamaError"]["required"], json!(["error"]), "{}", schemas["OllamaError"]);
    assert!(ollama.get("404").is_some() && ollama.get("429").is_some(), "{ollama}");
    let show = &doc["paths"]["/api/show"]["post"]["responses"];
    assert!(show.get("404").is_some() && show.get("429").is_none(), "show never queues: {show}");
    let r = d.client().post(format!("{}/api/chat", d.url)).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 401);
    let e: Value = r.json().await.unwrap();
    assert!(e["error"].as_str().is_some_and(|m| m.contains("API key")), "a missing key in Ollama's shape: {e}");
    // A rule naming a schema the document lacks is an ERROR, the only sign (read after the exit).
    let (_, log) = d.exit();
    assert!(!log.contains("has no such schema"), "{log}");

    // Without a key nothing in the document asks for one.
    let open = Daemon::start(&["--backend", "sim", "--model", "sim:instant"]);
    let (_, doc) = open.get_json("/openapi.json").await;
    assert!(doc["components"].get("securitySchemes").is_none(), "{}", doc["components"]);
    let chat = &doc["paths"]["/v1/chat/completions"]["post"];
    assert!(chat.get("security").is_none() && chat["responses"].get("401").is_none(), "{chat}");
}

/// Bodies the document allows and validation once refused: an integral
/// float where an integer goes, a tool whose description is null (Messages,
/// Responses); and one the document refuses, which validation refuses too.
#[tokio::test]
async fn what_the_document_allows_is_accepted() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant?reply_tokens=3", "--model-id", "m"]);
    let status = |r: reqwest::Response| r.status().as_u16();
    let chat = json!({"model": "m", "max_tokens": 3.0, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(status(d.post("/v1/chat/completions", chat).await), 200);
    let half = json!({"model": "m", "max_tokens": 3.5, "messages": [{"role": "user", "content": "hi"}]});
    let r = d.post("/v1/chat/completions", half).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("3.5")), "{e}");
    let tool = json!({"name": "get_weather", "description": null, "input_schema": {"type": "object"}});
    let messages =
        json!({"model": "m", "max_tokens": 3, "tools": [tool], "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(status(d.post("/v1/messages", messages).await), 200);
    let tool = json!({"type": "function", "name": "get_weather", "description": null, "parameters": null});
    assert_eq!(status(d.post("/v1/responses", json!({"model": "m", "input": "hi", "tools": [tool]})).await), 200);
}

/// The rule the document states of one model for `schema`'s `field`: the
/// `then` of an `if` naming the model (`api::doc_models`).
fn model_bound(doc: &Value, schema: &str, model: &str, field: &str) -> Option<Value> {
    let rules = doc["components"]["schemas"][schema]["allOf"].as_array()?;
    rules.iter().find_map(|rule| {
        let names = rule.pointer("/if/properties/model/enum")?.as_array()?;
        let then = rule.pointer(&format!("/then/properties/{field}"))?;
        names.contains(&json!(model)).then(|| then.clone())
    })
}

/// Bounds one document for every model cannot state, stated for the models
/// served, and held exactly: each bound's last allowed value is accepted
/// and the next refused; the width only once an embedding has shown it.
#[tokio::test]
async fn the_document_states_each_models_own_bounds() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant?reply_tokens=3", "--model-id", "m"]);
    let (_, doc) = d.get_json("/openapi.json").await;
    // No vision encoder: chat content parts are text only, Ollama's `images` empty.
    let parts = model_bound(&doc, "ChatCompletionRequest", "m:latest", "messages").expect("an images bound");
    assert_eq!(parts.pointer("/items/properties/content/items/properties/type"), Some(&json!({"const": "text"})));
    let images = model_bound(&doc, "OllamaGenerateRequest", "m", "images").expect("an images bound");
    assert_eq!(images, json!({"maxItems": 0}));
    let image = json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}});
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": [image]}]});
    assert_eq!(d.post("/v1/chat/completions", chat).await.status(), 400);
    // Even on a request that only loads the model, as Ollama checks vision first.
    let load = d.post("/api/generate", json!({"model": "m", "images": ["aGk="]})).await;
    assert_eq!(load.status(), 400);
    // So are its options, held to the document's ranges.
    let five = ["a", "b", "c", "d", "e"];
    for (path, options) in [("/api/generate", json!({"presence_penalty": 1e9})), ("/api/chat", json!({"stop": five}))] {
        assert_eq!(d.post(path, json!({"model": "m", "options": options})).await.status(), 400, "{path}");
    }
    for (schema, field) in [("CreateMessage", "stop_sequences"), ("OllamaOptions", "stop")] {
        let stated = doc["components"]["schemas"][schema]["allOf"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|part| part.pointer(&format!("/properties/{field}/maxItems")));
        assert_eq!(stated, Some(&json!(4)), "{schema}.{field}");
    }
    let messages =
        json!({"model": "m", "max_tokens": 3, "stop_sequences": five, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(d.post("/v1/messages", messages).await.status(), 400);
    // And its tools, named as the document states (1 to 64 characters).
    let tools = json!([{"type": "function", "function": {"name": ""}}]);
    let r = d.post("/api/chat", json!({"model": "m", "tools": tools})).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert!(e["error"].as_str().unwrap().contains("`function.name` must be 1 to 64"), "{e}");
    // And its `think`, one of the document's values (schemathesis found "7\u{8b}" loading with 200).
    for path in ["/api/generate", "/api/chat"] {
        let r = d.post(path, json!({"model": "m", "think": "7\u{8b}"})).await;
        assert_eq!(r.status(), 400, "{path}");
        let e: Value = r.json().await.unwrap();
        assert!(e["error"].as_str().unwrap().contains("`think` must be"), "{path}: {e}");
    }
    // The counts refused right after parsing are stated.
    let max_items = |schema: &str, pointer: &str| {
        let schema = &doc["components"]["schemas"][schema];
        let parts = schema["allOf"].as_array().cloned().unwrap_or_default();
        schema.pointer(pointer).or_else(|| parts.iter().find_map(|part| part.pointer(pointer))).cloned()
    };
    for (schema, pointer, max) in [
        ("RerankRequest", "/properties/documents/maxItems", 2048),
        ("ChatCompletionRequest", "/properties/tools/maxItems", 128),
        ("OllamaChatRequest", "/properties/tools/maxItems", 128),
        ("CreateResponse", "/properties/tools/maxItems", 128),
        ("Conversation", "/properties/tools/maxItems", 128),
    ] {
        assert_eq!(max_items(schema, pointer), Some(json!(max)), "{schema}{pointer}");
    }

    // The vocabulary, from the tokenizer: the last id decodes, the next is refused.
    let bound = model_bound(&doc, "DetokenizeRequest", "m", "tokens").expect("a vocabulary bound");
    let last = bound.pointer("/items/maximum").and_then(Value::as_u64).expect("a maximum");
    // As many ids as the longest text `/tokenize` takes can give (4,096 × 32), and no more.
    let most = bound.pointer("/maxItems").and_then(Value::as_u64).expect("a count bound");
    assert_eq!(most, 4096 * 32);
    for (n, status) in [(most, 200), (most + 1, 400)] {
        let r = d.post("/detokenize", json!({"tokens": vec![0; n as usize]})).await;
        assert_eq!(r.status(), status, "{n} ids");
    }
    let detokenize = |id: u64| d.post("/detokenize", json!({"tokens": [id]}));
    assert_eq!(detokenize(last).await.status(), 200);
    assert_eq!(detokenize(last + 1).await.status(), 400);

    // The width: not stated before the model's first embedding, then exactly.
    assert_eq!(model_bound(&doc, "EmbeddingRequest", "m", "dimensions"), None);
    let r = d.post("/v1/embeddings", json!({"model": "m", "input": "hi"})).await;
    let body: Value = r.json().await.unwrap();
    let width = body["data"][0]["embedding"].as_array().map(Vec::len).expect("a vector") as u64;
    let (_, doc) = d.get_json("/openapi.json").await;
    for schema in ["EmbeddingRequest", "OllamaEmbedRequest"] {
        let bound = model_bound(&doc, schema, "m", "dimensions").expect("a width bound");
        assert_eq!(bound, json!({"minimum": width, "maximum": width}), "{schema}");
    }
    let embed =
        |dimensions: u64| d.post("/v1/embeddings", json!({"model": "m", "input": "hi", "dimensions": dimensions}));
    assert_eq!(embed(width).await.status(), 200);
    assert_eq!(embed(width + 1).await.status(), 400);

    // A vision model takes images: no such bound.
    let vl = Daemon::start(&["--backend", "sim", "--model", "sim:qwen2.5-vl-3b?time_scale=0", "--model-id", "vl"]);
    let (_, doc) = vl.get_json("/openapi.json").await;
    assert_eq!(model_bound(&doc, "ChatCompletionRequest", "vl", "messages"), None);
    assert_eq!(model_bound(&doc, "OllamaChatRequest", "vl", "messages"), None);
}

#[tokio::test]
async fn a_refusal_before_the_body_is_read_closes_the_connection_and_says_so() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--api-key", "k"]);
    // The head announces a body that never comes: the 401 goes out before any of it is read.
    let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
    let response = raw(&d, head.as_bytes(), Duration::from_secs(10));
    let (status, body) = parse(&response);
    assert_eq!((status, &body["error"]["code"]), (401, &json!("invalid_api_key")), "{body}");
    let text = String::from_utf8_lossy(&response).to_ascii_lowercase();
    assert!(text.contains("connection: close"), "{text}");
    // A request whose body was read whole keeps the connection, even when refused (here: no `model`).
    let key = "Authorization: Bearer k\r\nHost: 127.0.0.1";
    let whole = format!(
        "POST /v1/chat/completions HTTP/1.1\r\n{key}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}GET /health HTTP/1.1\r\n{key}\r\nConnection: close\r\n\r\n"
    );
    let both = String::from_utf8_lossy(&raw(&d, whole.as_bytes(), Duration::from_secs(10))).into_owned();
    assert!(both.starts_with("HTTP/1.1 400") && both.contains("HTTP/1.1 200"), "{both}");
}
