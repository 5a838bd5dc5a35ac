//! Queue, cancellation, shutdown, the ABI 1.2 path and the dlopen path.

mod common;
use common::*;
use serde_json::{json, Value};
use std::time::Instant;

fn streaming(content: &str) -> Value {
    let mut body = chat("m", content);
    body["stream"] = json!(true);
    body
}

/// Reads a stream until its first `data:` event.
async fn first_event(r: &mut reqwest::Response) -> String {
    let mut buf = String::new();
    loop {
        let bytes = r.chunk().await.unwrap().expect("stream ended early");
        buf.push_str(std::str::from_utf8(&bytes).unwrap());
        if let Some(line) = buf.lines().find(|l| l.starts_with("data: ")) {
            return line.to_owned();
        }
    }
}

#[tokio::test]
async fn full_queue_is_429_with_retry_after_and_a_queued_client_that_leaves_never_runs() {
    let record = tempfile::NamedTempFile::new().unwrap();
    // A slow generation (150 ms per token at qwen2.5's pacing × 2.5) keeps the NPU busy.
    let spec = format!("sim:qwen2.5-1.5b?time_scale=2.5&reply_tokens=200&record={}", record.path().display());
    // Prompts as text in the record (the conversation cache would send token ids).
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        &spec,
        "--model-id",
        "m",
        "--queue-depth",
        "1",
        "--conversation-cache",
        "off",
    ]);
    let mut running = d.post("/v1/chat/completions", streaming("first")).await;
    first_event(&mut running).await;
    let queued = tokio::spawn({
        let (client, url) = (d.client(), d.url.clone());
        async move { client.post(format!("{url}/v1/chat/completions")).json(&streaming("second-never-runs")).send().await }
    });
    d.wait_queue(|r, w| r == 1 && w == 1).await;
    let r = d.post("/v1/chat/completions", chat("m", "third")).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers()["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["type"], "rate_limit_error");
    assert_eq!(d.get_json("/health/ready").await.0, 503, "not ready while the queue is full");
    // The queue is asked before the request is prepared: one that validation
    // would refuse (`n` = 2) and a long one are refused for the queue alike.
    let mut invalid = chat("m", "third");
    invalid["n"] = json!(2);
    let long = chat("m", &"word ".repeat(4000));
    for body in [invalid, long] {
        let r = d.post("/v1/chat/completions", body).await;
        assert_eq!(r.status(), 429, "{}", r.text().await.unwrap());
    }
    let r = d.post("/v1/embeddings", json!({"model": "m", "input": "third"})).await;
    assert_eq!(r.status(), 429, "embeddings take a place in the same queue");

    // The queued client leaves: its place is freed and it never runs.
    queued.abort();
    let _ = queued.await;
    d.wait_queue(|r, w| r == 1 && w == 0).await;
    drop(running);
    d.wait_queue(|r, w| r == 0 && w == 0).await;
    let mut after = chat("m", "after");
    after["max_tokens"] = json!(1);
    let b: Value = d.post("/v1/chat/completions", after).await.json().await.unwrap();
    assert!(b["choices"][0]["message"]["content"].is_string());
    let calls = std::fs::read_to_string(record.path()).unwrap();
    assert!(calls.contains("first") && calls.contains("after"));
    assert!(!calls.contains("second-never-runs"), "a client gone while queued must never reach the runtime");
}

#[tokio::test]
async fn a_client_gone_mid_generation_aborts_it_and_the_next_starts_within_a_token_interval() {
    // 300 ms per token makes "within one token interval" measurable on a busy machine.
    let spec = "sim:qwen2.5-1.5b?time_scale=5&reply_tokens=100";
    // One slot, without `auto`'s timing runs at load (seconds at this pace).
    let d = Daemon::start(&["--backend", "sim", "--model", spec, "--model-id", "m", "--batch", "1"]);
    let token_ms = 5.0 * 1000.0 / 16.7;
    for stream in [true, false] {
        let body = json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "long"}]});
        let request = d.client().post(format!("{}/v1/chat/completions", d.url)).json(&body).send();
        // The client holds either an open stream or a pending non-stream request.
        let (response, pending) = if stream {
            let mut r = request.await.unwrap();
            first_event(&mut r).await;
            (Some(r), None)
        } else {
            (None, Some(tokio::spawn(async move { drop(request.await) })))
        };
        // Past prefill (which the runtime cannot interrupt) and decoding.
        d.wait_generating().await;
        let sent = Instant::now();
        let next = tokio::spawn({
            let (client, url) = (d.client(), d.url.clone());
            async move {
                client
                    .post(format!("{url}/v1/chat/completions"))
                    .json(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "next"}]}))
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            }
        });
        d.wait_queue(|_, w| w == 1).await;
        let gone = Instant::now();
        drop(response);
        if let Some(task) = pending {
            task.abort();
        }
        let b = next.await.unwrap();
        let queue_ms = b["timings"]["queue_ms"].as_f64().unwrap();
        // admitted (client clock) ≈ sent + queue_ms; it must follow the disconnect at the run's
        // next token, not at its end (~90 tokens later): 5 tokens' time is slack for a busy machine.
        let admitted_after_gone = queue_ms - (gone - sent).as_secs_f64() * 1000.0;
        assert!(
            admitted_after_gone <= token_ms * 5.0,
            "stream={stream}: next admitted {admitted_after_gone:.0} ms after the disconnect (token {token_ms:.0} ms)"
        );
        assert_eq!(b["usage"]["completion_tokens"], 1);
    }
    let disconnects = "rkllmd_client_disconnects_total";
    assert!(d.wait_metric(disconnects, |n| n >= 2.0).await, "the aborted requests count as disconnects");
}

