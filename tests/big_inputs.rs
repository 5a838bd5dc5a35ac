//! Text far longer than the context (8 MB, under the body limit) is refused
//! by its bytes, before it is rendered or tokenized: fast, and without the
//! memory tokenizing costs (~100 bytes per byte of text).

mod common;
use common::*;
use serde_json::json;

/// The process's peak resident memory so far (VmHWM), in KiB.
fn peak_rss_kib(d: &Daemon) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn an_8_mb_input_is_refused_before_tokenizing_on_every_endpoint() {
    // The simulator's model has a tokenizer.json: without the bound, every input is tokenized.
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--model-id", "m"]);
    // (A chat first would leave its conversation in the KV cache, and a
    // whole-context embedding after it fails in the simulator: noted in docs/reliability.md.)
    assert_eq!(d.post("/v1/embeddings", json!({"model": "m", "input": "warm up"})).await.status().as_u16(), 200);
    let text = "word ".repeat(1_600_000);
    let cases = [
        ("/v1/chat/completions", json!({"model": "m", "messages": [{"role": "user", "content": text}]}), "messages"),
        ("/v1/completions", json!({"model": "m", "prompt": text}), "prompt"),
        ("/v1/embeddings", json!({"model": "m", "input": text}), "input"),
        ("/api/generate", json!({"model": "m", "prompt": text, "stream": false}), ""),
        ("/api/embed", json!({"model": "m", "input": text, "truncate": false}), ""),
    ];
    drop(text);
    let before = peak_rss_kib(&d);
    for (path, body, param) in cases {
        let body = serde_json::to_vec(&body).unwrap();
        assert!(body.len() < 8 * 1024 * 1024, "under the body limit");
        let r = d
            .client()
            .post(format!("{}{path}", d.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let e: serde_json::Value = r.json().await.unwrap();
        assert_eq!(status, 400, "{path}: {e}");
        assert!(message(&e).contains("8,000,000 bytes") && message(&e).contains("before tokenizing"), "{path}: {e}");
        if !param.is_empty() {
            assert_eq!(
                (e["error"]["code"].as_str(), e["error"]["param"].as_str()),
                (Some("context_length_exceeded"), Some(param))
            );
        }
    }
    let grown_mib = (peak_rss_kib(&d) - before) / 1024;
    assert!(grown_mib <= 48, "peak RSS grew by {grown_mib} MiB");
    // Ollama's default `truncate: true` cuts the text before tokenizing it: an embedding of the first tokens.
    let r = d.post("/api/embed", json!({"model": "m", "input": "word ".repeat(1_600_000)})).await;
    let status = r.status().as_u16();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{}", v["error"]);
    assert_eq!(v["prompt_eval_count"], 4096, "{}", v["prompt_eval_count"]);
    let grown_mib = (peak_rss_kib(&d) - before) / 1024;
    assert!(grown_mib <= 48, "peak RSS grew by {grown_mib} MiB");
}

/// An error's message in any of the three shapes: OpenAI's, Anthropic's, Ollama's.
fn message(e: &serde_json::Value) -> &str {
    e["error"]["message"].as_str().or(e["error"].as_str()).unwrap_or_default()
}

async fn post_bytes(d: &Daemon, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let body = serde_json::to_vec(body).unwrap();
    assert!(body.len() < 8 * 1024 * 1024, "{path}: under the body limit");
    let r = d.client().post(format!("{}{path}", d.url)).header("content-type", "application/json").body(body);
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn the_tokenizer_routes_count_tokens_ollama_chat_and_tool_lists_are_refused_by_size() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--model-id", "m"]);
    for (path, body) in [
        ("/v1/embeddings", json!({"model": "m", "input": "warm up"})),
        ("/tokenize", json!({"model": "m", "content": "warm up"})),
        ("/v1/messages/count_tokens", json!({"model": "m", "messages": [{"role": "user", "content": "warm up"}]})),
    ] {
        assert_eq!(d.post(path, body).await.status().as_u16(), 200, "{path}");
    }
    let text = "word ".repeat(1_600_000);
    let tool = |description: &str| json!({"type": "function", "function": {"name": "f", "description": description}});
    let user = json!([{"role": "user", "content": "hi"}]);
    // (path, body, the field named: `param` where the shape has one, else in the message)
    let cases = [
        (
            "/v1/messages/count_tokens",
            json!({"model": "m", "messages": [{"role": "user", "content": text}]}),
            "messages",
        ),
        (
            "/api/chat",
            json!({"model": "m", "messages": [{"role": "user", "content": text}], "stream": false}),
            "messages",
        ),
        ("/v1/chat/completions", json!({"model": "m", "messages": user, "tools": [tool(&text)]}), "tools[0]"),
        ("/api/chat", json!({"model": "m", "messages": user, "tools": [tool(&text)], "stream": false}), "tools[0]"),
        (
            "/v1/messages/count_tokens",
            json!({"model": "m", "messages": user, "tools": [{"name": "f", "description": text, "input_schema": {"type": "object"}}]}),
            "tools[0]",
        ),
    ];
    drop(text);
    let before = peak_rss_kib(&d);
    for (path, body, field) in cases {
        let (status, e) = post_bytes(&d, path, &body).await;
        drop(body);
        assert_eq!(status, 400, "{path}: {e}");
        // Counted by its bytes, never tokenized (the message says so).
        assert!(message(&e).contains("bytes, at least") && message(&e).contains("before tokenizing"), "{path}: {e}");
        assert!(message(&e).contains(&format!("your {field} came to")), "{path}: {e}");
        if let Some(param) = e["error"]["param"].as_str() {
            assert_eq!((param, e["error"]["code"].as_str()), (field, Some("context_length_exceeded")), "{path}: {e}");
        }
    }
    // `/tokenize`'s body is its text: past what the longest text it takes can be as JSON
    // (131,072 bytes for the context of 4,096, 6 bytes each, and 64 KiB: 851,968), 413 unparsed.
    let (status, e) = post_bytes(&d, "/tokenize", &json!({"model": "m", "content": "word ".repeat(1_600_000)})).await;
    assert_eq!(
        (status, e["error"]["code"].as_str(), e["error"]["param"].as_str()),
        (413, Some("payload_too_large"), Some("content")),
        "{e}"
    );
    assert!(message(&e).contains("is 8000026 bytes; this route takes at most 851968 bytes"), "{e}");
    // Counts: more tool definitions than OpenAI allows, more ids than a text `/tokenize` takes gives.
    let tools: Vec<_> = (0..8500).map(|i| json!({"type": "function", "function": {"name": format!("f{i}")}})).collect();
    let (status, e) =
        post_bytes(&d, "/v1/chat/completions", &json!({"model": "m", "messages": user, "tools": tools})).await;
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("tools")), "{e}");
    assert!(message(&e).contains("`tools` has 8,500 definitions; at most 128"), "{e}");
    let (status, e) = post_bytes(&d, "/detokenize", &json!({"model": "m", "tokens": vec![1; 1_000_000]})).await;
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("tokens")), "{e}");
    assert!(message(&e).contains("`tokens` has 1000000 ids; this model turns at most 131072"), "{e}");
    let grown_mib = (peak_rss_kib(&d) - before) / 1024;
    assert!(grown_mib <= 48, "peak RSS grew by {grown_mib} MiB");
    // And it keeps serving.
    let r = d.post("/tokenize", json!({"model": "m", "content": "still here"})).await;
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test]
async fn too_many_documents_and_inputs_are_refused_by_count_before_the_model_loads() {
    // Models of a config file load on demand: one still unloaded after the
    // refusals was refused before anything of the request was prepared.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    std::fs::write(
        &config,
        "[[models]]\nid = \"m\"\npath = \"sim:instant\"\n[[models]]\nid = \"b\"\npath = \"sim:instant\"\n",
    )
    .unwrap();
    let d = Daemon::start(&["--backend", "sim", "--config", config.to_str().unwrap()]);
    let before = peak_rss_kib(&d);
    let rerank = |n: usize| json!({"model": "m", "query": "q", "documents": vec!["d"; n]});
    let cases = [
        ("/v1/rerank", rerank(20_000), "documents", 20_000),
        ("/rerank", rerank(1_500_000), "documents", 1_500_000),
        ("/v1/embeddings", json!({"model": "m", "input": vec!["a"; 1_500_000]}), "input", 1_500_000),
        ("/v1/embeddings", json!({"model": "m", "input": vec![[1]; 1_000_000]}), "input", 1_000_000),
        ("/api/embed", json!({"model": "m", "input": vec!["a"; 1_500_000]}), "input", 1_500_000),
    ];
    for (path, body, param, n) in cases {
        let (status, e) = post_bytes(&d, path, &body).await;
        drop(body);
        assert_eq!(status, 400, "{path}: {e}");
        assert!(message(&e).contains(&format!("`{param}` has {n} items; at most 2048")), "{path}: {e}");
        if path.starts_with("/v1/") {
            assert_eq!(e["error"]["param"].as_str(), Some(param), "{path}: {e}");
        }
    }
    let (_, model) = d.get_json("/v1/models/m").await;
    assert_eq!(model["state"], "unloaded", "{model}");
    // Parsing 1.5 million strings still holds them (~230 MiB in a debug
    // build); preparing them took GBs (1.5 million rerank prompts).
    let grown_mib = (peak_rss_kib(&d) - before) / 1024;
    assert!(grown_mib <= 384, "peak RSS grew by {grown_mib} MiB");
}

