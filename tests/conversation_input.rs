//! The input half of conversations through the real binary: chat templates
//! from files and built-ins, stateless multi-turn, prompt length with a
//! tokenizer, and the errors a template or a tool list can cause.

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path)
}

/// The `run` calls the simulated runtime recorded.
/// The recorded runs, each with its `prompt` as text: a run sent as token
/// ids (the conversation cache) is decoded with the simulator's tokenizer.
fn runs(record: &Path) -> Vec<Value> {
    common::sim_records(record, "run")
        .into_iter()
        .map(|mut run| {
            if let Some(ids) = run["token_ids"].as_array() {
                let bytes: Vec<u8> = ids
                    .iter()
                    .flat_map(|id| rkllm_sim::token_bytes(id.as_u64().unwrap() as u32).unwrap().to_vec())
                    .collect();
                run["prompt"] = String::from_utf8(bytes).unwrap().into();
            }
            run
        })
        .collect()
}

fn calls(record: &Path, name: &str) -> usize {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&format!("\"call\":\"{name}\"")))
        .count()
}

fn sim(record: &Path) -> String {
    format!("sim:instant?reply_tokens=3&record={}", record.display())
}

async fn chat(d: &Daemon, body: Value) -> (u16, Value) {
    let r = d.post("/v1/chat/completions", body).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn a_configured_jinja_file_renders_with_special_tokens_from_its_neighbour() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("mine.jinja");
    std::fs::write(
        &template,
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
    )
    .unwrap();
    std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"bos_token": {"content": "<B>"}}"#).unwrap();
    let record = dir.path().join("record.jsonl");
    let d = Daemon::start(&["--model", &sim(&record), "--chat-template", template.to_str().unwrap()]);
    let messages = json!([
        {"role": "developer", "content": " Be brief. "},
        {"role": "user", "content": "Hi"},
    ]);
    let (status, body) = chat(&d, json!({"model": "sim-instant", "messages": messages})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(runs(&record)[0]["prompt"], "<B>[system] Be brief.\n[user] Hi\n[assistant]");
    assert!(d.log().contains("mine.jinja"), "the startup log names the template");
}

#[tokio::test]
async fn a_tokenizer_config_json_template_and_disabling_the_runtime_template() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokenizer_config.json");
    let template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}<|assistant|>";
    std::fs::write(&config, json!({"eos_token": "</s>", "chat_template": template}).to_string()).unwrap();
    let record = dir.path().join("record.jsonl");
    let d = Daemon::start(&["--model", &sim(&record), "--chat-template", config.to_str().unwrap()]);
    let (status, _) = chat(&d, common::chat("sim-instant", "Hello")).await;
    assert_eq!(status, 200);
    assert_eq!(runs(&record)[0]["prompt"], "<|user|>Hello</s><|assistant|>");
    assert_eq!(calls(&record, "set_chat_template"), 1, "the daemon renders, so the runtime's template is off");
}

#[tokio::test]
async fn every_turn_of_a_long_conversation_reaches_the_runtime_in_one_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = Daemon::start(&["--model", &sim(&record)]);
    let mut messages = vec![json!({"role": "system", "content": "You count."})];
    let mut expected = String::from("<|im_start|>system\nYou count.<|im_end|>\n");
    for turn in 0..12 {
        messages.push(json!({"role": "user", "content": format!("question {turn}")}));
        messages.push(json!({"role": "assistant", "content": format!("answer {turn}")}));
        expected +=
            &format!("<|im_start|>user\nquestion {turn}<|im_end|>\n<|im_start|>assistant\nanswer {turn}<|im_end|>\n");
    }
    messages.push(json!({"role": "user", "content": "last"}));
    expected += "<|im_start|>user\nlast<|im_end|>\n<|im_start|>assistant\n";
    let (status, body) = chat(&d, json!({"model": "sim-instant", "messages": messages})).await;
    assert_eq!(status, 200, "{body}");
    let run = &runs(&record)[0];
    assert_eq!(run["prompt"], expected.as_str(), "sim models default to the built-in chatml template");
    // A fresh daemon's cache is empty: the whole transcript is sent, kept for the next turn.
    assert_eq!(run["keep_history"], true);
    assert_eq!(run["role"], "user");
    // The simulator's tokenizer counts the whole transcript, and the runtime prefilled all of it.
    assert_eq!(body["usage"]["prompt_tokens"], rkllm_sim::tokenize(&expected).len());
    assert_eq!(body["timings"]["prompt_n"], rkllm_sim::tokenize(&expected).len());
}

