//! When the registry may unload a model: only when no lease (a request
//! being prepared, queued, generating or streaming) and no queue place (a
//! job waiting, running, or an aborted run being drained) holds it — counted
//! explicitly, not read off reference counts.

mod common;

use common::{chat, read_sse, Daemon};
use serde_json::{json, Value};
use std::time::Duration;

/// Room for one model; `a` replies slowly (a prefill of ~1 s, during which
/// an abort waits, then 60 tokens of ~60 ms: seconds in which it is
/// checked busy), `b` at once.
fn daemon() -> (Daemon, tempfile::TempDir) {
    two_models("sim:qwen2.5-1.5b?reply_tokens=60&prefill_extra_ms=800", &[])
}

/// Models `a` (`path_a`) and `b` (an instant one) with room for one.
fn two_models(path_a: &str, extra: &[&str]) -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    let models = format!(
        "[[models]]\nid = \"a\"\npath = \"{path_a}\"\n[[models]]\nid = \"b\"\npath = \"sim:instant?reply_tokens=3\"\n"
    );
    std::fs::write(&config, models).unwrap();
    let args = ["--backend", "sim", "--config", config.to_str().unwrap(), "--max-loaded-models", "1"];
    (Daemon::start(&[&args[..], extra].concat()), dir)
}

fn streaming(model: &str) -> Value {
    let mut body = chat(model, "hello");
    body["stream"] = json!(true);
    body
}