/// `/tokenize`'s own limit is what its longest text can be as JSON: a text
/// one byte over the tokenized bound, each byte written as JSON's longest
/// escape, is within it and refused by its bytes after the parse (400, as
/// before); a chunked body (no `Content-Length`) past it is refused as the
/// bytes arrive; the client reads each answer, and the connection stays usable.
#[tokio::test]
async fn tokenize_refuses_a_body_past_its_own_limit_unread_and_no_valid_text() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--model-id", "m"]);
    let escaped = format!(r#"{{"model":"m","content":"{}"}}"#, r"\u0001".repeat(131_073));
    assert!(escaped.len() < 851_968, "within the route's limit: {}", escaped.len());
    let r = d.client().post(format!("{}/tokenize", d.url)).header("content-type", "application/json").body(escaped);
    let r = r.send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (e["error"]["code"].as_str(), e["error"]["param"].as_str()),
        (Some("context_length_exceeded"), Some("content")),
        "{e}"
    );

    let chunk = bytes::Bytes::from("word ".repeat(200_000));
    let chunks = futures_util::stream::iter((0..5).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{}/tokenize", d.url))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    let e: serde_json::Value = r.json().await.unwrap();
    assert!(message(&e).contains("is over 851968 bytes") && e["error"]["param"] == "content", "{e}");
    // The same client's next request on its pool is answered.
    let r = client.post(format!("{}/tokenize", d.url)).json(&json!({"model": "m", "content": "hi"})).send().await;
    assert_eq!(r.unwrap().status().as_u16(), 200);
}