#[tokio::test]
async fn a_tokenizer_counts_prompt_tokens_and_refuses_what_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("words.jinja");
    std::fs::write(&template, "{% for m in messages %}{{ m.content }} {% endfor %}").unwrap();
    let record = dir.path().join("record.jsonl");
    let tokenizer = fixture("tokenizer/wordlevel.json");
    let d = Daemon::start(&[
        "--model",
        &sim(&record),
        "--chat-template",
        template.to_str().unwrap(),
        "--tokenizer",
        tokenizer.to_str().unwrap(),
        "--max-context-len",
        "20",
        "--max-new-tokens",
        "16",
        // A word-level test vocabulary the simulator does not share: count only.
        "--conversation-cache",
        "off",
    ]);
    // Seven words (one unknown to the vocabulary) = seven tokens (the simulator would count 14).
    let seven = json!([{"role": "user", "content": "one two three"}, {"role": "assistant", "content": "four five"}, {"role": "user", "content": "six zebra"}]);
    let (status, body) = chat(&d, json!({"model": "sim-instant", "messages": seven, "max_tokens": 13})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"], 7);
    assert_eq!(body["usage"]["total_tokens"], 7 + body["usage"]["completion_tokens"].as_i64().unwrap());

    let (status, body) = chat(&d, json!({"model": "sim-instant", "messages": seven, "max_tokens": 14})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    assert_eq!(body["error"]["param"], "messages");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("21 tokens (7 in the messages, 14 in the completion)"),
        "{body}"
    );

    // Without max_tokens the prompt only needs room for one token.
    let twenty = json!([{"role": "user", "content": "one two three four five ".repeat(4)}]);
    let (status, body) = chat(&d, json!({"model": "sim-instant", "messages": twenty})).await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("context_length_exceeded")));
    // The legacy endpoint counts its raw prompt the same way.
    let r = d
        .post(
            "/v1/completions",
            json!({"model": "sim-instant", "prompt": "one two three four five six seven", "max_tokens": 14}),
        )
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (body["error"]["code"].clone(), body["error"]["param"].clone()),
        (json!("context_length_exceeded"), json!("prompt"))
    );
    let r = d.post("/v1/completions", json!({"model": "sim-instant", "prompt": "one two", "max_tokens": 2})).await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["usage"]["prompt_tokens"], 2);
    assert_eq!(runs(&record).len(), 2, "refused prompts never reach the runtime");
}

#[tokio::test]
async fn a_template_raise_exception_is_a_400_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = Daemon::start(&["--model", &sim(&record), "--template", "gemma"]);
    let messages = json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]);
    let (status, body) = chat(&d, json!({"model": "sim-instant", "messages": messages})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["message"], "Conversation roles must alternate user/assistant/user/assistant/...");
    assert_eq!(body["error"]["param"], "messages");
    let (status, _) = chat(&d, common::chat("sim-instant", "still serving")).await;
    assert_eq!(status, 200);
    assert_eq!(
        runs(&record)[0]["prompt"],
        "<bos><start_of_turn>user\nstill serving<end_of_turn>\n<start_of_turn>model\n"
    );
}

#[tokio::test]
async fn tools_and_tool_choice_are_validated_and_rendered() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = Daemon::start(&["--model", &sim(&record), "--template", "qwen3"]);
    let tool = json!({"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}});
    let ask = |extra: Value| {
        let mut body = json!({"model": "sim-instant", "messages": [{"role": "user", "content": "Time?"}], "tools": [tool.clone()]});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    for (extra, param) in [
        (json!({"tools": [{"type": "function", "function": {"name": "bad name"}}]}), "tools[0].function.name"),
        (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
        (json!({"tool_choice": "sometimes"}), "tool_choice"),
        (json!({"tool_choice": {"type": "function", "function": {"name": "get_date"}}}), "tool_choice"),
        (json!({"tools": [], "tool_choice": "required"}), "tool_choice"),
        (
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "function": {"name": "get_time"}}]}]}),
            "messages[0].tool_calls[0].function.arguments",
        ),
    ] {
        let (status, body) = chat(&d, ask(extra.clone())).await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some(param)), "{extra}: {body}");
    }
    assert!(runs(&record).is_empty());

    let (status, _) =
        chat(&d, ask(json!({"tool_choice": {"type": "function", "function": {"name": "get_time"}}}))).await;
    assert_eq!(status, 200);
    let (status, _) =
        chat(&d, ask(json!({"tool_choice": "none", "chat_template_kwargs": {"enable_thinking": false}}))).await;
    assert_eq!(status, 200);
    let runs = runs(&record);
    let named = runs[0]["prompt"].as_str().unwrap();
    assert!(
        named.starts_with("<|im_start|>system\nYou must call the function `get_time` in your reply.\n\n# Tools"),
        "{named}"
    );
    assert!(named.contains(
        r#"{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}"#
    ));
    assert_eq!(runs[1]["prompt"], "<|im_start|>user\nTime?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    assert_eq!(runs[1]["enable_thinking"], false);
}

/// A tool-call turn as OpenAI clients send it: `content: null`.
fn call_turn() -> Value {
    json!({"role": "assistant", "content": null,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]})
}

