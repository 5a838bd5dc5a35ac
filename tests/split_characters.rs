//! A character split over tokens, through the binary under every way the
//! runtime may deliver it (the simulator's `split_chars`; the manual leaves
//! it open, shared/rkllm-runtime.md): the reply's text is exact, streamed
//! and not, on both ABIs, alone and in a batch slot, and a follow-up that
//! resends it is cached. A runtime whose bytes fit no convention is reported
//! (a metric and a WARN), never shown as U+FFFD.

mod common;

use common::{read_sse, script, Daemon};
use serde_json::{json, Value};

/// Accents, CJK, emoji (one with a skin-tone modifier): each character is
/// outside the simulator's vocabulary, so it comes over several tokens.
const REPLY: &str = "héllo wörld 你好 🙂 naïve 🚀👍🏽 end";

const CONVENTIONS: [&str; 5] = ["bytes", "repeat", "empty", "null", "raw"];

fn start(split: &str, extra: &[&str]) -> (Daemon, tempfile::NamedTempFile) {
    let file = script(&[("", REPLY)]);
    let spec = format!("sim:instant?split_chars={split}&script={}", file.path().display());
    let args = [&["--model", &spec, "--model-id", "m"][..], extra].concat();
    (Daemon::start(&args), file)
}

fn chat(messages: &Value, stream: bool) -> Value {
    json!({"model": "m", "messages": messages, "stream": stream})
}

async fn reply(d: &Daemon, messages: &Value) -> (String, Value) {
    let r = d.post("/v1/chat/completions", chat(messages, false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    (body["choices"][0]["message"]["content"].as_str().unwrap().to_owned(), body["usage"].clone())
}

async fn streamed(d: &Daemon, messages: &Value) -> String {
    let r = d.post("/v1/chat/completions", chat(messages, true)).await;
    assert_eq!(r.status(), 200);
    let (events, _) = read_sse(r).await;
    let chunks = events.iter().filter(|e| e.data != "[DONE]").map(|e| e.json());
    chunks.filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned)).collect()
}

/// The counter of bytes that fit no convention, from `/metrics`.
async fn dropped_bytes(d: &Daemon) -> u64 {
    let text = d.client().get(format!("{}/metrics", d.url)).send().await.unwrap().text().await.unwrap();
    let line = text.lines().find(|l| l.starts_with("rkllmd_runtime_text_dropped_bytes_total ")).expect("the counter");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

async fn exact_under_every_convention(extra: &[&str]) {
    for split in CONVENTIONS {
        let (d, _script) = start(split, extra);
        let user = json!([{"role": "user", "content": "Say it."}]);
        let (text, usage) = reply(&d, &user).await;
        assert_eq!(text, REPLY, "split_chars={split} {extra:?}, not streamed");
        assert_eq!(streamed(&d, &user).await, REPLY, "split_chars={split} {extra:?}, streamed");
        // The follow-up resends the reply as the client saw it: the cache
        // holds what the runtime generated, so it is found.
        let follow_up = json!([
            {"role": "user", "content": "Say it."},
            {"role": "assistant", "content": text},
            {"role": "user", "content": "Again."}
        ]);
        let (_, next) = reply(&d, &follow_up).await;
        let cached = next["prompt_tokens_details"]["cached_tokens"].as_i64().unwrap();
        let before = usage["prompt_tokens"].as_i64().unwrap() + usage["completion_tokens"].as_i64().unwrap();
        assert_eq!(cached, before, "split_chars={split} {extra:?}: the follow-up reuses the first turn ({next})");
        assert_eq!(dropped_bytes(&d).await, 0, "split_chars={split} {extra:?}");
    }
}

#[tokio::test]
async fn split_characters_are_exact_under_every_convention() {
    exact_under_every_convention(&[]).await;
}

#[tokio::test]
async fn split_characters_are_exact_under_every_convention_on_abi_1_2() {
    exact_under_every_convention(&["--runtime-abi", "1.2"]).await;
}

#[tokio::test]
async fn split_characters_are_exact_under_every_convention_in_a_batch_slot() {
    exact_under_every_convention(&["--batch", "2"]).await;
}

/// `lost`: a split character's first bytes never arrive. The rest cannot be
/// shown as a character; it is left out, counted and logged, and the reply
/// carries no U+FFFD.
#[tokio::test]
async fn bytes_that_fit_no_convention_are_reported_not_shown_as_replacement_characters() {
    let (d, _script) = start("lost", &[]);
    let (text, _) = reply(&d, &json!([{"role": "user", "content": "Say it."}])).await;
    assert!(!text.contains('\u{FFFD}'), "{text}");
    assert!(text.starts_with("hllo wrld"), "the ASCII text stays: {text}");
    assert!(dropped_bytes(&d).await > 0, "counted");
    let (_, log) = d.exit();
    assert!(log.contains("fits no known way of splitting a character"), "logged:\n{log}");
}
