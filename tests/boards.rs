//! One board among several (docs/deploy.md, "Outgrowing one board"): which
//! board answered, the load figures routers read, and a request that stays
//! retryable on another board until its run starts.

mod common;
use common::*;
use serde_json::{json, Value};

const INSTANCE: &str = "x-rkllmd-instance";

#[tokio::test]
async fn every_response_names_the_board_that_answered() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let d = Daemon::start(&[
        "--model",
        "sim:instant?reply_tokens=3",
        "--model-id",
        "m",
        "--instance",
        "board-7",
        "--queue-depth",
        "0",
        "--timings-log",
        log.path().to_str().unwrap(),
    ]);
    let r = d.post("/v1/chat/completions", chat("m", "hi")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[INSTANCE], "board-7");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["timings"]["instance"], "board-7", "{body}");

    let r = d
        .post(
            "/v1/chat/completions",
            json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.headers()[INSTANCE], "board-7");
    let (events, _) = read_sse(r).await;
    assert_eq!(events[events.len() - 2].json()["timings"]["instance"], "board-7");

    // Refusals too: an unknown model, and health checks.
    let r = d.post("/v1/chat/completions", chat("nope", "hi")).await;
    assert_eq!((r.status().as_u16(), r.headers()[INSTANCE].to_str().unwrap()), (404, "board-7"));
    let r = reqwest::get(format!("{}/health/ready", d.url)).await.unwrap();
    assert_eq!(r.headers()[INSTANCE], "board-7");

    assert!(d.wait_log("instance=\"board-7\""), "the request log names the instance:\n{}", d.log());
    let lines = timings_log_lines(log.path(), 2);
    assert!(lines.iter().all(|l| l["timings"]["instance"] == "board-7"), "{lines:?}");
}

#[tokio::test]
async fn the_instance_defaults_to_the_host_name() {
    let d = Daemon::start(&["--model", "sim:instant?reply_tokens=1"]);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let r = reqwest::get(format!("{}/health", d.url)).await.unwrap();
    assert_eq!(r.headers()[INSTANCE], host.trim());
}

#[test]
fn an_instance_name_a_header_cannot_carry_is_refused() {
    assert_config_errors(&[&["--instance", ""], &["--instance", "two words"], &["--instance", "tab\there"]]);
}