#[tokio::test]
async fn a_null_content_on_a_tool_call_turn_renders_as_empty_where_templates_need_it() {
    let dir = tempfile::tempdir().unwrap();
    for (family, messages, want) in [
        (
            "phi3",
            json!([{"role": "user", "content": "Time?"}, call_turn(),
                {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}, {"role": "user", "content": "Thanks"}]),
            "<|user|>\nTime?<|end|>\n<|assistant|>\n<|end|>\n<|user|>\nThanks<|end|>\n<|assistant|>\n",
        ),
        (
            "gemma",
            json!([{"role": "user", "content": "Time?"}, call_turn(), {"role": "user", "content": "Thanks"}]),
            "<bos><start_of_turn>user\nTime?<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n<start_of_turn>user\nThanks<end_of_turn>\n<start_of_turn>model\n",
        ),
    ] {
        let record = dir.path().join(format!("{family}.jsonl"));
        let d = Daemon::start(&["--model", &sim(&record), "--template", family]);
        let (status, body) = chat(&d, json!({"model": "sim-instant", "messages": messages})).await;
        assert_eq!(status, 200, "{family}: {body}");
        assert_eq!(runs(&record)[0]["prompt"], want, "{family}");
    }
}

#[tokio::test]
async fn a_template_failure_names_the_message_it_comes_from() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("strict.jinja");
    // Fails on `tool` messages only (a string plus a number).
    std::fs::write(&template, "{% for m in messages %}{% if m.role == 'tool' %}{{ m.tool_call_id + 1 }}{% endif %}{{ m.content }}{% endfor %}").unwrap();
    let record = dir.path().join("record.jsonl");
    let d = Daemon::start(&["--model", &sim(&record), "--chat-template", template.to_str().unwrap()]);
    let messages = json!([{"role": "user", "content": "Time?"}, call_turn(),
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]);
    let tool = json!({"type": "function", "function": {"name": "get_time"}});
    // With a tool choice that puts a system message first, the index is still the client's.
    for extra in [json!({}), json!({"tools": [tool], "tool_choice": "required"})] {
        let mut body = json!({"model": "sim-instant", "messages": messages});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, body) = chat(&d, body).await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some("messages[2]")), "{extra}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("the chat template failed on messages[2] (a `tool` message): "), "{message}");
        assert!(message.contains("unsupported types"), "{message}");
    }
    assert!(runs(&record).is_empty());
}

#[tokio::test]
async fn enable_thinking_in_chat_template_kwargs_must_be_a_boolean() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = Daemon::start(&["--model", &sim(&record), "--template", "qwen3"]);
    for value in [json!("false"), json!(0), json!(null)] {
        let mut body = common::chat("sim-instant", "Hi");
        body["chat_template_kwargs"] = json!({"enable_thinking": value});
        let (status, body) = chat(&d, body).await;
        assert_eq!(
            (status, body["error"]["param"].as_str()),
            (400, Some("chat_template_kwargs.enable_thinking")),
            "{value}: {body}"
        );
    }
    assert!(runs(&record).is_empty(), "nothing ran");
    let mut body = common::chat("sim-instant", "Hi");
    body["chat_template_kwargs"] = json!({"enable_thinking": false});
    assert_eq!(chat(&d, body).await.0, 200);
    assert_eq!(runs(&record)[0]["enable_thinking"], false);
}

#[tokio::test]
async fn a_template_beside_the_model_file_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.rkllm");
    std::fs::write(&model, b"not really a model").unwrap();
    std::fs::write(dir.path().join("chat_template.jinja"), "{{ messages[-1].content }}!").unwrap();
    let record = dir.path().join("record.jsonl");
    let d = Daemon::start_with_env(
        &["--backend", "sim", "--model", model.to_str().unwrap(), "--template", "llama3"],
        &[("RKLLM_SIM_RECORD", record.to_str().unwrap()), ("RKLLM_SIM_PROFILE", "instant")],
    );
    let (status, _) = chat(&d, common::chat("model", "Hello")).await;
    assert_eq!(status, 200);
    assert_eq!(runs(&record)[0]["prompt"], "Hello!", "a file beside the model beats the built-in");
}

#[test]
fn an_invalid_template_is_a_startup_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("broken.jinja");
    std::fs::write(&template, "{% for m in messages %}{{ m.content }}").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--port", "0", "--model", "sim:instant", "--chat-template", template.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken.jinja"), "{stderr}");
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), "{}").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--port", "0", "--model", "sim:instant", "--tokenizer", bad.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&bad.path().display().to_string()));
}

#[tokio::test]
async fn without_a_tokenizer_the_runtimes_refusal_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    // Through dlopen the daemon cannot know the library's tokenizer.
    let d = Daemon::start_dlopen(&["--model", &sim(&record), "--max-context-len", "40", "--max-new-tokens", "8"]);
    // ~270 bytes rendered: not clearly over 40 tokens by bytes alone (at least 35), so the runtime judges.
    let (status, body) = chat(&d, common::chat("sim-instant", &"word ".repeat(25))).await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("context_length_exceeded")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("The runtime refused the prompt before generating anything"), "{message}");
    assert!(message.contains("maximum context length of 40 tokens") && message.contains("no tokenizer"), "{message}");
    assert_eq!(runs(&record).len(), 1, "without a tokenizer the runtime is the judge");
}
