//! The first run with nothing but a `.rkllm` file: the daemon detects the
//! template family from the file name or the special tokens inside the file,
//! and when it recognises nothing it still serves whole conversations,
//! folded into the runtime template's one user message. Through the real
//! binary and the simulated runtime loaded with dlopen, as a board loads
//! librkllmrt.so; the simulator records what reached the C ABI.

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A sparse model file with special-token text written at these offsets.
fn model_file(dir: &Path, name: &str, marks: &[(u64, &str)]) -> String {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(2 << 20).unwrap();
    for (at, text) in marks {
        file.write_all_at(text.as_bytes(), *at).unwrap();
    }
    path.to_str().unwrap().to_owned()
}

/// rkllmd on the sim cdylib, recording every runtime call to `record`.
fn start(model: &str, record: &Path) -> Daemon {
    start_with(model, record, &[])
}

fn start_with(model: &str, record: &Path, extra: &[&str]) -> Daemon {
    let lib = common::sim_cdylib();
    let args =
        [&["--backend", "rkllm", "--lib", lib.to_str().unwrap(), "--model", model, "--model-id", "m"], extra].concat();
    Daemon::start_with_env(
        &args,
        &[
            ("RKLLM_SIM_RECORD", record.to_str().unwrap()),
            ("RKLLM_SIM_PROFILE", "instant"),
            ("RKLLM_SIM_REPLY_TOKENS", "3"),
        ],
    )
}

fn calls(record: &Path, name: &str) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|c| c["call"] == name)
        .collect()
}

fn conversation() -> Value {
    json!({"model": "m", "messages": [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Again"},
    ]})
}

