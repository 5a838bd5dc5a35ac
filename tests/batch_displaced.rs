//! Conversations displaced from their batch slots (`engine/batch_files.rs`)
//! through the binary: more closed-loop conversations than slots come back
//! from batched runs' prompt-cache files instead of prefilling from zero,
//! with the replies a cache-off daemon gives; a runtime that does not save
//! or restore batched runs' files as guessed is found out at load, loudly,
//! and its conversations are still served right.

mod common;

use common::{Chats, Daemon, Turn};
use serde_json::json;

const MODEL: &str = "m";
const USERS: [&str; 6] =
    ["Hello there!", "What runs on the NPU?", "And how fast is it?", "Why?", "Tell me more.", "Thanks, bye."];

/// The simulated model with `keys`, paced so that clients overlap; `extra`
/// daemon arguments.
fn start(keys: &str, extra: &[&str]) -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0.05&reply_tokens=12{keys}");
    let cache_dir = dir.path().to_str().unwrap();
    let args = [&["--model", &spec, "--model-id", MODEL, "--conversation-cache-dir", cache_dir][..], extra].concat();
    (Daemon::start(&args), dir)
}

impl Chats {
    /// Conversation `c`'s first `turns` turns, each resending its history
    /// with the daemon's replies as soon as the last reply ended.
    async fn converse(&self, c: usize, turns: usize) -> Vec<Turn> {
        let mut messages = vec![json!({"role": "system", "content": format!("You are assistant number {c}.")})];
        let mut all = Vec::new();
        for user in &USERS[..turns] {
            messages.push(json!({"role": "user", "content": user}));
            let t = self.turn(&messages).await;
            messages.push(json!({"role": "assistant", "content": t.content}));
            all.push(t);
        }
        all
    }
}

/// `clients` conversations of `turns` turns at once (closed loop).
async fn closed_loop(d: &Daemon, clients: usize, turns: usize) -> Vec<Vec<Turn>> {
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let api = Chats::of(d, MODEL);
            tokio::spawn(async move { api.converse(c, turns).await })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.push(task.await.unwrap());
    }
    all
}

/// Every turn's reply is the one a daemon without the cache gives.
async fn assert_replies_as_without_cache(all: &[Vec<Turn>]) {
    let (off, _dir) = start("", &["--conversation-cache", "off"]);
    for (c, turns) in all.iter().enumerate() {
        let plain = Chats::of(&off, MODEL).converse(c, turns.len()).await;
        for (i, (t, p)) in turns.iter().zip(&plain).enumerate() {
            assert_eq!(t.content, p.content, "conversation {c}, turn {i}: the cache must not change the reply");
            assert_eq!(t.prompt(), p.prompt(), "conversation {c}, turn {i}: the whole prompt is counted");
        }
    }
}

async fn eight_conversations_on_four_slots(keys: &str) {
    let (d, _dir) = start(keys, &["--batch", "4"]);
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["batch_files"], "accepted", "{health}");
    let all = closed_loop(&d, 8, USERS.len()).await;
    let follow_ups: Vec<&Turn> = all.iter().flat_map(|turns| &turns[1..]).collect();
    let cached = follow_ups.iter().filter(|t| t.cached() > 0).count();
    let restored = follow_ups.iter().filter(|t| t.timings["cache"] == "restored").count();
    // Without the files: 0 of 40 (every run clears the other group's slots).
    assert!(cached * 10 >= follow_ups.len() * 8, "{cached} of {} follow-ups cached", follow_ups.len());
    assert!(restored > 0, "more conversations than slots: some come back from files");
    for t in &follow_ups {
        if t.timings["cache"] == "restored" {
            // The file holds the previous turn's prompt: the reply and the
            // new message are prefilled.
            assert!(t.cached() > 0 && t.cached() < t.prompt(), "{}", t.timings);
        }
    }
    assert_eq!(d.metric("rkllmd_conversation_cache_off_total").await, Some(0.0));
    assert!(!d.log().contains("switched off"), "{}", d.log());
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["batch_files"], "accepted", "every restore checked: {health}");
    assert_replies_as_without_cache(&all).await;
}

#[tokio::test]
async fn eight_closed_loop_conversations_on_four_slots_come_back_from_files() {
    eight_conversations_on_four_slots("").await;
}

#[tokio::test]
async fn where_slots_may_go_without_input_too() {
    eight_conversations_on_four_slots("&short_batch=accept").await;
}

