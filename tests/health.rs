//! `GET /health` as a liveness probe: 503 `stalled` when the runtime thread
//! hangs (the systemd watchdog's check, over HTTP; `/health/ready` too), 200
//! on a healthy daemon, and never held up by a running generation.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// `GET /health`; a probe that waited for the runtime would never answer here.
async fn health(d: &Daemon) -> (u16, Value) {
    tokio::time::timeout(Duration::from_secs(5), d.get_json("/health")).await.expect("/health must answer promptly")
}

/// Starts a request whose run hangs for good after 2 tokens, and waits until it has them.
async fn wedge(d: &Daemon) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let (client, url) = (d.client(), d.url.clone());
    let request =
        tokio::spawn(
            async move { client.post(format!("{url}/v1/chat/completions")).json(&chat("m", "hang")).send().await },
        );
    d.wait_generating().await;
    request
}

#[tokio::test]
async fn a_wedged_runtime_turns_health_and_readiness_503_stalled() {
    // The run hangs after 2 tokens; a decode gap of first_token_timeout_secs (1 s) is a hang.
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant?hang_after=2&reply_tokens=10",
        "--model-id",
        "m",
        // One slot: the subject is a request's run that hangs, not `batch = auto`'s timing runs at load (they would meet it).
        "--batch",
        "1",
        "--first-token-timeout-secs",
        "1",
    ]);
    let (code, h) = health(&d).await;
    assert_eq!((code, h["status"].as_str()), (200, Some("ok")), "an idle runtime answers its ping: {h}");
    assert!(h.get("reason").is_none(), "{h}");

    let request = wedge(&d).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let (code, h) = loop {
        let (code, h) = health(&d).await;
        if code != 200 || Instant::now() > deadline {
            break (code, h);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((code, h["status"].as_str()), (503, Some("stalled")), "{h}");
    let reason = h["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no progress from the runtime") && reason.contains("during decoding"), "{h}");
    assert_eq!((h["model"].as_str(), h["queue"]["running"].as_u64()), (Some("m"), Some(1)), "{h}");

    // Not ready either: a load balancer must stop sending requests to a hung runtime.
    let (code, r) = d.get_json("/health/ready").await;
    assert_eq!((code, r["status"].as_str()), (503, Some("stalled")), "{r}");
    request.abort();
}

#[tokio::test]
async fn health_stays_200_and_prompt_during_a_long_healthy_generation() {
    // The allowance that judged the hang above a stall (1 s), but a healthy run
    // (a token every 24 ms) that lasts about twice as long: judged by its
    // activity, neither by its length nor by a ping it could not answer.
    let allowance = Duration::from_secs(1);
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:qwen2-0.5b?reply_tokens=80",
        "--model-id",
        "m",
        "--first-token-timeout-secs",
        "1",
    ]);
    let started = Instant::now();
    let (client, url) = (d.client(), d.url.clone());
    let request = tokio::spawn(async move {
        let r = client.post(format!("{url}/v1/chat/completions")).json(&chat("m", "a long one")).send().await;
        r.unwrap().json::<Value>().await.unwrap()
    });
    d.wait_generating().await;
    let generating = Instant::now();
    // Probes that found the run going once the allowance had passed: what
    // the test is about, however many a busy machine manages before.
    let mut probed_past_the_allowance = 0;
    while !request.is_finished() {
        let (code, h) = health(&d).await;
        assert_eq!((code, h["status"].as_str()), (200, Some("ok")), "after {:?}: {h}", started.elapsed());
        if h["queue"]["running"].as_u64() == Some(1) && generating.elapsed() > allowance {
            probed_past_the_allowance += 1;
        }
        // Pacing the probes, not waiting for an event: the loop ends with the run.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reply = request.await.unwrap();
    assert_eq!(reply["usage"]["completion_tokens"], 80, "{reply}");
    assert!(started.elapsed() > allowance + allowance / 2, "the run outlasted the allowance: {:?}", started.elapsed());
    assert!(probed_past_the_allowance >= 1, "no probe found the run going past the allowance");
}

/// The systemd watchdog's check judges a prefill by the bound the engine
/// enforces on it (`engine/liveness.rs`), not by twice the first-token
/// time-out (with the defaults, 120 s and more: 240 s). A run that hangs
/// before its first token, with every time-out at its default: `/health`
/// is 200 while the prefill is within the bound, and 503 `stalled` (during
/// prefill, allowed 11 s: the 10 s floor and the abort's 1 s) by the time
/// the engine has aborted the run and told its client.
#[tokio::test]
async fn the_watchdog_judges_a_hung_prefill_by_the_bound_the_engine_aborts_it_at() {
    // One slot: the subject is a request's run that hangs, not `batch = auto`'s timing runs at load (they would meet it).
    let d =
        Daemon::start(&["--backend", "sim", "--model", "sim:instant?hang_after=0", "--model-id", "m", "--batch", "1"]);
    let (client, url) = (d.client(), d.url.clone());
    let request =
        tokio::spawn(
            async move { client.post(format!("{url}/v1/chat/completions")).json(&chat("m", "hi")).send().await },
        );
    d.wait_queue(|running, _| running == 1).await;
    let (code, h) = health(&d).await;
    assert_eq!((code, h["status"].as_str(), h["queue"]["running_tokens"].as_u64()), (200, Some("ok"), Some(0)), "{h}");

    // The engine's abort, and its 1 s grace: the client is told (a generous multiple of the bound).
    let told = tokio::time::timeout(Duration::from_secs(44), request).await.expect("the client was told");
    let r = told.unwrap().unwrap();
    assert_eq!(r.status().as_u16(), 504);
    let e: Value = r.json().await.unwrap();
    assert!(e["error"]["message"].as_str().unwrap().contains("prefill stall"), "{e}");
    let (code, h) = health(&d).await;
    assert_eq!((code, h["status"].as_str()), (503, Some("stalled")), "{h}");
    let reason = h["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("during prefill (allowed 11 s)"), "{h}");
}
