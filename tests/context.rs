//! The context a model is served with: unless `max_context_len` is set, the
//! one the model was converted for, as the runtime states it at init
//! (`max_context_limit`); the simulator's `context_limit` plays a model
//! converted for 16k.

mod common;

use common::Daemon;
use serde_json::{json, Value};

/// What the loaded model says of its context through Ollama's `/api/show`.
async fn served_context(d: &Daemon) -> Value {
    let r = d.post("/api/show", json!({"model": "m"})).await;
    assert_eq!(r.status(), 200);
    let show: Value = r.json().await.unwrap();
    show["model_info"]["rkllm.context_length"].clone()
}

/// A chat of about `words` prompt tokens.
async fn chat(d: &Daemon, words: usize) -> (u16, Value) {
    let text = "word ".repeat(words);
    let r = d
        .post(
            "/v1/chat/completions",
            json!({"model": "m", "max_tokens": 8,
        "messages": [{"role": "user", "content": text}]}),
        )
        .await;
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn a_model_converted_for_16k_serves_16k_without_a_flag() {
    let d = Daemon::start(&["--model", "sim:instant?reply_tokens=4&context_limit=16384", "--model-id", "m"]);
    let (status, body) = chat(&d, 12_000).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 12_000, "{body}");
    assert_eq!(served_context(&d).await, 16_384);
    // Past it, the usual refusal, naming the model's own context.
    let (status, body) = chat(&d, 17_000).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("context_length_exceeded")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("16,384"), "{body}");
}

#[tokio::test]
async fn a_set_max_context_len_is_served_as_set() {
    let d = Daemon::start(&[
        "--model",
        "sim:instant?reply_tokens=4&context_limit=16384",
        "--model-id",
        "m",
        "--max-context-len",
        "8192",
    ]);
    assert_eq!(chat(&d, 12_000).await.0, 400);
    assert_eq!(served_context(&d).await, 8192);
}

#[tokio::test]
async fn a_model_converted_for_the_default_is_loaded_once() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let spec = format!("sim:instant?reply_tokens=4&record={}", record.display());
    let d = Daemon::start(&["--model", &spec, "--model-id", "m"]);
    assert_eq!(served_context(&d).await, 4096);
    let inits = common::sim_records(&record, "init");
    assert_eq!(inits.len(), 1, "{inits:?}");
    assert_eq!(inits[0]["max_context_len"], 4096);
    drop(d);
    // Converted for 16k: initialised again, with its own.
    let spec = format!("sim:instant?reply_tokens=4&context_limit=16384&record={}", record.display());
    let d = Daemon::start(&["--model", &spec, "--model-id", "m"]);
    assert_eq!(served_context(&d).await, 16_384);
    let contexts: Vec<Value> =
        common::sim_records(&record, "init")[1..].iter().map(|r| r["max_context_len"].clone()).collect();
    assert_eq!(contexts, [4096, 16_384]);
}

/// A prompt that cannot fit is refused in the words each client family
/// reads as "context too long" (agents compact once on it), with the numbers.
#[tokio::test]
async fn a_prompt_that_does_not_fit_is_refused_in_each_familys_words() {
    let d = Daemon::start(&["--model", "sim:instant?reply_tokens=4", "--model-id", "m"]);
    let text = "word ".repeat(5000);
    let number = |text: &str, after: &str| -> u64 {
        let rest = &text[text.find(after).unwrap_or_else(|| panic!("{after:?} in {text}")) + after.len()..];
        rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };

    let r =
        d.post("/v1/chat/completions", json!({"model": "m", "messages": [{"role": "user", "content": text}]})).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");

    let r = d
        .post("/v1/messages", json!({"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": text}]}))
        .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("prompt is too long: "), "{message}");
    assert!(number(message, "prompt is too long: ") > 5000, "{message}");
    assert_eq!(number(message, " tokens > "), 4096, "{message}");

    let r = d
        .post("/api/chat", json!({"model": "m", "stream": false, "messages": [{"role": "user", "content": text}]}))
        .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    let message = body["error"].as_str().unwrap();
    assert!(message.starts_with("the input length exceeds the context length ("), "{message}");
    assert_eq!(number(message, " tokens > "), 4096, "{message}");
}