/// A daemon whose probe at load found batched runs' files not working: it
/// says so (WARN, metric, `/health`) and serves every turn right, each
/// displaced conversation prefilled again.
async fn switched_off_at_load(keys: &str, found: &str, why: &str) {
    let (d, _dir) = start(keys, &["--batch", "4"]);
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["batch_files"], found, "{health}");
    assert!(d.log().contains("batched runs save no prompt-cache files"), "{}", d.log());
    assert!(d.log().contains(why), "{}", d.log());
    assert_eq!(d.metric("rkllmd_conversation_cache_off_total").await, Some(1.0));
    let all = closed_loop(&d, 8, 3).await;
    for t in all.iter().flatten() {
        assert_ne!(t.timings["cache"], "restored", "{}", t.timings);
    }
    assert_replies_as_without_cache(&all).await;
}

#[tokio::test]
async fn a_runtime_that_saves_no_batched_runs_file_is_found_out_at_load() {
    switched_off_at_load("&batch_cache=refuse", "refused", "a batched run asked to save its prompt cache").await;
}

#[tokio::test]
async fn a_batched_runs_file_that_spares_nothing_is_found_out_at_load() {
    // The file loads, but no slot's prefill is spared (rknn-llm #399).
    switched_off_at_load("&cache_lies=1", "misplaced", "prefilled 12 ids (expected 4)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_inside_a_batched_prefill_leaves_the_files_on() {
    // Every run prefills for 0.8 s (16 s at time_scale 0.05: an abort
    // waits for its end, within the 1 s grace); the runtime
    // writes no file for a run aborted in its prefill (`abort_unsaved`).
    let record = tempfile::NamedTempFile::new().unwrap();
    let keys = format!("&prefill_extra_ms=16000&abort_unsaved=1&record={}", record.path().display());
    let (d, _dir) = start(&keys, &["--batch", "2"]);
    let turn = |content: &str| {
        let (api, messages) = (Chats::of(&d, MODEL), vec![json!({"role": "user", "content": content})]);
        tokio::spawn(async move { api.turn(&messages).await })
    };
    let stream = |content: &str| {
        let body = json!({"model": MODEL, "stream": true, "messages": [{"role": "user", "content": content}]});
        let request = d.client().post(format!("{}/v1/chat/completions", d.url)).json(&body).send();
        tokio::spawn(async move { request.await.unwrap() })
    };
    // X runs; streams A and B, then C, queue behind it in that order.
    let x = turn("X");
    d.wait_queue(|running, waiting| running == 1 && waiting == 0).await;
    let a = stream("A");
    d.wait_queue(|_, waiting| waiting == 1).await;
    let b = stream("B");
    d.wait_queue(|_, waiting| waiting == 2).await;
    let c = turn("C");
    d.wait_queue(|_, waiting| waiting == 3).await;
    x.await.unwrap();
    // A and B's run started (a stream's head comes with its run's start) and
    // saves its file, C waiting; both clients leave inside its prefill.
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    drop((a, b));
    assert!(!c.await.unwrap().content.is_empty());
    // Each `run` is recorded, then its `run_end`.
    let (mut saving, mut aborted) = (false, false);
    for call in common::sim_calls(record.path()) {
        match call["call"].as_str() {
            Some("run") => saving = call["prompt_cache"]["save_prompt_cache"] == 1,
            Some("run_end") => aborted |= saving && call["end"] == "abort" && call["generate_tokens"] == 0,
            _ => {}
        }
    }
    assert!(aborted, "a saving batched run was aborted in its prefill: {:?}", common::sim_calls(record.path()));
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["batch_files"], "accepted", "an abort is no failure of the files: {health}");
    assert_eq!(d.metric("rkllmd_conversation_cache_off_total").await, Some(0.0));
    assert!(!d.log().contains("switched off"), "{}", d.log());
}

#[tokio::test]
async fn a_runtime_that_never_returns_from_the_batch_file_probe_fails_the_load_and_the_model_is_refused() {
    // Loaded on demand; its first run, the batch-file probe's saving run
    // (no short-batch probe), hangs for good: the load fails 1 s past the
    // probe's 1 s bound instead of waiting for the runtime forever.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    let spec = "sim:qwen2.5-1.5b?time_scale=0.05&hang_after=0";
    std::fs::write(&config, format!("[[models]]\nid = \"{MODEL}\"\npath = \"{spec}\"\n")).unwrap();
    let (config, cache_dir) = (config.to_str().unwrap(), dir.path().to_str().unwrap());
    let d = Daemon::start(&[
        "--config",
        config,
        "--conversation-cache-dir",
        cache_dir,
        "--batch",
        "2",
        "--batch-short-probe",
        "false",
        "--first-token-timeout-secs",
        "1",
    ]);
    for _ in 0..2 {
        let r = d.post("/v1/chat/completions", common::chat(MODEL, "hi")).await;
        assert_eq!(r.status().as_u16(), 503);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "model_wedged", "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("batch-file probe"), "{body}");
    }
    assert_eq!(d.metric(&format!("rkllmd_model_loads_wedged_total{{model=\"{MODEL}\"}}")).await, Some(1.0));
}
