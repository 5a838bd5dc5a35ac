//! The daemon's own log is kept apart from what the runtime prints: while
//! a model loads (its output captured), other requests' log lines go to the
//! log, not into that model's error; the runtime's lines become log events;
//! and a log reader that goes away does not end the daemon.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test]
async fn other_threads_log_lines_never_end_up_in_a_loads_captured_output() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    std::fs::write(
        &config,
        "[[models]]\nid = \"a\"\npath = \"sim:instant\"\n\n\
         [[models]]\nid = \"b\"\npath = \"sim:instant?init_ms=1500&fail_init=npu_memory\"\n",
    )
    .unwrap();
    let d = Daemon::start(&["--config", config.to_str().unwrap()]);
    assert_eq!(d.post("/v1/chat/completions", chat("a", "load a")).await.status().as_u16(), 200);
    let client = d.client();
    let url = format!("{}/v1/chat/completions", d.url);
    let failing = tokio::spawn(async move { client.post(url).json(&chat("b", "load b")).send().await.unwrap() });
    // While b's rkllm_init runs (1.5 s, output captured), a's requests are logged.
    let started = Instant::now();
    let mut logged = 0;
    while started.elapsed() < Duration::from_millis(1200) {
        assert_eq!(d.post("/v1/chat/completions", chat("a", "meanwhile")).await.status().as_u16(), 200);
        logged += 1;
    }
    let r = failing.await.unwrap();
    // model_load_failed is 503 (retryable on another board).
    assert_eq!(r.status().as_u16(), 503);
    let e: serde_json::Value = r.json().await.unwrap();
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("failed to malloc npu memory"), "{message}");
    assert!(!message.contains("request finished") && !message.contains("rkllmd::"), "{logged} requests: {message}");
    // Those requests were logged while the load ran, and a successful load's lines became log events.
    let (_, log) = d.exit();
    assert!(log.contains("rkllm_runtime: I rkllm: rkllm-runtime version"), "{log}");
    let finished = log.matches("request finished").count();
    assert!(finished > logged, "{finished} request lines for {} requests", logged + 1);
}

/// Kills the daemon when the test ends, passed or not.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_closed_stderr_does_not_end_the_daemon() {
    let child = Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--host", "127.0.0.1", "--port", "0", "--backend", "sim", "--model", "sim:instant", "--model-id", "m"])
        .env_remove("RKLLM_LIB")
        .env("RKLLMD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("a log line").unwrap();
        if let Some(at) = line.find("listening on http://") {
            break line[at + "listening on ".len()..].split_whitespace().next().unwrap().to_owned();
        }
    };
    // The log's reader goes away: every further log write meets EPIPE.
    drop(lines);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for _ in 0..3 {
        let status = rt.block_on(async {
            let r = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&chat("m", "hi")).send();
            r.await.unwrap().status().as_u16()
        });
        assert_eq!(status, 200);
    }
    assert!(child.0.try_wait().unwrap().is_none(), "the daemon exited: {:?}", child.0.try_wait());
}
