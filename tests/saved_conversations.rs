//! Conversations saved as prompt-cache files (issue 21, items 2, 3, 8): a
//! conversation displaced from the KV cache by side tasks or by another
//! conversation is restored, under a budget (least recently used out), and a
//! file that does not spare its prefill switches the files off loudly.
//! Every reply is the cache-off daemon's.

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::path::Path;

const MODEL: &str = "sim-qwen2.5-1.5b";
const SPEC: &str = "sim:qwen2.5-1.5b?time_scale=0&reply_tokens=12";

fn start(spec: &str, extra: &[&str]) -> Daemon {
    Daemon::start(&[&["--model", spec, "--model-id", MODEL][..], extra].concat())
}

/// (reply, usage, timings) of a chat request.
async fn chat(d: &Daemon, messages: &[Value]) -> (String, Value, Value) {
    let r = d.post("/v1/chat/completions", json!({"model": MODEL, "messages": messages})).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let reply = body["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    (reply, body["usage"].clone(), body["timings"].clone())
}

/// A conversation's opening and its follow-up after `reply`.
fn opening(name: &str) -> Vec<Value> {
    vec![json!({"role": "user", "content": format!("Conversation {name}: hello there")})]
}

fn follow_up(name: &str, reply: &str) -> Vec<Value> {
    let mut m = opening(name);
    m.extend([json!({"role": "assistant", "content": reply}), json!({"role": "user", "content": "Tell me more."})]);
    m
}

async fn metrics(d: &Daemon) -> String {
    d.client().get(format!("{}/metrics", d.url)).send().await.unwrap().text().await.unwrap()
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

fn recorded(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openwebui").join(name);
    let mut body: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    body["model"] = json!(MODEL);
    body
}

#[tokio::test]
async fn open_webuis_tasks_and_an_embedding_between_turns_do_not_cost_the_conversation() {
    let on = start(SPEC, &[]);
    let off = start(SPEC, &["--conversation-cache", "off"]);
    let (reply, first, _) = chat(&on, &opening("A")).await;
    // What Open WebUI sends after a reply, then an embedding (a RAG query).
    for task in ["task_title.json", "task_tags.json", "task_follow_ups.json"] {
        let r = on.post("/v1/chat/completions", recorded(task)).await;
        assert_eq!(r.status(), 200, "{task}");
    }
    let r = on.post("/v1/embeddings", json!({"model": MODEL, "input": "what is an NPU"})).await;
    assert_eq!(r.status(), 200);
    let (next, usage, timings) = chat(&on, &follow_up("A", &reply)).await;
    let (plain, _, _) = chat(&off, &follow_up("A", &reply)).await;
    assert_eq!(next, plain, "the restored conversation gives the cache-off reply");
    assert_eq!(timings["cache"], "restored", "{timings}");
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], first["prompt_tokens"], "{usage}");
    assert_eq!(
        timings["prompt_n"].as_i64().unwrap(),
        usage["prompt_tokens"].as_i64().unwrap() - first["prompt_tokens"].as_i64().unwrap(),
        "the runtime prefilled only the reply and the new message: {timings}"
    );
    let m = metrics(&on).await;
    assert_eq!(metric(&m, "rkllmd_conversation_cache_total{found=\"restored\",reason=\"\"}"), Some(1.0), "{m}");
    assert!(metric(&m, "rkllmd_conversations_saved_bytes").is_some_and(|b| b > 0.0), "{m}");
}