/// A conversation body on the Messages and Ollama routes is held to chat's
/// limits before it is parsed into its request (`request::BodySize`): with
/// the model's context known from its configuration, an oversized message
/// or tool list is refused even where the parse would have refused another
/// field, in the route's error shape, and the model is never loaded for it.
/// What chat's rule does not count (an assistant turn, Claude Code's
/// billing block in `system`) is not counted early either.
#[tokio::test]
async fn conversation_bodies_are_refused_by_size_before_they_are_parsed_or_the_model_loads() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    let table = "[[models]]\nid = \"m\"\npath = \"sim:instant\"\nmax_context_len = 4096\n";
    std::fs::write(&config, table).unwrap();
    let d = Daemon::start(&["--backend", "sim", "--config", config.to_str().unwrap()]);
    let text = "word ".repeat(1_600_000);
    let big = json!([{"role": "user", "content": text}]);
    let user = json!([{"role": "user", "content": "hi"}]);
    let tools: Vec<_> =
        (0..8500).map(|i| json!({"name": format!("f{i}"), "input_schema": {"type": "object"}})).collect();
    let ollama_tools: Vec<_> =
        (0..8500).map(|i| json!({"type": "function", "function": {"name": format!("f{i}")}})).collect();
    // (path, body: each with a field of the wrong type besides, which the parse would name; the field refused)
    let cases = [
        ("/v1/messages/count_tokens", json!({"model": "m", "messages": big, "thinking": 1}), "messages"),
        ("/v1/messages", json!({"model": "m", "messages": big, "max_tokens": "many"}), "messages"),
        ("/api/chat", json!({"model": "m", "messages": big, "stream": "no"}), "messages"),
        ("/v1/messages", json!({"model": "m", "messages": user, "max_tokens": "many", "tools": tools}), "tools"),
        ("/api/chat", json!({"model": "m", "messages": user, "stream": "no", "tools": ollama_tools}), "tools"),
    ];
    drop((text, big, tools, ollama_tools));
    for (path, body, field) in cases {
        let (status, e) = post_bytes(&d, path, &body).await;
        assert_eq!(status, 400, "{path}: {e}");
        if path.starts_with("/v1/messages") {
            assert_eq!(
                (e["type"].as_str(), e["error"]["type"].as_str()),
                (Some("error"), Some("invalid_request_error"))
            );
        } else {
            assert!(e["error"].is_string(), "Ollama's shape: {e}");
        }
        let said = match field {
            "tools" => "`tools` has 8,500 definitions; at most 128".to_owned(),
            _ => format!("your {field} came to 8,000,000 bytes"),
        };
        assert!(message(&e).contains(&said), "{path}: {e}");
    }
    let (_, model) = d.get_json("/v1/models/m").await;
    assert_eq!(model["state"], "unloaded", "{model}");

    // 200 KB that chat's rule leaves uncounted (past the 131,072 bytes of text 4,096 tokens take):
    // counted, not refused.
    let long = "word ".repeat(40_000);
    let billing = format!("x-anthropic-billing-header: cc_version=1; {long}");
    for body in [
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": long}, {"role": "user", "content": "more"}]}),
        json!({"model": "m", "system": [{"type": "text", "text": billing}, {"type": "text", "text": "Be brief."}], "messages": user}),
    ] {
        let (status, v) = post_bytes(&d, "/v1/messages/count_tokens", &body).await;
        assert_eq!(status, 200, "{v}");
        assert!(v["input_tokens"].as_u64().unwrap() > 0, "{v}");
    }
}
