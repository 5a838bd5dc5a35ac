//! Queue order through the binary: when several requests wait, one that
//! extends the conversation in the KV cache goes first (its prefill is
//! mostly done), and a request passed over `--queue-max-passed-over` times
//! goes first whatever is warm (then arrival order).

mod common;

use common::{read_sse, script, Daemon};
use serde_json::{json, Value};
use std::time::Instant;

/// Scripted replies, so that a conversation's later turns can be written
/// before its first one has run. The simulator takes the first entry whose
/// key the prompt contains: later turns come first.
const X3: (&str, &str) = ("X-third", "Third and last.");
const X2: (&str, &str) = ("X-second", "Second reply here.");
/// Long (~5 s at this pace): four requests must queue behind it while it
/// runs, each one validated and counted first, on a busy machine too.
const X1: (&str, &str) = (
    "X-first",
    concat!(
        "The first reply is long, so that the other requests queue up behind it while it runs: ",
        "it goes on for a while, sentence after sentence, on a loaded machine too. ",
        "It says the same again and again, for as long as four other clients take to send their requests, ",
        "and each of them is read, validated, rendered, tokenized and put in the queue behind it. ",
        "Then it goes on some more, because a shared machine can be slow at any of those steps, ",
        "and a test that waits for the queue to fill must not find the first request finished already. ",
        "So it goes on, sentence after sentence, until the queue holds every one of them, and then it ends."
    ),
);
const Y: (&str, &str) = ("Y-only", "Why not.");
const Z: (&str, &str) = ("Z-only", "Zed.");

fn daemon(max_passed_over: &str) -> (Daemon, tempfile::NamedTempFile) {
    let file = script(&[X3, X2, X1, Y, Z]);
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0.3&script={}", file.path().display());
    let args = ["--backend", "sim", "--model", &spec, "--model-id", "m", "--queue-max-passed-over", max_passed_over];
    (Daemon::start(&args), file)
}

/// The conversation X up to its turn `n` (1-based), with the scripted replies.
fn x_turn(n: usize) -> Value {
    let mut messages = Vec::new();
    for (user, reply) in [X1, X2, X3].iter().take(n) {
        messages.push(json!({"role": "user", "content": user}));
        messages.push(json!({"role": "assistant", "content": reply}));
    }
    messages.pop();
    json!(messages)
}

fn request(messages: Value) -> Value {
    json!({"model": "m", "messages": messages, "stream": true, "stream_options": {"include_usage": true}})
}

/// Streams a request on a task of its own: when its first text came, and its final timings.
fn spawn(d: &Daemon, body: Value) -> tokio::task::JoinHandle<(Instant, Value)> {
    let (client, url) = (d.client(), d.url.clone());
    tokio::spawn(async move {
        let r = client.post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
        let (events, _) = read_sse(r).await;
        let data = events.iter().filter(|e| e.data != "[DONE]");
        let timings = data.clone().rev().find_map(|e| e.json().get("timings").cloned()).unwrap_or(Value::Null);
        let first = data.clone().find(|e| e.data.contains("\"content\":\"")).expect("generated text");
        (first.at, timings)
    })
}

/// Runs X's first turn, queues Y, Z, X2 and X3 behind it in that order, and
/// gives the order in which the four started, with each one's cached tokens.
async fn order(max_passed_over: &str) -> Vec<(&'static str, i64)> {
    let (d, _script) = daemon(max_passed_over);
    let first = spawn(&d, request(x_turn(1)));
    d.wait_generating().await;
    let mut queued = Vec::new();
    for (name, messages) in [
        ("Y", json!([{"role": "user", "content": Y.0}])),
        ("Z", json!([{"role": "user", "content": Z.0}])),
        ("X2", x_turn(2)),
        ("X3", x_turn(3)),
    ] {
        queued.push((name, spawn(&d, request(messages))));
        let n = queued.len() as u64;
        d.wait_queue(|_, waiting| waiting == n).await;
    }
    let (_, t) = first.await.unwrap();
    assert_eq!(t["predicted_n"].as_u64().map(|n| n > 20), Some(true), "X1 ran to its end: {t}");
    let mut started = Vec::new();
    for (name, task) in queued {
        let (at, timings) = task.await.unwrap();
        started.push((at, name, timings["cache_n"].as_i64().unwrap()));
    }
    started.sort_by_key(|(at, _, _)| *at);
    started.into_iter().map(|(_, name, cached)| (name, cached)).collect()
}

fn names(order: &[(&'static str, i64)]) -> Vec<&'static str> {
    order.iter().map(|(name, _)| *name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_of_the_cached_conversation_goes_first() {
    let order = order("4").await;
    assert_eq!(names(&order), ["X2", "X3", "Y", "Z"], "{order:?}");
    assert!(order[0].1 > 0 && order[1].1 > 0, "both follow-ups reused the KV cache: {order:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_passed_over_enough_times_goes_first() {
    // X2 passes Y and Z once: they have reached the bound, so they go before X3.
    let order = order("1").await;
    assert_eq!(names(&order), ["X2", "Y", "Z", "X3"], "{order:?}");
    assert!(order[0].1 > 0, "{order:?}");
    // Z's run replaced X in the KV cache; X3 is restored from X2's saved
    // prompt (engine/saved.rs) instead of prefilling it all.
    assert!(order[3].1 > 0, "X3 restored from its saved prompt: {order:?}");
    let fifo = self::order("0").await;
    assert_eq!(names(&fifo), ["Y", "Z", "X2", "X3"], "0 is arrival order: {fifo:?}");
}