/// Reads a stream until its first chunk with generated text.
async fn first_content(response: &mut reqwest::Response) {
    let mut seen = String::new();
    while !seen.contains("\"content\":\"") {
        let chunk = response.chunk().await.unwrap().expect("the stream ended before any text");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// `rkllmd_model_unloads_total` for `model` unloaded to make room.
async fn unloads_for_room(d: &Daemon, model: &str) -> f64 {
    d.metric(&format!("rkllmd_model_unloads_total{{model=\"{model}\",reason=\"room\"}}")).await.unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_in_use_is_not_unloaded_and_one_whose_client_left_is_once_its_run_is_drained() {
    let (d, _dir) = daemon();
    let mut a = d.post("/v1/chat/completions", streaming("a")).await;
    first_content(&mut a).await;
    let other = tokio::spawn({
        let (client, url) = (d.client(), d.url.clone());
        async move { client.post(format!("{url}/v1/chat/completions")).json(&chat("b", "hi")).send().await.unwrap() }
    });
    assert!(d.wait_metric("rkllmd_model_load_waits_total", |n| n == 1.0).await, "b's load waits while a streams");
    // Status reads clone the loaded model: they must not change what is idle.
    assert_eq!(d.get_json("/v1/models/a").await.1["state"], "loaded", "a unloaded while it generates");
    assert_eq!(unloads_for_room(&d, "a").await, 0.0);
    let (events, _) = read_sse(a).await;
    let last: Value = events.iter().rev().find(|e| e.data != "[DONE]").unwrap().json();
    assert_eq!(last["choices"][0]["finish_reason"], "stop", "a's reply ran to its end: {last}");
    let b = tokio::time::timeout(Duration::from_secs(60), other).await.expect("b loads once a is idle").unwrap();
    assert_eq!(b.status(), 200);
    // Counted when the unload ended, before b's load began.
    assert_eq!(unloads_for_room(&d, "a").await, 1.0);

    // A client that leaves during the prefill lets go of its lease at once;
    // its run cannot be aborted before its first token and is drained, and
    // only then is the model idle: b's load waits for it, no place leaks.
    let a = d.post("/v1/chat/completions", streaming("a")).await;
    assert_eq!(a.status(), 200);
    d.wait_queue(|running, _| running == 1).await;
    drop(a);
    let b = tokio::time::timeout(Duration::from_secs(60), d.post("/v1/chat/completions", chat("b", "hi")))
        .await
        .expect("b loads once a's run is drained");
    assert_eq!(b.status(), 200);
    assert!(d.wait_metric("rkllmd_client_disconnects_total", |n| n == 1.0).await, "a's request counts as a disconnect");
    assert_eq!(unloads_for_room(&d, "a").await, 2.0);
}

/// Steady traffic to one model must not keep a request for another waiting
/// as long as it lasts (it did: 19.2 s of a 20 s flood): after
/// `max_switch_wait_secs` the busy model yields — finishes what it holds,
/// takes nothing new — and the other loads. Then the first comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_to_one_model_lets_another_load_after_the_switch_wait() {
    let (d, _dir) = two_models("sim:qwen2.5-1.5b?time_scale=0.1&reply_tokens=6", &["--max-switch-wait-secs", "1"]);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    // Three closed-loop clients: model `a` is never idle while they run.
    let flood: Vec<_> = (0..3)
        .map(|_| {
            let (client, url, done, answered) = (d.client(), d.url.clone(), done.clone(), answered.clone());
            tokio::spawn(async move {
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let r = client.post(format!("{url}/v1/chat/completions")).json(&chat("a", "hello")).send().await;
                    let ok = r.is_ok_and(|r| r.status() == 200);
                    answered.lock().unwrap().push((std::time::Instant::now(), ok));
                }
            })
        })
        .collect();
    while answered.lock().unwrap().len() < 3 {
        tokio::task::yield_now().await;
    }
    let sent = std::time::Instant::now();
    let b = tokio::time::timeout(Duration::from_secs(30), d.post("/v1/chat/completions", chat("b", "hi"))).await;
    let waited = sent.elapsed();
    let during = answered.lock().unwrap().iter().filter(|(at, _)| *at > sent).count();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    for client in flood {
        client.await.unwrap();
    }
    let b = b.expect("the request for `b` waited as long as the flood to `a` lasted");
    assert_eq!(b.status(), 200);
    assert!(during > 0, "`a` kept answering until it yielded");
    assert!(waited < Duration::from_secs(15), "waited {waited:?}");
    assert!(d.metric("rkllmd_model_yields_total").await >= Some(1.0), "`a` yielded");
    assert!(answered.lock().unwrap().iter().all(|(_, ok)| *ok), "every request to `a` was answered");
    // `a` comes back for the next request.
    let r = d.post("/v1/chat/completions", chat("a", "again")).await;
    assert_eq!(r.status(), 200);
    let metrics = d.client().get(format!("{}/metrics", d.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("rkllmd_model_yields_total ") && !l.ends_with(" 0")), "{metrics}");
    eprintln!("`b` answered after {waited:?}, `a` answered {during} requests meanwhile");
}

/// Every unload is counted once its runtime is destroyed, by why: a
/// request's `keep_alive: 0` once the model is idle, the unload route at
/// once (it answers after the unload).
#[tokio::test]
async fn unloads_are_counted_by_why() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant?reply_tokens=2", "--model-id", "m"]);
    let unloads = |reason: &str| format!("rkllmd_model_unloads_total{{model=\"m\",reason=\"{reason}\"}}");
    let body = json!({"model": "m", "stream": false, "keep_alive": 0, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(d.post("/api/chat", body).await.status(), 200);
    assert!(d.wait_metric(&unloads("keep_alive"), |n| n == 1.0).await, "unloaded after its request");
    assert_eq!(d.get_json("/v1/models/m").await.1["state"], "unloaded");
    assert_eq!(d.post("/v1/models/m/load", json!({})).await.status(), 200);
    assert_eq!(d.post("/v1/models/m/unload", json!({})).await.status(), 200);
    assert_eq!(d.metric(&unloads("request")).await, Some(1.0));
    assert_eq!(d.metric(&unloads("keep_alive")).await, Some(1.0));
    assert_eq!(d.metric(&unloads("room")).await, None, "no other model needed the room");
}