async fn send(d: &Daemon, body: Value) -> (u16, Value) {
    let r = d.post("/v1/chat/completions", body).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn a_bare_model_file_gets_conversations_folded_into_the_runtime_template() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = start(&model_file(dir.path(), "model.rkllm", &[]), &record);
    let log = d.log();
    assert!(log.contains("WARN") && log.contains("runtime-folded") && log.contains("nothing recognised"), "{log}");
    let r = d.post("/v1/chat/completions", conversation()).await;
    assert_eq!(r.headers()["x-rkllmd-template-mode"], "runtime-folded");
    assert_eq!(r.status(), 200);
    let (_, card) = d.get_json("/v1/models/m").await;
    assert_eq!(card["template"]["mode"], "runtime-folded");
    assert!(card["template"]["reason"].as_str().unwrap().starts_with("nothing recognised"), "{card}");
    assert_eq!(
        calls(&record, "run")[0]["prompt"],
        "System: Be terse.\n\nUser: Hi\n\nAssistant: Hello.\n\nUser: Again",
        "the whole conversation, in the documented form"
    );
    assert!(calls(&record, "set_chat_template").is_empty(), "the runtime's template stays on to wrap it");
    // Tools and their results are folded too; nothing valid is refused.
    let mut with_tools = conversation();
    with_tools["tools"] =
        json!([{"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}]);
    with_tools["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "12:00"}),
    ]);
    let (status, body) = send(&d, with_tools).await;
    assert_eq!(status, 200, "{body}");
    let prompt = calls(&record, "run")[1]["prompt"].as_str().unwrap().to_owned();
    assert!(prompt.contains("<tool_call>") && prompt.contains("Assistant called clock({}) [c1]"), "{prompt}");
    assert!(prompt.ends_with("Tool result [c1]: 12:00"), "{prompt}");
}

#[tokio::test]
async fn a_named_model_file_is_rendered_with_its_family() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = start(&model_file(dir.path(), "Llama-3.2-1B-Instruct_w8a8_RK3588.rkllm", &[]), &record);
    assert!(d.log().contains("detected llama3 from the file name"), "{}", d.log());
    let r = d.post("/v1/chat/completions", conversation()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-rkllmd-template-mode"], "detected-family");
    let (_, card) = d.get_json("/v1/models/m").await;
    assert_eq!((&card["template"]["mode"], &card["template"]["family"]), (&json!("detected-family"), &json!("llama3")));
    let prompt = calls(&record, "run")[0]["prompt"].as_str().unwrap().to_owned();
    assert!(prompt.starts_with("<|begin_of_text|><|start_header_id|>system<|end_header_id|>"), "{prompt}");
    assert!(prompt.contains("Be terse.<|eot_id|>") && prompt.contains("Hello.<|eot_id|>"), "{prompt}");
    assert!(prompt.ends_with("<|start_header_id|>assistant<|end_header_id|>\n\n"), "{prompt}");
    let set = calls(&record, "set_chat_template");
    assert_eq!(set.len(), 1, "the daemon renders, so the runtime's template is switched off");
    assert_eq!((&set[0]["system"], &set[0]["prefix"], &set[0]["postfix"]), (&json!(""), &json!(""), &json!("")));
}

#[tokio::test]
async fn special_tokens_inside_the_file_decide_and_overrule_a_misleading_name() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    // A Gemma model saved under a Qwen-like name: the file's tokens win.
    let model = model_file(dir.path(), "qwen-chat.rkllm", &[(300_000, "<start_of_turn>"), (300_040, "<end_of_turn>")]);
    let d = start(&model, &record);
    let log = d.log();
    assert!(
        log.contains("detected gemma from the special tokens in the file (`<start_of_turn>` at byte 300000)"),
        "{log}"
    );
    assert!(log.contains("WARN") && log.contains("suggests chatml, which they contradict"), "{log}");
    let (status, body) = send(&d, conversation()).await;
    assert_eq!(status, 200, "{body}");
    let prompt = calls(&record, "run")[0]["prompt"].as_str().unwrap().to_owned();
    assert!(prompt.contains("<start_of_turn>user\nBe terse.\n\nHi<end_of_turn>"), "{prompt}");
    assert!(prompt.ends_with("<start_of_turn>model\n"), "{prompt}");
}

#[tokio::test]
async fn a_configured_family_beats_detection() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let model = model_file(dir.path(), "model.rkllm", &[(4096, "<|im_start|>")]);
    let lib = common::sim_cdylib();
    let d = Daemon::start_with_env(
        &["--backend", "rkllm", "--lib", lib.to_str().unwrap(), "--model", &model, "--template", "phi3"],
        &[("RKLLM_SIM_RECORD", record.to_str().unwrap()), ("RKLLM_SIM_PROFILE", "instant")],
    );
    assert!(d.log().contains("configured template = \"phi3\""), "{}", d.log());
    let (status, _) = send(&d, common::chat("model", "Hello")).await;
    assert_eq!(status, 200);
    assert!(calls(&record, "run")[0]["prompt"].as_str().unwrap().contains("<|user|>\nHello<|end|>"));
}

#[tokio::test]
async fn with_the_runtimes_template_the_prompt_size_is_the_runtimes_count() {
    // A tokenizer but no template: the daemon counts the folded text, and
    // the runtime wraps it in its own template, which adds tokens.
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let tokenizer = dir.path().join("tokenizer.json");
    std::fs::write(&tokenizer, rkllm_sim::tokenizer_json()).unwrap();
    let d =
        start_with(&model_file(dir.path(), "model.rkllm", &[]), &record, &["--tokenizer", tokenizer.to_str().unwrap()]);
    let r = d.post("/v1/chat/completions", conversation()).await;
    assert_eq!(
        (r.status().as_u16(), &r.headers()["x-rkllmd-template-mode"]),
        (200, &"runtime-folded".parse().unwrap())
    );
    let reply: Value = r.json().await.unwrap();
    let folded = calls(&record, "run")[0]["prompt"].as_str().unwrap().to_owned();
    let text: Value = d.post("/tokenize", json!({"model": "m", "content": folded})).await.json().await.unwrap();
    let text_tokens = text["tokens"].as_array().map(Vec::len).unwrap_or_else(|| panic!("{text}")) as u64;
    let prompt_tokens = reply["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(Some(prompt_tokens), reply["timings"]["prompt_n"].as_u64(), "{reply}");
    assert!(prompt_tokens > text_tokens, "{prompt_tokens} tokens run, {text_tokens} in the folded text: {reply}");
}
