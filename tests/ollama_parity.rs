//! What current Ollama reports and rkllmd's Ollama API matches: the
//! cached-prompt count beside the prompt's (so a client's prefill rate
//! counts only what was prefilled). Capabilities: tests/thinking.rs.

mod common;

use common::Daemon;
use serde_json::{json, Value};

async fn chat(d: &Daemon, messages: &Value) -> Value {
    let r = d.post("/api/chat", json!({"model": "m", "stream": false, "messages": messages})).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_follow_up_turn_reports_its_cached_prompt_tokens() {
    let d = Daemon::start(&["--model", "sim:qwen2.5-1.5b?time_scale=0&reply_tokens=6", "--model-id", "m"]);
    let mut messages = json!([{"role": "user", "content": "Tell me about Paris."}]);
    let first = chat(&d, &messages).await;
    assert_eq!(first["prompt_eval_cached_count"], 0, "{first}");
    let reply = first["message"]["content"].as_str().unwrap();
    let history = messages.as_array_mut().unwrap();
    history.push(json!({"role": "assistant", "content": reply}));
    history.push(json!({"role": "user", "content": "And Lyon?"}));
    let second = chat(&d, &messages).await;
    let (count, cached) =
        (second["prompt_eval_count"].as_u64().unwrap(), second["prompt_eval_cached_count"].as_u64().unwrap());
    // The first turn's prompt and reply were reused; the new turn was prefilled.
    assert!(cached >= first["prompt_eval_count"].as_u64().unwrap() && cached < count, "{second}");
    // The same figure as the OpenAI endpoint's usage.
    let openai = d.post("/v1/chat/completions", json!({"model": "m", "messages": messages})).await;
    let body: Value = openai.json().await.unwrap();
    assert_eq!(body["usage"]["prompt_tokens"].as_u64(), Some(count), "{body}");
}