#[tokio::test]
async fn over_a_small_budget_the_least_recently_used_conversation_goes() {
    let d = start(SPEC, &["--conversation-cache-count", "2"]);
    let (a, _, _) = chat(&d, &opening("A")).await;
    let (b, _, _) = chat(&d, &opening("B")).await;
    // A third conversation: A, the least recently used, is evicted.
    let (c, _, _) = chat(&d, &opening("C")).await;
    let (_, _, t) = chat(&d, &follow_up("C", &c)).await;
    assert_eq!(t["cache"], "resident", "{t}");
    let (_, _, t) = chat(&d, &follow_up("B", &b)).await;
    assert_eq!(t["cache"], "restored", "{t}");
    let (_, usage, t) = chat(&d, &follow_up("A", &a)).await;
    assert_eq!((&t["cache"], &t["cache_miss"]), (&json!("miss"), &json!("other")), "{t}");
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    let m = metrics(&d).await;
    assert!(metric(&m, "rkllmd_conversation_evictions_total").is_some_and(|n| n >= 1.0), "{m}");
    assert_eq!(metric(&m, "rkllmd_conversations_saved"), Some(2.0), "{m}");
    // /v1/models and Ollama's /api/ps show them.
    let (_, models) = d.get_json("/v1/models").await;
    let card = &models["data"][0]["conversations"];
    assert_eq!((&card["warm"], &card["saved"]), (&json!(2), &json!(2)), "{models}");
    assert!(card["saved_bytes"].as_u64().unwrap() > 0 && card["resident_tokens"].as_u64().unwrap() > 0, "{card}");
    let (_, ps) = d.get_json("/api/ps").await;
    assert_eq!(ps["models"][0]["conversations"], *card, "{ps}");
}

/// Through the dlopen'ed simulator, whose prompt cache loads but spares
/// nothing (`cache_lies=1`): the first restore is found out by the
/// runtime's prefill count, the files are switched off with a WARN and a
/// metric, and every reply is still right.
#[tokio::test]
async fn a_file_that_spares_no_prefill_switches_the_files_off_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = dir.path().join("tokenizer.json");
    std::fs::write(&tokenizer, rkllm_sim::tokenizer_json()).unwrap();
    let spec = format!("{SPEC}&cache_lies=1");
    let args =
        ["--model", &spec, "--model-id", MODEL, "--template", "chatml", "--tokenizer", tokenizer.to_str().unwrap()];
    let d = Daemon::start_dlopen(&args);
    let off = start(SPEC, &["--conversation-cache", "off"]);
    let (a, _, _) = chat(&d, &opening("A")).await;
    let (b, _, _) = chat(&d, &opening("B")).await;
    for (name, reply) in [("A", &a), ("B", &b)] {
        let (next, usage, t) = chat(&d, &follow_up(name, reply)).await;
        let (plain, _, _) = chat(&off, &follow_up(name, reply)).await;
        assert_eq!(next, plain);
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0, "{name}: {usage}");
        assert_eq!(t["cache"], "miss", "{name}: {t}");
        assert_eq!(t["prompt_n"], usage["prompt_tokens"], "{name}: the whole prompt was prefilled");
    }
    let m = metrics(&d).await;
    assert_eq!(metric(&m, "rkllmd_conversation_cache_off_total"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "rkllmd_conversations_saved"), Some(0.0), "{m}");
    // One WARN with its reason (read after the exit).
    let (_, log) = d.exit();
    assert_eq!(log.matches("did not spare its prefill").count(), 1, "{log}");
}

