//! LoRA adapters as models, through the binary: `BASE:NAME` ids in
//! `/v1/models` and `/api/tags`, the adapter reaching the runtime (the
//! simulator's record), the base model running without one, an unknown
//! adapter refused, an adapter that fails to load failing the load.

mod common;

use common::{assert_config_errors, chat, sim_records, Daemon};
use serde_json::{json, Value};
use std::path::Path;

/// A daemon serving `base` with the adapters `style` (scale 0.5) and `terse`.
fn start(dir: &Path, extra: &[&str]) -> (Daemon, std::path::PathBuf) {
    let record = dir.join("record.jsonl");
    for name in ["style.rkllm", "terse.rkllm"] {
        std::fs::write(dir.join(name), "adapter").unwrap();
    }
    let model = format!("sim:instant?reply_tokens=12&record={}", record.display());
    let style = format!("style={}:0.5", dir.join("style.rkllm").display());
    let terse = format!("terse={}", dir.join("terse.rkllm").display());
    let mut args = vec!["--model", &model, "--model-id", "base", "--lora", &style, "--lora", &terse];
    args.extend_from_slice(extra);
    (Daemon::start(&args), record)
}

async fn reply(d: &Daemon, model: &str) -> (u16, Value) {
    let r = d.post("/v1/chat/completions", chat(model, "Tell me about the weather.")).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn adapters_are_models_and_each_run_names_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (d, record) = start(dir.path(), &[]);

    let (_, models) = d.get_json("/v1/models").await;
    let ids: Vec<_> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["base", "base:style", "base:terse"]);
    assert_eq!(models["data"][1]["parent"], "base");
    assert_eq!(models["data"][0]["parent"], Value::Null);
    let (status, card) = d.get_json("/v1/models/base:terse").await;
    assert_eq!((status, card["state"].as_str()), (200, Some("loaded")));
    let loads = sim_records(&record, "load_lora");
    let loaded: Vec<_> = loads.iter().map(|l| (l["name"].as_str().unwrap(), l["scale"].as_f64().unwrap())).collect();
    assert_eq!(loaded, [("style", 0.5), ("terse", 1.0)], "loaded once each, with the model");

    let (status, styled) = reply(&d, "base:style").await;
    assert_eq!(status, 200, "{styled}");
    assert_eq!(styled["model"], "base:style");
    let (status, plain) = reply(&d, "base").await;
    assert_eq!((status, plain["model"].as_str()), (200, Some("base")));
    assert_ne!(
        styled["choices"][0]["message"]["content"], plain["choices"][0]["message"]["content"],
        "the simulator's adapter changes the reply"
    );
    let runs: Vec<_> = sim_records(&record, "run").iter().map(|r| r["lora_adapter"].clone()).collect();
    assert_eq!(runs, [json!("style"), Value::Null], "the adapter reaches the runtime; the base model runs with NULL");
    assert_eq!(sim_records(&record, "load_lora").len(), 2, "requests do not load adapters again");

    let r = d
        .post(
            "/api/chat",
            json!({"model": "base:terse", "stream": false,
        "messages": [{"role": "user", "content": "Hi"}]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["model"], "base:terse");
    assert_eq!(sim_records(&record, "run").last().unwrap()["lora_adapter"], "terse");

    let (_, tags) = d.get_json("/api/tags").await;
    let tag = tags["models"].as_array().unwrap().iter().find(|m| m["name"] == "base:style").cloned();
    assert_eq!(tag.map(|t| t["details"]["parent_model"].clone()), Some(json!("base")));

    for unknown in ["base:nope", "other:style", "base:"] {
        let (status, body) = reply(&d, unknown).await;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("model_not_found")), "{unknown}");
    }
    assert_eq!(sim_records(&record, "run").len(), 3, "an unknown adapter never reaches the runtime");
    // Ollama's `:latest` tag names the model itself.
    let (status, body) = reply(&d, "base:latest").await;
    assert_eq!((status, body["model"].as_str()), (200, Some("base")), "{body}");
    assert_eq!(sim_records(&record, "run").last().unwrap()["lora_adapter"], Value::Null);
}

#[tokio::test]
async fn a_batched_run_carries_its_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let (d, record) = start(dir.path(), &["--batch", "2"]);
    let (status, body) = reply(&d, "base:style").await;
    assert_eq!(status, 200, "{body}");
    let run = sim_records(&record, "run").pop().unwrap();
    assert_eq!(run["inputs"].as_array().map(Vec::len), Some(2), "a batched run: {run}");
    assert_eq!(run["lora_adapter"], "style");
}

