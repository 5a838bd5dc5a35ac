//! `POST /tokenize`, `POST /detokenize` (llama.cpp's shapes) and `rkllmd
//! tokenizer`, which writes the tokenizer.json those routes and the daemon's
//! prompt counts use.

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::process::Command;

async fn post(d: &Daemon, path: &str, body: Value) -> (u16, Value) {
    let r = d.post(path, body).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

fn tokenizer_command(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rkllmd")).arg("tokenizer").args(args).env_remove("RKLLM_LIB").output().unwrap()
}

#[tokio::test]
async fn the_simulators_tokenizer_is_served_and_written() {
    let out = tokenizer_command(&["--model", "sim:instant"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written: tokenizers::Tokenizer = String::from_utf8(out.stdout).unwrap().parse().unwrap();

    let d = Daemon::start(&["--model", "sim:instant", "--model-id", "m"]);
    let text = "Hello wörld, <|im_start|>user";
    let (status, body) = post(&d, "/tokenize", json!({"content": text})).await;
    assert_eq!(status, 200, "{body}");
    let ids: Vec<u32> = serde_json::from_value(body["tokens"].clone()).unwrap();
    // The file the command wrote counts as the daemon does.
    assert_eq!(ids, written.encode(text, false).unwrap().get_ids());
    assert!(ids.contains(&written.token_to_id("<|im_start|>").unwrap()), "special tokens are matched: {ids:?}");

    let (status, body) = post(&d, "/tokenize", json!({"content": text, "with_pieces": true, "model": "m"})).await;
    assert_eq!(status, 200, "{body}");
    let pieces = body["tokens"].as_array().unwrap();
    assert_eq!(pieces.iter().map(|p| p["id"].as_u64().unwrap() as u32).collect::<Vec<_>>(), ids);
    assert_eq!(pieces.iter().map(|p| p["piece"].as_str().unwrap()).collect::<String>(), text);

    let (status, body) = post(&d, "/detokenize", json!({"tokens": ids})).await;
    assert_eq!((status, body["content"].as_str()), (200, Some(text)), "{body}");
    let vocab = written.get_vocab_size(true) as u64;
    let (status, body) = post(&d, "/detokenize", json!({"tokens": [1, vocab]})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("tokens[1]")), "{body}");
    for (path, body) in [("/tokenize", json!({"content": 5})), ("/detokenize", json!({"tokens": [-1]}))] {
        let (status, reply) = post(&d, path, body.clone()).await;
        assert_eq!(status, 400, "{body}: {reply}");
    }
    let (status, _) = post(&d, "/tokenize", json!({"content": "x", "model": "nope"})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn add_special_follows_the_tokenizers_post_processor() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tokenizer/wordlevel.json"));
    let mut tokenizer: Value = serde_json::from_str(&base.unwrap()).unwrap();
    tokenizer["model"]["vocab"]["<s>"] = json!(8);
    tokenizer["added_tokens"].as_array_mut().unwrap().push(json!({"id": 8, "content": "<s>", "single_word": false,
        "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
    tokenizer["post_processor"] = json!({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [8], "tokens": ["<s>"]}}});
    // Beside a model file: found as the daemon finds it, and written as it is.
    let model = dir.path().join("model.rkllm");
    std::fs::write(&model, b"not really a model").unwrap();
    let text = serde_json::to_string_pretty(&tokenizer).unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), &text).unwrap();
    let out = tokenizer_command(&["--model", model.to_str().unwrap()]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), text);

    let d = Daemon::start_with_env(
        &["--backend", "sim", "--model", model.to_str().unwrap(), "--model-id", "m"],
        &[("RKLLM_SIM_PROFILE", "instant")],
    );
    for (add_special, want) in [(false, json!([2, 3])), (true, json!([8, 2, 3]))] {
        let (status, body) = post(&d, "/tokenize", json!({"content": "two three", "add_special": add_special})).await;
        assert_eq!((status, &body["tokens"]), (200, &want), "{body}");
    }
}

#[tokio::test]
async fn without_a_tokenizer_the_routes_and_the_command_say_so() {
    let d = Daemon::start_dlopen(&["--model", "sim:instant", "--model-id", "m"]);
    for (path, body) in [("/tokenize", json!({"content": "x"})), ("/detokenize", json!({"tokens": [1]}))] {
        let (status, body) = post(&d, path, body).await;
        assert_eq!(status, 501, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("has no tokenizer.json"), "{body}");
    }
    // Anthropic's count_tokens too, in Anthropic's error shape.
    let count = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    let (status, body) = post(&d, "/v1/messages/count_tokens", count).await;
    assert_eq!((status, &body["type"], &body["error"]["type"]), (501, &json!("error"), &json!("api_error")), "{body}");
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.rkllm");
    std::fs::write(&model, b"x").unwrap();
    let out = tokenizer_command(&["--model", model.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no tokenizer.json"));
}