/// `prompt_cache_key` and `X-Session-Id` name a conversation: a named one
/// whose earlier turn was edited is a miss that says so, and its new state
/// replaces the old one's file rather than taking another.
#[tokio::test]
async fn a_named_conversation_with_an_edited_turn_is_an_edited_miss() {
    let d = start(SPEC, &[]);
    let body = |messages: &[Value]| json!({"model": MODEL, "messages": messages});
    let url = format!("{}/v1/chat/completions", d.url);
    let mut first = body(&opening("A"));
    first["prompt_cache_key"] = json!("chat-1");
    let r: Value = d.client().post(&url).json(&first).send().await.unwrap().json().await.unwrap();
    let a = r["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    chat(&d, &opening("B")).await;
    let mut edited = follow_up("A", &a);
    edited[0] = json!({"role": "user", "content": "Conversation A, edited"});
    let r = d.client().post(&url).header("X-Session-Id", "chat-1").json(&body(&edited)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r: Value = r.json().await.unwrap();
    assert_eq!((&r["timings"]["cache"], &r["timings"]["cache_miss"]), (&json!("miss"), &json!("edited")), "{r}");
    let m = metrics(&d).await;
    assert_eq!(metric(&m, "rkllmd_conversations_saved"), Some(2.0), "the edit replaced chat-1's file: {m}");
    // Unnamed, the same edit is just another prompt.
    let (_, _, t) = chat(&d, &follow_up("A", &a)).await;
    assert_eq!(t["cache_miss"], "other", "{t}");

    let mut long = body(&opening("C"));
    long["prompt_cache_key"] = json!("k".repeat(257));
    let r = d.client().post(&url).json(&long).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let r: Value = r.json().await.unwrap();
    assert_eq!(r["error"]["param"], "prompt_cache_key", "{r}");
}

#[tokio::test]
async fn a_file_that_loads_slower_than_its_prefill_is_not_restored_again() {
    // Loading (and saving) costs 2 ms a token here (40 s per 1000 tokens ×
    // 0.05), about twenty times what prefilling costs: the first restore
    // measures the load, a fresh conversation's run the prefill.
    let spec = "sim:qwen2.5-1.5b?time_scale=0.05&reply_tokens=12&cache_file_ms=40000";
    let on = start(spec, &[]);
    let off = start(SPEC, &["--conversation-cache", "off"]);
    let long = |name: &str| {
        let words = "the quick brown fox jumps over the lazy dog and then runs back home again ".repeat(5);
        vec![json!({"role": "user", "content": format!("Conversation {name}: {words}")})]
    };
    let with_reply = |name: &str, reply: &str| {
        let mut m = long(name);
        m.extend([json!({"role": "assistant", "content": reply}), json!({"role": "user", "content": "More."})]);
        m
    };
    let (a, ..) = chat(&on, &long("A")).await;
    let (b, ..) = chat(&on, &long("B")).await;
    let (_, _, restored) = chat(&on, &with_reply("A", &a)).await;
    assert_eq!(restored.get("cache"), Some(&json!("restored")), "nothing measured yet: {restored}");
    chat(&on, &long("C")).await;
    let (reply, usage, timings) = chat(&on, &with_reply("B", &b)).await;
    assert_eq!((&timings["cache"], &timings["cache_miss"]), (&json!("miss"), &json!("costlier")), "{timings}");
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    let (plain, ..) = chat(&off, &with_reply("B", &b)).await;
    assert_eq!(reply, plain);
}

#[tokio::test]
async fn past_the_ram_budget_a_conversation_moves_to_the_disk_tier_and_is_restored_from_it() {
    let disk = tempfile::tempdir().unwrap();
    let dir = disk.path().to_str().unwrap();
    let on = start(SPEC, &["--conversation-cache-count", "1", "--conversation-cache-disk-dir", dir]);
    let off = start(SPEC, &["--conversation-cache", "off"]);
    let (a, ..) = chat(&on, &opening("A")).await;
    // B's file takes the RAM tier's one place: A's goes to disk, copied
    // off the async threads.
    chat(&on, &opening("B")).await;
    let mut m = metrics(&on).await;
    while metric(&m, "rkllmd_conversations_on_disk") != Some(1.0) {
        assert_eq!(metric(&m, "rkllmd_conversations_saved"), Some(2.0), "{m}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        m = metrics(&on).await;
    }
    let files: Vec<_> = std::fs::read_dir(disk.path())
        .unwrap()
        .flat_map(|model_dir| std::fs::read_dir(model_dir.unwrap().path()).unwrap())
        .collect();
    assert_eq!(files.len(), 1, "one file in the model's disk directory");
    let (reply, usage, timings) = chat(&on, &follow_up("A", &a)).await;
    assert_eq!(timings["cache"], "restored", "{timings}");
    assert!(usage["prompt_tokens_details"]["cached_tokens"].as_i64().unwrap() > 0, "{usage}");
    let (plain, ..) = chat(&off, &follow_up("A", &a)).await;
    assert_eq!(reply, plain);
    let (_, models) = on.get_json("/v1/models").await;
    let warm = &models["data"][0]["conversations"];
    assert_eq!(
        (&warm["saved"], &warm["on_disk"]),
        (&json!(2), &json!(1)),
        "A came back to RAM, B went to disk: {warm}"
    );
}