#[tokio::test]
async fn abi_1_2_cannot_take_sampling_per_run_and_says_so_but_enforces_max_tokens() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--runtime-abi",
        "1.2",
        "--model",
        "sim:instant?reply_tokens=30",
        "--model-id",
        "m",
    ]);
    let (_, h) = d.get_json("/health").await;
    assert_eq!(h["runtime"]["abi"], "1.2");
    let mut body = chat("m", "hi");
    body["temperature"] = json!(0.2);
    body["top_p"] = json!(0.5);
    body["max_tokens"] = json!(5);
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.headers()["x-rkllmd-ignored-params"], "temperature,top_p");
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["usage"]["completion_tokens"], 5, "enforced by the daemon on 1.2");
    assert_eq!(b["choices"][0]["finish_reason"], "length");
    let r = d.post("/v1/chat/completions", chat("m", "plain")).await;
    assert!(r.headers().get("x-rkllmd-ignored-params").is_none());
    // Said in the log too (design: header + log), once: read after the exit.
    let (_, log) = d.exit();
    assert_eq!(log.matches("these request fields were ignored").count(), 1, "{log}");
}

#[tokio::test]
async fn the_sim_cdylib_loaded_by_path_serves_like_the_real_library() {
    let d = Daemon::start_dlopen(&["--model", "sim:instant?reply_tokens=6", "--model-id", "m"]);
    let (_, h) = d.get_json("/health").await;
    assert_eq!(h["backend"], "rkllm");
    assert_eq!(h["runtime"]["version"], "1.3.0");
    assert_eq!(h["runtime"]["origin"], sim_cdylib().to_str().unwrap());
    let (events, _) = read_sse(d.post("/v1/chat/completions", streaming("via dlopen")).await).await;
    let last = events[events.len() - 2].json();
    assert_eq!(last["usage"]["completion_tokens"], 6);
    assert_eq!(last["timings"]["runtime"]["generate_tokens"], 6);
    assert!(last["system_fingerprint"].as_str().unwrap().contains("rkllm-1.3.0"));
}

#[tokio::test]
async fn auto_without_a_library_falls_back_to_the_sim_with_a_warning() {
    // RKLLM_LIB is used as given, so no library installed on this machine can be found instead.
    let d = Daemon::start_with_env(
        &["--model", "sim:instant?reply_tokens=2"],
        &[("RKLLM_LIB", "/nonexistent/librkllmrt.so")],
    );
    let (_, h) = d.get_json("/health").await;
    assert_eq!(h["backend"], "sim", "{h}");
    let warning = d.log().lines().find(|l| l.contains("WARN") && l.contains("simulated runtime")).map(str::to_owned);
    assert!(warning.is_some_and(|w| w.contains("/nonexistent/librkllmrt.so")), "the WARN names why: {}", d.log());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--backend", "rkllm", "--port", "0", "--lib", "/nonexistent/librkllmrt.so"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/librkllmrt.so"));
}

#[tokio::test]
async fn sigterm_lets_the_running_generation_finish_then_exits_cleanly() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:qwen2.5-1.5b?time_scale=1&reply_tokens=15",
        "--model-id",
        "m",
    ]);
    let mut r = d.post("/v1/chat/completions", streaming("finish me")).await;
    first_event(&mut r).await;
    let reader = tokio::spawn(async move { read_sse(r).await });
    let pid_daemon = d;
    let status = tokio::task::spawn_blocking(move || pid_daemon.terminate()).await.unwrap();
    assert!(status.success(), "{status:?}");
    let (events, _) = reader.await.unwrap();
    assert_eq!(events.last().unwrap().data, "[DONE]", "the running stream completed");
    let last = events[events.len() - 2].json();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
}

#[test]
fn the_daemon_binary_exports_no_rkllm_symbols() {
    // Exported rkllm_* names would interpose on the real library's own calls.
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only", env!("CARGO_BIN_EXE_rkllmd")])
        .output()
        .expect("nm (binutils)");
    assert!(out.status.success());
    let syms = String::from_utf8_lossy(&out.stdout);
    assert!(!syms.lines().any(|l| l.contains(" rkllm_")), "{syms}");
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only", sim_cdylib().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(" rkllm_run"), "the cdylib does export them");
}

#[test]
fn auto_with_a_real_model_file_and_no_library_fails_instead_of_simulating_it() {
    let model = tempfile::NamedTempFile::new().unwrap();
    // RKLLM_LIB is used as given: a library installed on this machine is not found instead.
    let out = run_to_exit(
        std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
            .args(["--port", "0", "--model", model.path().to_str().unwrap()])
            .env("RKLLM_LIB", "/nonexistent/librkllmrt.so"),
        std::time::Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/nonexistent/librkllmrt.so") && !stderr.contains("using the simulated runtime"),
        "{stderr}"
    );
}