#[test]
fn an_adapter_that_fails_to_load_fails_the_start_with_the_runtimes_words() {
    let dir = tempfile::tempdir().unwrap();
    let missing = format!("gone={}", dir.path().join("missing.rkllm").display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--host", "127.0.0.1", "--port", "0", "--model", "sim:instant", "--lora", &missing])
        .env_remove("RKLLM_LIB")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("loading the LoRA adapter `gone` failed"), "{stderr}");
    assert!(stderr.contains("E rkllm: failed to open lora adapter file"), "the runtime's own words: {stderr}");
}

#[tokio::test]
async fn an_on_demand_model_whose_adapter_fails_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    let missing = dir.path().join("missing.rkllm");
    std::fs::write(
        &config,
        format!("[[models]]\nid = \"m\"\npath = \"sim:instant\"\nlora = [\"gone={}\"]\n", missing.display()),
    )
    .unwrap();
    let d = Daemon::start(&["--config", config.to_str().unwrap()]);
    let (status, body) = reply(&d, "m:gone").await;
    // 503: nothing ran; a proxy may try another board (docs/api.md, "Errors").
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("model_load_failed")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("failed to open lora adapter file"), "{message}");
    let (_, card) = d.get_json("/v1/models/m").await;
    assert_eq!(card["state"], "unloaded");
}

#[test]
fn a_bad_lora_setting_is_a_configuration_error() {
    assert_config_errors(&[&["--lora", "noequals"][..], &["--lora", "a:b=/x"], &["--lora", "a=/x", "--lora", "a=/y"]]);
}

#[tokio::test]
async fn embeddings_and_rerank_run_with_the_adapter_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let (d, record) = start(dir.path(), &[]);
    let r = d.post("/v1/embeddings", json!({"model": "base:style", "input": ["one text", "another"]})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["model"], "base:style");
    let r = d.post("/v1/embeddings", json!({"model": "base", "input": "plain"})).await;
    assert_eq!(r.status(), 200);
    let r = d.post("/api/embed", json!({"model": "base:terse", "input": "ollama"})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["model"], "base:terse");
    let runs: Vec<_> = sim_records(&record, "run").iter().map(|r| r["lora_adapter"].clone()).collect();
    assert_eq!(
        runs,
        [json!("style"), json!("style"), Value::Null, json!("terse")],
        "one run per input, each with its adapter"
    );
    let r =
        d.post("/v1/rerank", json!({"model": "base:terse", "query": "weather", "documents": ["sun", "rain"]})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["model"], "base:terse");
    let runs: Vec<_> = sim_records(&record, "run").iter().skip(4).map(|r| r["lora_adapter"].clone()).collect();
    assert_eq!(runs, [json!("terse"), json!("terse")], "a rerank runs each document with the adapter");
    let r = d.post("/v1/embeddings", json!({"model": "base:nope", "input": "x"})).await;
    assert_eq!(r.status(), 404);
}

/// The conversation cache holds positions computed with one adapter (or
/// none): a follow-up with another must not reuse them.
#[tokio::test]
async fn an_adapter_never_reuses_the_kv_cache_of_the_base_model() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _record) = start(dir.path(), &[]);
    // A first turn with the base model, then its follow-up with `model`: the cached tokens.
    let follow_up = |question: &'static str, model: &'static str| {
        let d = &d;
        async move {
            let first: Value = d.post("/v1/chat/completions", chat("base", question)).await.json().await.unwrap();
            let answer = &first["choices"][0]["message"]["content"];
            let messages = json!([{"role": "user", "content": question}, {"role": "assistant", "content": answer},
                {"role": "user", "content": "And tomorrow?"}]);
            let reply: Value = d
                .post("/v1/chat/completions", json!({"model": model, "messages": messages}))
                .await
                .json()
                .await
                .unwrap();
            reply["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap()
        }
    };
    assert!(follow_up("Tell me about the weather.", "base").await > 0, "the same model reuses its conversation");
    assert_eq!(follow_up("Tell me about the sea.", "base:style").await, 0, "an adapter run prefills everything");
}

#[test]
fn a_model_id_that_names_an_adapter_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let adapter = dir.path().join("style.rkllm");
    std::fs::write(&adapter, "adapter").unwrap();
    let config = dir.path().join("rkllmd.toml");
    let tables = format!(
        "[[models]]\nid = \"base\"\npath = \"sim:instant\"\nlora = [\"style={}\"]\n\n\
         [[models]]\nid = \"base:style\"\npath = \"sim:qwen2-0.5b\"\n",
        adapter.display()
    );
    std::fs::write(&config, tables).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--config", config.to_str().unwrap(), "--port", "0"])
        .env_remove("RKLLM_LIB")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("the model id `base:style` (sim:qwen2-0.5b) is also the id of an adapter of `base`"),
        "{stderr}"
    );
}
