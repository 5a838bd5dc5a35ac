//! The conversation cache in batched runs (`--batch N`, `engine/slots.rs`)
//! through the binary, in-process and on the `dlopen`ed simulator: closed-
//! loop conversations keep a batch slot each and prefill only what is new,
//! with the replies a cache-off daemon gives; an edited history starts
//! clean; a runtime whose slots do not keep history is switched off loudly.

mod common;

use common::{Chats, Daemon, Turn};
use serde_json::{json, Value};
use std::time::Duration;

const MODEL: &str = "m";
const USERS: [&str; 5] = ["Hello there!", "What runs on the NPU?", "And how fast is it?", "Why?", "Thanks, bye."];

/// The simulated model, paced so that clients overlap; `extra` daemon
/// arguments. Through dlopen the tokenizer comes as a file.
fn start(dlopen: bool, keys: &str, extra: &[&str]) -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = dir.path().join("tokenizer.json");
    std::fs::write(&tokenizer, rkllm_sim::tokenizer_json()).unwrap();
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0.05&reply_tokens=12{keys}");
    let args = [&["--model", &spec, "--model-id", MODEL][..], extra].concat();
    let d = if dlopen {
        let tokenizer = tokenizer.to_str().unwrap();
        Daemon::start_dlopen(&[&args[..], &["--tokenizer", tokenizer, "--template", "chatml"]].concat())
    } else {
        Daemon::start(&args)
    };
    (d, dir)
}

impl Chats {
    /// Conversation `c` turn by turn, resending its history with the
    /// daemon's replies; each of its turns.
    async fn converse(&self, c: usize) -> Vec<Turn> {
        self.converse_after(c, Duration::ZERO).await
    }

    /// The same, each follow-up sent `pause` after the reply ended (a
    /// client that takes its time: a Python SDK's takes 12–29 ms).
    async fn converse_after(&self, c: usize, pause: Duration) -> Vec<Turn> {
        let mut messages = vec![json!({"role": "system", "content": format!("You are assistant number {c}.")})];
        let mut turns = Vec::new();
        for (i, user) in USERS.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(pause).await;
            }
            messages.push(json!({"role": "user", "content": user}));
            let t = self.turn(&messages).await;
            messages.push(json!({"role": "assistant", "content": t.content}));
            turns.push(t);
        }
        turns
    }
}

/// `clients` conversations at once, each sending its next turn as soon as
/// its reply ended.
async fn closed_loop(d: &Daemon, clients: usize) -> Vec<Vec<Turn>> {
    closed_loop_after(d, clients, Duration::ZERO).await
}

/// The same, each client sending its next turn `pause` after its reply ended.
async fn closed_loop_after(d: &Daemon, clients: usize, pause: Duration) -> Vec<Vec<Turn>> {
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let api = Chats::of(d, MODEL);
            tokio::spawn(async move { api.converse_after(c, pause).await })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.push(task.await.unwrap());
    }
    all
}

async fn conversations_keep_their_slots(dlopen: bool) {
    let (on, _dir) = start(dlopen, "", &["--batch", "4", "--batch-gather-ms", "1000"]);
    let (off, _off_dir) = start(false, "", &["--conversation-cache", "off"]);
    let all = closed_loop(&on, 4).await;
    for (c, turns) in all.iter().enumerate() {
        let alone = Chats::of(&off, MODEL).converse(c).await;
        for (i, (t, plain)) in turns.iter().zip(&alone).enumerate() {
            assert_eq!(t.content, plain.content, "conversation {c}, turn {i}: the cache must not change the reply");
            assert_eq!(t.prompt(), plain.prompt(), "conversation {c}, turn {i}: the whole prompt is counted");
        }
        // The first request starts alone and the others queue behind it;
        // once they have all run (by the third turn) every run takes all
        // four, each in the slot its conversation holds.
        for (i, pair) in turns.windows(2).enumerate().skip(1) {
            let (before, t) = (&pair[0], &pair[1]);
            let turn = i + 1;
            assert_eq!(t.timings["cache"], "resident", "conversation {c}, turn {turn}: {}", t.timings);
            if turn < USERS.len() - 1 {
                // The last round lacks the client that started alone: it is done.
                assert_eq!(t.timings["batch_n"], 4, "conversation {c}, turn {turn}: {}", t.timings);
            }
            assert_eq!(
                t.cached(),
                before.prompt() + before.completion(),
                "conversation {c}, turn {turn}: the whole history is reused"
            );
        }
    }
    let (_, models) = on.get_json("/v1/models").await;
    // The slots the last run's jobs held (its fillers took the others'),
    // none of them saved as files.
    let warm = &models["data"][0]["conversations"];
    assert!((1..=4).contains(&warm["warm"].as_u64().unwrap()), "{models}");
    assert!(warm["resident_tokens"].as_u64().unwrap() > 0, "{models}");
    assert_eq!(warm["saved"], 0, "{models}");
    assert_eq!(on.metric("rkllmd_kv_cache_mismatch_total").await, Some(0.0), "every slot held what was sent");
}

