//! The conversation cache through the binary: a follow-up turn prefills
//! only what is new, anything else starts clean, and the reply is always
//! the one the cache-off daemon gives.

mod common;

use common::{sim_cdylib, Daemon};
use serde_json::{json, Value};

/// One chat turn: (status, reply text, usage, timings).
async fn turn(d: &Daemon, messages: &Value, max_tokens: u32) -> (u16, String, Value, Value) {
    let r = d
        .post(
            "/v1/chat/completions",
            json!({"model": "sim-qwen2.5-1.5b", "messages": messages, "max_tokens": max_tokens}),
        )
        .await;
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    let text = body["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_owned();
    (status, text, body["usage"].clone(), body["timings"].clone())
}

fn start(extra: &[&str]) -> Daemon {
    let mut args = vec!["--model", "sim:qwen2.5-1.5b?time_scale=0&reply_tokens=12", "--model-id", "sim-qwen2.5-1.5b"];
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

/// Plays a conversation of `users` turns, resending the history with the
/// daemon's own replies; returns each turn's (reply, usage, timings).
async fn converse(d: &Daemon, users: &[&str]) -> Vec<(String, Value, Value)> {
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    let mut turns = Vec::new();
    for user in users {
        messages.push(json!({"role": "user", "content": user}));
        let (status, reply, usage, timings) = turn(d, &Value::Array(messages.clone()), 64).await;
        assert_eq!(status, 200, "{usage}");
        messages.push(json!({"role": "assistant", "content": reply}));
        turns.push((reply, usage, timings));
    }
    turns
}

const USERS: [&str; 4] = ["Hello there!", "What runs on the NPU?", "And how fast is it?", "Thanks, bye."];

#[tokio::test]
async fn follow_up_turns_prefill_only_what_is_new_and_replies_match_the_cache_off_run() {
    let on = start(&[]);
    let off = start(&["--conversation-cache", "off"]);
    let cached = converse(&on, &USERS).await;
    let plain = converse(&off, &USERS).await;
    for (i, ((reply, usage, timings), (plain_reply, plain_usage, _))) in cached.iter().zip(&plain).enumerate() {
        assert_eq!(reply, plain_reply, "turn {i}: the cache must not change the reply");
        assert_eq!(
            usage["prompt_tokens"], plain_usage["prompt_tokens"],
            "turn {i}: prompt_tokens counts the whole prompt"
        );
        assert_eq!(plain_usage["prompt_tokens_details"]["cached_tokens"], 0);
        let cached_tokens = usage["prompt_tokens_details"]["cached_tokens"].as_i64().unwrap();
        assert_eq!(timings["cache_n"], cached_tokens);
        if i == 0 {
            assert_eq!(cached_tokens, 0, "the first turn has nothing cached");
            assert_eq!((&timings["cache"], &timings["cache_miss"]), (&json!("miss"), &json!("empty")), "{timings}");
        } else {
            // The cache holds the previous prompt and every generated token.
            let (_, prev, _) = &cached[i - 1];
            let expected = prev["prompt_tokens"].as_i64().unwrap() + prev["completion_tokens"].as_i64().unwrap();
            assert_eq!(cached_tokens, expected, "turn {i}: {usage}");
            assert_eq!(timings["cache"], "resident", "turn {i}: {timings}");
        }
        // The runtime prefilled only the rest.
        assert_eq!(
            timings["prompt_n"].as_i64().unwrap(),
            usage["prompt_tokens"].as_i64().unwrap() - cached_tokens,
            "turn {i}: {timings}"
        );
    }
    assert_eq!(on.metric("rkllmd_kv_cache_mismatch_total").await, Some(0.0), "no disagreement");
}

#[tokio::test]
async fn an_edited_history_and_interleaved_conversations_are_clean_misses() {
    let on = start(&[]);
    let off = start(&["--conversation-cache", "off"]);
    let first = converse(&on, &USERS[..2]).await;
    // The same conversation with its first user turn edited: no prefix.
    let edited = json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello, edited!"},
        {"role": "assistant", "content": first[0].0},
        {"role": "user", "content": USERS[1]},
    ]);
    let (status, reply, usage, _) = turn(&on, &edited, 64).await;
    let (_, plain_reply, _, _) = turn(&off, &edited, 64).await;
    assert_eq!(status, 200);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0, "{usage}");
    assert_eq!(reply, plain_reply);

    // Two conversations taking turns: each displaces the other from the KV
    // cache; its first prompt, saved as a file, is restored. Without saved
    // conversations every turn is a miss. Every reply is right.
    let unsaved = start(&["--conversation-cache-count", "0"]);
    for (d, saved) in [(&on, true), (&unsaved, false)] {
        let a = json!([{"role": "user", "content": "Conversation A"}]);
        let b = json!([{"role": "user", "content": "Conversation B"}]);
        let (_, a1, a_usage, _) = turn(d, &a, 64).await;
        let (_, b1, b_usage, _) = turn(d, &b, 64).await;
        let a2 = json!([{"role": "user", "content": "Conversation A"}, {"role": "assistant", "content": a1}, {"role": "user", "content": "more"}]);
        let b2 = json!([{"role": "user", "content": "Conversation B"}, {"role": "assistant", "content": b1}, {"role": "user", "content": "more"}]);
        for (follow_up, first) in [(&a2, &a_usage), (&b2, &b_usage)] {
            let (_, reply, usage, timings) = turn(d, follow_up, 64).await;
            let (_, plain_reply, _, _) = turn(&off, follow_up, 64).await;
            assert_eq!(reply, plain_reply);
            let cached = &usage["prompt_tokens_details"]["cached_tokens"];
            if saved {
                assert_eq!((cached, &timings["cache"]), (&first["prompt_tokens"], &json!("restored")), "{timings}");
                assert_eq!(
                    timings["prompt_n"].as_i64().unwrap(),
                    usage["prompt_tokens"].as_i64().unwrap() - cached.as_i64().unwrap()
                );
            } else {
                assert_eq!(
                    (cached, &timings["cache"], &timings["cache_miss"]),
                    (&json!(0), &json!("miss"), &json!("other")),
                    "{timings}"
                );
            }
        }
    }
}

