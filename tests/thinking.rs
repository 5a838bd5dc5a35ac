//! Thinking on and off (`reasoning_effort`, `chat_template_kwargs`, Ollama's
//! `think`) through Qwen3's template and the runtime's `enable_thinking`,
//! and the capabilities `/v1/models` and `/api/show` report from what each
//! model's template can do.

mod common;

use common::{sim_records, Daemon};
use serde_json::{json, Value};

/// Qwen3's template with thinking off pre-fills an empty block.
const NO_THINKING: &str = "<|im_start|>assistant\n<think>\n\n</think>\n\n";

fn ask(extra: Value) -> Value {
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn reasoning_effort_and_think_switch_thinking() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let spec = format!("sim:instant?record={}", record.display());
    let d = Daemon::start(&["--model", &spec, "--model-id", "m", "--template", "qwen3", "--conversation-cache", "off"]);
    let cases = [
        (json!({"reasoning_effort": "none"}), false),
        (json!({"reasoning_effort": "minimal"}), false),
        (json!({"reasoning_effort": "low"}), true),
        (json!({"reasoning_effort": "high"}), true),
        // The template variable, when sent, wins.
        (json!({"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": true}}), true),
        (json!({"reasoning_effort": "high", "enable_thinking": false}), false),
    ];
    for (extra, thinking) in &cases {
        let r = d.post("/v1/chat/completions", ask(extra.clone())).await;
        assert_eq!(r.status(), 200, "{extra}");
        let run = sim_records(&record, "run").pop().unwrap();
        let prompt = run["prompt"].as_str().unwrap();
        assert_eq!(!prompt.ends_with(NO_THINKING), *thinking, "{extra}: {prompt}");
        // The runtime's own switch follows (it matters for the runtime's template).
        assert_eq!(run["enable_thinking"], json!(thinking), "{extra}");
    }
    // Ollama's `think`.
    for (think, thinking) in [(json!(false), false), (json!(true), true), (json!("low"), true)] {
        let body =
            json!({"model": "m", "stream": false, "think": think, "messages": [{"role": "user", "content": "Hi"}]});
        let r = d.post("/api/chat", body).await;
        assert_eq!(r.status(), 200, "{think}");
        let prompt = sim_records(&record, "run").pop().unwrap()["prompt"].as_str().unwrap().to_owned();
        assert_eq!(!prompt.ends_with(NO_THINKING), thinking, "{think}: {prompt}");
    }
    let runs = sim_records(&record, "run").len();
    let r = d.post("/v1/chat/completions", ask(json!({"reasoning_effort": "extreme"}))).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("extreme"), "{body}");
    assert_eq!(sim_records(&record, "run").len(), runs, "nothing ran");
}

#[tokio::test]
async fn capabilities_follow_the_template() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    let mut toml = String::new();
    for family in ["qwen3", "chatml", "gemma"] {
        toml.push_str(&format!("[[models]]\nid = \"{family}\"\npath = \"sim:instant\"\ntemplate = \"{family}\"\n\n"));
    }
    std::fs::write(&config, toml).unwrap();
    let d = Daemon::start(&["--config", config.to_str().unwrap()]);
    let want = [
        ("qwen3", json!(["completion", "embedding", "tools", "thinking"])),
        ("chatml", json!(["completion", "embedding", "tools"])),
        ("gemma", json!(["completion", "embedding"])),
    ];
    // Ollama's show says it loaded or not.
    for (id, caps) in &want {
        let r = d.post("/api/show", json!({"model": id})).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<Value>().await.unwrap()["capabilities"], *caps, "{id}");
    }
    let (_, list) = d.get_json("/v1/models").await;
    let card = |id: &str| list["data"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap().clone();
    for (id, caps) in &want {
        let card = card(id);
        // null until loaded: nothing has been asked of the model yet.
        if card["state"] == "unloaded" {
            assert_eq!(card["capabilities"], Value::Null, "{card}");
        } else {
            assert_eq!(card["capabilities"], *caps, "{card}");
        }
    }
    for (id, caps) in &want {
        let r =
            d.post("/v1/chat/completions", json!({"model": id, "messages": [{"role": "user", "content": "Hi"}]})).await;
        assert_eq!(r.status(), 200);
        let (_, card) = d.get_json(&format!("/v1/models/{id}")).await;
        assert_eq!(card["capabilities"], *caps, "{card}");
    }
}
