//! When the registry may unload a model: only when no lease (a request
//! being prepared, queued, generating or streaming) and no queue place (a
//! job waiting, running, or an aborted run being drained) holds it — counted
//! explicitly, not read off reference counts.

mod common;

use common::{chat, read_sse, Daemon};
use serde_json::{json, Value};
use std::time::Duration;

/// Room for one model; `a` replies slowly (a prefill of ~1 s, during which
/// an abort waits, then ~20 tokens of ~60 ms), `b` at once.
fn daemon() -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    std::fs::write(
        &config,
        "[[models]]\nid = \"a\"\npath = \"sim:qwen2.5-1.5b?reply_tokens=20&prefill_extra_ms=800\"\n\
         [[models]]\nid = \"b\"\npath = \"sim:instant?reply_tokens=3\"\n",
    )
    .unwrap();
    let d = Daemon::start(&["--backend", "sim", "--config", config.to_str().unwrap(), "--max-loaded-models", "1"]);
    (d, dir)
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

fn unloads(d: &Daemon, model: &str) -> usize {
    d.log().lines().filter(|l| l.contains("unloading model") && l.contains(&format!("model={model}"))).count()
}

/// Whether the log line with `first` comes before the `n`th line with
/// `then` (the daemon writes its log in order).
fn logged_before(d: &Daemon, first: &str, then: &str, n: usize) -> bool {
    let log = d.log();
    let lines: Vec<&str> = log.lines().collect();
    let at = |needle: &str, n: usize| {
        lines.iter().enumerate().filter(|(_, l)| l.contains(needle)).nth(n - 1).map(|(i, _)| i)
    };
    matches!((at(first, 1), at(then, n)), (Some(f), Some(t)) if f < t)
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
    assert!(d.wait_log("loading waits for room"), "b's load waits while a streams: {}", d.log());
    // Status reads clone the loaded model: they must not change what is idle.
    assert_eq!(d.get_json("/v1/models/a").await.1["state"], "loaded");
    let (events, _) = read_sse(a).await;
    let last: Value = events.iter().rev().find(|e| e.data != "[DONE]").unwrap().json();
    assert_eq!(last["choices"][0]["finish_reason"], "stop", "a's reply ran to its end: {last}");
    let b = tokio::time::timeout(Duration::from_secs(20), other).await.expect("b loads once a is idle").unwrap();
    assert_eq!(b.status(), 200);
    assert!(d.wait_log("model=a reason=\"room\""), "{}", d.log());
    let finished = "status=200 finish_reason=\"stop\"";
    assert!(logged_before(&d, finished, "unloading model model=a", 1), "a was unloaded under its stream: {}", d.log());

    // A client that leaves during the prefill lets go of its lease at once;
    // its run cannot be aborted before its first token and is drained, and
    // only then is the model idle: b's load waits for it, no place leaks.
    let a = d.post("/v1/chat/completions", streaming("a")).await;
    assert_eq!(a.status(), 200);
    d.wait_queue(|running, _| running == 1).await;
    drop(a);
    let b = tokio::time::timeout(Duration::from_secs(20), d.post("/v1/chat/completions", chat("b", "hi")))
        .await
        .expect("b loads once a's run is drained");
    assert_eq!(b.status(), 200);
    assert!(d.wait_log("client_disconnected=true"), "{}", d.log());
    assert_eq!(unloads(&d, "a"), 2);
    let drained = "client_disconnected=true";
    assert!(
        logged_before(&d, drained, "unloading model model=a", 2),
        "a was unloaded under its draining run: {}",
        d.log()
    );
}