/// A chat UI sends no `max_tokens`: the run may take the server's whole
/// `max_new_tokens`, which a long conversation leaves no room for, and the
/// reply ends where the context does. A fresh prefill of the prompt runs
/// so; a follow-up that continues the cache takes the same positions, so it
/// reuses them (it once started clean: every turn of a conversation past
/// half the context was a full prefill), and gives the cache-off reply.
#[tokio::test]
async fn a_turn_without_max_tokens_past_the_limits_room_still_reuses_the_cache() {
    let limits = ["--max-context-len", "200", "--max-new-tokens", "150"];
    let on = start(&limits);
    let off = start(&[&limits[..], &["--conversation-cache", "off"]].concat());
    let mut messages = vec![json!({"role": "user", "content": "Hello there!"})];
    let (_, reply, _, _) = turn(&on, &Value::Array(messages.clone()), 16).await;
    messages.extend([json!({"role": "assistant", "content": reply}), json!({"role": "user", "content": "Go on."})]);
    let (status, reply, _, _) = turn(&on, &Value::Array(messages.clone()), 16).await;
    assert_eq!(status, 200);
    messages.extend([json!({"role": "assistant", "content": reply}), json!({"role": "user", "content": "More."})]);
    let body = json!({"model": "sim-qwen2.5-1.5b", "messages": messages});
    let mut replies = Vec::new();
    for d in [&on, &off] {
        let r = d.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(r.status(), 200);
        replies.push(r.json::<Value>().await.unwrap());
    }
    let prompt = replies[0]["usage"]["prompt_tokens"].as_i64().unwrap();
    assert!(prompt + 150 > 200 && prompt < 200, "the case this test is about: {}", replies[0]);
    let cached = replies[0]["usage"]["prompt_tokens_details"]["cached_tokens"].as_i64().unwrap();
    assert!(cached > 0, "{}", replies[0]);
    assert_eq!(replies[0]["timings"]["cache"], "resident", "{}", replies[0]);
    assert_eq!(replies[0]["timings"]["prompt_n"], prompt - cached, "only the new part was prefilled");
    assert_eq!(replies[0]["choices"][0], replies[1]["choices"][0], "the same reply, cut where the context ends");
}

#[tokio::test]
async fn a_runtime_whose_cache_size_disagrees_falls_back_cleanly_with_a_warning() {
    let d = Daemon::start(&[
        "--model",
        "sim:qwen2.5-1.5b?time_scale=0&reply_tokens=8&kv_size_skew=1",
        "--model-id",
        "sim-qwen2.5-1.5b",
    ]);
    let turns = converse(&d, &USERS[..3]).await;
    for (i, (_, usage, _)) in turns.iter().enumerate() {
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0, "turn {i}: never reuse what does not check out");
    }
    assert_eq!(d.metric("rkllmd_kv_cache_mismatch_total").await, Some(3.0));
}

#[tokio::test]
async fn through_dlopen_the_cache_needs_the_tokenizer_and_off_means_stateless() {
    let lib = sim_cdylib();
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = dir.path().join("tokenizer.json");
    std::fs::write(&tokenizer, rkllm_sim::tokenizer_json()).unwrap();
    let spec = "sim:qwen2.5-1.5b?time_scale=0&reply_tokens=10";
    let base = [
        "--backend",
        "rkllm",
        "--lib",
        lib.to_str().unwrap(),
        "--model",
        spec,
        "--model-id",
        "sim-qwen2.5-1.5b",
        "--template",
        "chatml",
    ];

    let with = Daemon::start(&[&base[..], &["--tokenizer", tokenizer.to_str().unwrap()]].concat());
    let turns = converse(&with, &USERS[..2]).await;
    assert!(turns[1].1["prompt_tokens_details"]["cached_tokens"].as_i64().unwrap() > 0, "{}", turns[1].1);

    // No tokenizer: the cache is off, and the start log says why.
    let without = Daemon::start(&base);
    let turns = converse(&without, &USERS[..2]).await;
    assert_eq!(turns[1].1["prompt_tokens_details"]["cached_tokens"], 0);
    assert!(without.log().contains("conversation cache off"), "{}", without.log());
}
