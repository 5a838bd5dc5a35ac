//! Text far longer than the context (8 MB, under the body limit) is refused
//! by its bytes, before it is rendered or tokenized: fast, and without the
//! memory tokenizing costs (~100 bytes per byte of text).

mod common;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

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
        let started = Instant::now();
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
        let took = started.elapsed();
        let message = e["error"]["message"].as_str().or(e["error"].as_str()).unwrap_or_default();
        assert_eq!(status, 400, "{path}: {e}");
        assert!(message.contains("8,000,000 bytes") && message.contains("before tokenizing"), "{path}: {e}");
        if !param.is_empty() {
            assert_eq!(
                (e["error"]["code"].as_str(), e["error"]["param"].as_str()),
                (Some("context_length_exceeded"), Some(param))
            );
        }
        // Tokenizing 8 MB takes seconds (20 s in a debug build) and ~800 MiB.
        assert!(took < Duration::from_secs(2), "{path} took {took:?}");
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