#[tokio::test]
async fn closed_loop_conversations_keep_their_batch_slots() {
    conversations_keep_their_slots(false).await;
}

#[tokio::test]
async fn through_dlopen_closed_loop_conversations_keep_their_batch_slots() {
    conversations_keep_their_slots(true).await;
}

#[tokio::test]
async fn an_edited_history_in_a_batch_slot_starts_clean_with_the_right_reply() {
    let (on, _dir) = start(false, "", &["--batch", "2"]);
    let (off, _off_dir) = start(false, "", &["--conversation-cache", "off"]);
    let api = Chats::of(&on, MODEL);
    let mut messages = vec![json!({"role": "user", "content": USERS[0]})];
    let first = api.turn(&messages).await;
    messages
        .extend([json!({"role": "assistant", "content": first.content}), json!({"role": "user", "content": USERS[1]})]);
    let follow = api.turn(&messages).await;
    assert_eq!(follow.timings["cache"], "resident", "{}", follow.timings);
    // The first user message edited: its slot holds another conversation now.
    messages[0] = json!({"role": "user", "content": USERS[2]});
    let edited = api.turn(&messages).await;
    assert_eq!((edited.cached(), &edited.timings["cache"]), (0, &json!("miss")), "{}", edited.timings);
    assert_eq!(edited.timings["cache_miss"], "other", "{}", edited.timings);
    let plain = Chats::of(&off, MODEL).turn(&messages).await;
    assert_eq!(edited.content, plain.content);
}

#[tokio::test]
async fn batch_slots_that_keep_no_history_are_switched_off_loudly() {
    // This runtime prefills every slot's history again although the run
    // keeps it: reuse saves nothing, so it must stop.
    let (d, _dir) = start(false, "&batch_history_lies=1", &["--batch", "2"]);
    let (off, _off_dir) = start(false, "", &["--conversation-cache", "off"]);
    let turns = Chats::of(&d, MODEL).converse(0).await;
    let plain = Chats::of(&off, MODEL).converse(0).await;
    assert!(d.wait_metric("rkllmd_conversation_cache_off_total", |n| n == 1.0).await, "switched off");
    // The second turn was planned as a reuse (and found out); none after it.
    assert_eq!(turns[1].timings["cache"], "resident");
    for (i, (t, p)) in turns.iter().zip(&plain).enumerate() {
        assert_eq!(t.content, p.content, "turn {i}");
        if i >= 2 {
            assert_eq!((t.cached(), &t.timings["cache"]), (0, &Value::Null), "turn {i}: {}", t.timings);
        }
    }
    // The WARN says what and why, for the operator (read after the exit).
    let (_, log) = d.exit();
    assert!(log.contains("the conversation cache in batched runs is switched off"), "{log}");
    assert!(log.contains("the runtime did not keep its slots' history"), "{log}");
}

#[tokio::test]
async fn a_batch_gathers_for_clients_as_long_as_they_take_to_come_back() {
    // Clients that send their next turn 40 ms after their reply ended (and
    // the daemon's preparation of it, slow in a debug build on a busy
    // machine): the batch waits for them, longer than the configured 10 ms
    // (the ceiling until their return was measured, then about twice it),
    // and they keep their slots.
    let pause = Duration::from_millis(40);
    let (d, _dir) = start(false, "", &["--batch", "4"]);
    let all = closed_loop_after(&d, 4, pause).await;
    for (c, turns) in all.iter().enumerate() {
        // Turn 1 of three conversations waited behind the first one's run.
        for (turn, t) in turns.iter().enumerate().skip(2) {
            assert_eq!(t.timings["cache"], "resident", "conversation {c}, turn {turn}: {}", t.timings);
        }
    }
    let windows = |le: &str| format!("rkllmd_batch_gather_window_seconds_bucket{{le=\"{le}\"}}");
    let gathered = d.metric("rkllmd_batch_gather_window_seconds_count").await.unwrap();
    assert!(gathered >= 4.0, "{gathered}");
    assert_eq!(d.metric(&windows("0.05")).await.unwrap(), 0.0, "never the 10 ms that would miss them");
    assert_eq!(d.metric(&windows("0.25")).await.unwrap(), gathered, "none over 250 ms");
    // A finished conversation is never back: some window ran out.
    assert!(d.metric("rkllmd_batch_gathers_expired_total").await.unwrap() >= 1.0);
    let lost = d.metric("rkllmd_batch_fillers_in_live_slots_total").await.unwrap();
    assert!(lost <= 4.0, "only the slots of finished conversations: {lost}");
}

/// Conversations `a` and `b` on `--batch 2`, one request at a time: a's
/// first turn, b's, a's second, b's second. The turns.
async fn two_by_turns(d: &Daemon) -> [Turn; 4] {
    let api = Chats::of(d, MODEL);
    let mut a = vec![json!({"role": "user", "content": USERS[0]})];
    let mut b = vec![json!({"role": "user", "content": USERS[1]})];
    let a1 = api.turn(&a).await;
    let b1 = api.turn(&b).await;
    a.extend([json!({"role": "assistant", "content": a1.content}), json!({"role": "user", "content": USERS[2]})]);
    b.extend([json!({"role": "assistant", "content": b1.content}), json!({"role": "user", "content": USERS[3]})]);
    let a2 = api.turn(&a).await;
    let b2 = api.turn(&b).await;
    [a1, b1, a2, b2]
}

#[tokio::test]
async fn where_the_runtime_takes_short_batches_a_lone_request_runs_alone_and_absent_slots_keep_their_conversations() {
    let (short, _dir) = start(false, "&short_batch=accept", &["--batch", "2"]);
    let (_, health) = short.get_json("/health").await;
    assert_eq!(health["runtime"]["short_batches"], "accepted", "{health}");
    let [a1, b1, a2, b2] = two_by_turns(&short).await;
    for t in [&a1, &b1, &a2, &b2] {
        // The runtime decoded and prefilled this request's tokens only: no filler.
        let runtime = &t.timings["runtime"];
        assert_eq!(runtime["generate_tokens"], t.completion(), "{}", t.timings);
        assert_eq!(runtime["prefill_tokens"], t.prompt() - t.cached(), "{}", t.timings);
    }
    // Each conversation's slot was left alone while the other ran.
    assert_eq!((&a2.timings["cache"], a2.cached()), (&json!("resident"), a1.prompt() + a1.completion()));
    assert_eq!((&b2.timings["cache"], b2.cached()), (&json!("resident"), b1.prompt() + b1.completion()));
    assert_eq!(short.metric("rkllmd_batch_short_off_total").await, Some(0.0));

    // The simulator's default refuses them, loudly: fillers, which decode
    // beside a lone request and take the slot of the conversation away.
    let (filled, _filled_dir) = start(false, "", &["--batch", "2"]);
    let (_, health) = filled.get_json("/health").await;
    assert_eq!(health["runtime"]["short_batches"], "refused", "{health}");
    assert!(filled.log().contains("batched runs fill every slot without a job with a filler"), "{}", filled.log());
    assert_eq!(filled.metric("rkllmd_batch_short_off_total").await, Some(1.0));
    let [a1, b1, a2, b2] = two_by_turns(&filled).await;
    assert!(a2.timings["runtime"]["generate_tokens"].as_i64().unwrap() > a2.completion(), "{}", a2.timings);
    // b's first turn cleared the slots, and a's filler took b's slot: each
    // comes back from the file its run saved (`engine/batch_files.rs`).
    assert_eq!((&a2.timings["cache"], a2.cached()), (&json!("restored"), a1.prompt()), "{}", a2.timings);
    assert_eq!((&b2.timings["cache"], b2.cached()), (&json!("restored"), b1.prompt()), "{}", b2.timings);
}

#[tokio::test]
async fn a_runtime_whose_slots_without_input_do_not_stay_empty_gets_fillers_loudly() {
    // Every size this runtime reports is one more than it holds: after the
    // probe the slots without input do not read 0, as if the probe's input
    // had gone to them too.
    let (d, _dir) = start(false, "&short_batch=accept&kv_size_skew=1", &["--batch", "2"]);
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["short_batches"], "misplaced", "{health}");
    assert_eq!(d.metric("rkllmd_batch_short_off_total").await, Some(1.0));
    assert!(d.log().contains("the slots' sizes are [1, "), "{}", d.log());
    let turns = two_by_turns(&d).await;
    let a1 = &turns[0];
    assert!(a1.timings["runtime"]["generate_tokens"].as_i64().unwrap() > a1.completion(), "a filler: {}", a1.timings);
}

#[tokio::test]
async fn with_the_probe_off_a_runtime_that_would_take_short_batches_gets_fillers_quietly() {
    // An operator whose runtime the probe's empty input would upset turns it
    // off: no probe run, fillers, nothing counted as a refusal.
    let (d, _dir) = start(false, "&short_batch=accept", &["--batch", "2", "--batch-short-probe", "false"]);
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["short_batches"], "not_probed", "{health}");
    assert_eq!(d.metric("rkllmd_batch_short_off_total").await, Some(0.0));
    let [a1, ..] = two_by_turns(&d).await;
    assert!(a1.timings["runtime"]["generate_tokens"].as_i64().unwrap() > a1.completion(), "a filler: {}", a1.timings);
}

#[tokio::test]
async fn a_short_batch_that_fails_switches_short_batches_off_where_health_shows_it() {
    // The probe's one-token run passes; every longer run fails at its third
    // token, as a runtime would that takes the probe's shape of short batch
    // but not a real one.
    let (d, _dir) = start(false, "&short_batch=accept&error_after=3", &["--batch", "2"]);
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["short_batches"], "accepted", "{health}");
    let r =
        d.post("/v1/chat/completions", json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(r.status(), 500);
    assert!(d.wait_metric("rkllmd_batch_short_off_total", |n| n == 1.0).await, "counted once");
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["short_batches"], "switched_off", "{health}");
}
