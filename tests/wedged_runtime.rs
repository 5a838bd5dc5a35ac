//! A runtime that stops answering (the simulator's `hang_after`: no more
//! callbacks, aborts ignored, `rkllm_run` never returns): every waiting
//! client gets a clear ending within its time-outs (with the defaults, by
//! the decode stall's), a runtime that comes back serves again, and SIGTERM
//! ends every stream with `shutting_down` and `[DONE]`.

mod common;
use common::*;
use std::time::{Duration, Instant};

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

fn wedging_daemon(extra: &[&str]) -> Daemon {
    // One slot unless `extra` says: the subject is a request's run that hangs,
    // not `batch = auto`'s timing runs at load (they would meet it).
    let batch: &[&str] = if extra.contains(&"--batch") { &[] } else { &["--batch", "1"] };
    let wedging = "sim:instant?hang_after=3&reply_tokens=10";
    let args = [&["--backend", "sim", "--model", wedging, "--model-id", "m"], batch, extra];
    Daemon::start(&args.concat())
}

fn stream_body(content: &str) -> serde_json::Value {
    let mut body = chat("m", content);
    body["stream"] = true.into();
    body
}

/// How a streamed request ended: its status, its error code, and whether
/// `[DONE]` followed the error event. A stream whose run started is a 200
/// with an error event; one still queued has its head held until its run
/// starts (docs/api.md, "Streaming"), so it gets the error as its status.
type Ending = (u16, Option<String>, bool);

/// Starts a streamed request and reads it whole on a task of its own.
fn spawn_stream(d: &Daemon, content: &str) -> tokio::task::JoinHandle<Ending> {
    let request = d.client().post(format!("{}/v1/chat/completions", d.url)).json(&stream_body(content)).send();
    tokio::spawn(async move {
        let response = request.await.unwrap();
        let status = response.status().as_u16();
        if status != 200 {
            let body: serde_json::Value = response.json().await.unwrap();
            return (status, body["error"]["code"].as_str().map(str::to_owned), false);
        }
        let (error, done) = error_then_done(&read_sse(response).await.0);
        (status, error, done)
    })
}

/// Starts a streamed request that will run, and reads it whole on a task
/// of its own: its status and events.
fn spawn_events(d: &Daemon, content: &str) -> tokio::task::JoinHandle<(u16, Vec<SseEvent>)> {
    let request = d.client().post(format!("{}/v1/chat/completions", d.url)).json(&stream_body(content)).send();
    tokio::spawn(async move {
        let response = request.await.unwrap();
        (response.status().as_u16(), read_sse(response).await.0)
    })
}

/// The stream's error code and whether `[DONE]` followed it.
fn error_then_done(events: &[SseEvent]) -> (Option<String>, bool) {
    let n = events.len();
    let done = n >= 2 && events[n - 1].data == "[DONE]";
    let error = events.iter().rev().nth(1).and_then(|e| e.json()["error"]["code"].as_str().map(str::to_owned));
    (error, done)
}

/// The documented bound on telling a wedged decode's clients (docs/api.md,
/// "Time-outs"): 10 s without a token, plus the abort's 1 s. Waits below
/// are a generous multiple of it, for a loaded machine.
const STALL_BOUND: Duration = Duration::from_secs(11);

/// With every time-out at its default (request 1,800 s, head wait 30 s), a
/// run that stops producing is detected by its decode stall: the running
/// stream gets an error event and `[DONE]`, the queued one (its head still
/// held) and a new request 503 `runtime_unresponsive`, readiness 503.
async fn a_wedged_run_is_detected_with_defaults(extra: &[&str]) {
    let d = wedging_daemon(extra);
    let running = spawn_stream(&d, "first");
    d.wait_generating().await;
    let queued = spawn_stream(&d, "second");
    d.wait_queue(|_, waiting| waiting == 1).await;
    let (code, ready) = d.get_json("/health/ready").await;
    assert_eq!((code, ready["status"].as_str()), (200, Some("ready")), "not stalled yet: {ready}");

    let ending = tokio::time::timeout(STALL_BOUND * 4, running).await.expect("the running stream ended").unwrap();
    assert_eq!(ending, (200, Some("timeout".into()), true));
    let ending = tokio::time::timeout(STALL_BOUND * 4, queued).await.expect("the queued stream ended").unwrap();
    assert_eq!(ending, (503, Some("runtime_unresponsive".into()), false));

    a_new_request_is_refused_while_stalled(&d).await;
}

#[tokio::test]
async fn with_default_time_outs_a_wedged_run_is_detected_and_every_client_answered() {
    a_wedged_run_is_detected_with_defaults(&[]).await;
}

#[tokio::test]
async fn with_default_time_outs_a_wedged_batch_is_detected_and_every_client_answered() {
    a_wedged_run_is_detected_with_defaults(&["--batch", "2"]).await;
}

/// A runtime that hangs for 15 s (longer than the stall bound and the
/// abort's grace) and then returns: the stalled request gets its error body,
/// requests are refused meanwhile, and once the run returned the model is
/// ready and serves again.
#[tokio::test]
async fn a_runtime_that_comes_back_after_a_stall_is_used_again() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant?hang_after=3&hang_ms=15000&reply_tokens=10",
        "--model-id",
        "m",
        // One slot: the subject is a request's run that hangs, not `batch = auto`'s timing runs at load (they would meet it).
        "--batch",
        "1",
    ]);
    let url = format!("{}/v1/chat/completions", d.url);
    let stalled = d.client().post(&url).json(&chat("m", "first")).send();
    let stalled = tokio::spawn(stalled);
    d.wait_generating().await;
    // The run has not returned yet (it hangs 15 s, the error comes at ~11 s).
    told_then_ready_again(&d, stalled, STALL_BOUND * 4, "decode stall").await;
    // Two tokens: the simulator stops at the limit, before its hang at 3.
    let mut body = chat("m", "again");
    body["max_tokens"] = 2.into();
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status().as_u16(), 200);
    let reply: serde_json::Value = r.json().await.unwrap();
    assert_eq!(reply["usage"]["completion_tokens"], 2, "{reply}");
}

/// The documented bound on telling a hung prefill's clients (docs/api.md,
/// "Time-outs"): a prompt this short gets the prefill allowance's floor,
/// 10 s, plus the abort's 1 s.
const PREFILL_BOUND: Duration = Duration::from_secs(11);

/// With every time-out at its default (first token 120 s + 4 s per KiB), a
/// run that hangs before its first token (`hang_after=0`) is caught by the
/// prefill's own allowance: the running stream gets an error event naming
/// the prefill stall and `[DONE]`, the queued one and a new request 503
/// `runtime_unresponsive` with `Retry-After`, readiness 503 `stalled`.
#[tokio::test]
async fn with_default_time_outs_a_hung_prefill_is_detected_and_every_client_answered() {
    // One slot: the subject is a request's run that hangs, not `batch = auto`'s timing runs at load (they would meet it).
    let args =
        ["--backend", "sim", "--model", "sim:instant?hang_after=0&reply_tokens=10", "--model-id", "m", "--batch", "1"];
    let d = Daemon::start(&args);
    let running = spawn_events(&d, "first");
    d.wait_queue(|running, _| running == 1).await;
    let queued = spawn_stream(&d, "second");
    d.wait_queue(|_, waiting| waiting == 1).await;
    let (code, health) = d.get_json("/health").await;
    assert_eq!((code, health["queue"]["running_tokens"].as_u64()), (200, Some(0)), "still prefilling: {health}");

    let running = tokio::time::timeout(PREFILL_BOUND * 4, running).await.expect("the running stream ended");
    let (status, events) = running.unwrap();
    assert_eq!(status, 200);
    assert_eq!(error_then_done(&events), (Some("timeout".into()), true), "{events:?}");
    let error = events[events.len() - 2].json();
    assert!(error["error"]["message"].as_str().unwrap().contains("prefill stall"), "{error}");
    let ending = tokio::time::timeout(PREFILL_BOUND * 4, queued).await.expect("the queued stream ended").unwrap();
    assert_eq!(ending, (503, Some("runtime_unresponsive".into()), false));

    a_new_request_is_refused_while_stalled(&d).await;
}

/// A runtime whose first run hangs in its prefill for 20 s (past the
/// prefill's allowance and the abort's grace) and then returns: the request
/// gets 504 naming the prefill stall, requests are refused meanwhile, and
/// once the run returned the model is ready and serves again.
#[tokio::test]
async fn a_runtime_that_comes_back_after_a_hung_prefill_is_used_again() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant?hang_after=0&hang_ms=20000&hang_runs=1&reply_tokens=10",
        "--model-id",
        "m",
        // One slot: the subject is a request's run that hangs, not `batch = auto`'s timing runs at load (they would meet it).
        "--batch",
        "1",
    ]);
    let url = format!("{}/v1/chat/completions", d.url);
    let stalled = tokio::spawn(d.client().post(&url).json(&chat("m", "first")).send());
    d.wait_queue(|running, _| running == 1).await;
    // The run has not returned yet (it hangs 20 s, the error comes at ~11 s).
    told_then_ready_again(&d, stalled, PREFILL_BOUND * 4, "prefill stall").await;
    let r = d.post("/v1/chat/completions", chat("m", "again")).await;
    assert_eq!(r.status().as_u16(), 200);
    let reply: serde_json::Value = r.json().await.unwrap();
    assert_eq!(reply["usage"]["completion_tokens"], 10, "{reply}");
}

/// A model slower than the prior pace (12 s for a prompt of ~300 tokens,
/// where 2.6 ms a token expects 0.8 s): its first such prompt is aborted as
/// a prefill stall at the 10 s floor, but the runtime's figures of that run,
/// once it returned, teach the model's pace, and the same prompt is then
/// served in its 12 s.
#[tokio::test]
async fn a_model_slower_than_the_prior_loses_one_request_then_is_served_at_its_pace() {
    let spec = "sim:instant?prefill_extra_ms=12000&reply_tokens=4";
    let d = Daemon::start(&["--backend", "sim", "--model", spec, "--model-id", "m"]);
    let prompt = "word ".repeat(300);
    let r = d.post("/v1/chat/completions", chat("m", &prompt)).await;
    assert_eq!(r.status().as_u16(), 504);
    let e: serde_json::Value = r.json().await.unwrap();
    assert!(e["error"]["message"].as_str().unwrap().contains("prefill stall"), "{e}");

    let deadline = Instant::now() + PREFILL_BOUND * 4;
    while d.get_json("/health/ready").await.0 != 200 {
        assert!(Instant::now() < deadline, "never ready again; log:\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = d.post("/v1/chat/completions", chat("m", &prompt)).await;
    assert_eq!(r.status().as_u16(), 200);
    let reply: serde_json::Value = r.json().await.unwrap();
    assert!(reply["timings"]["prompt_ms"].as_f64().unwrap() >= 12_000.0, "{reply}");
    assert_eq!(reply["usage"]["completion_tokens"], 4, "{reply}");
}

#[tokio::test]
async fn a_wedged_run_times_out_and_queued_and_new_requests_get_503() {
    let d = wedging_daemon(&["--request-timeout-secs", "2"]);
    let running = spawn_events(&d, "first");
    d.wait_generating().await;
    let queued = spawn_stream(&d, "second");
    d.wait_queue(|_, waiting| waiting == 1).await;

    let running = tokio::time::timeout(STALL_BOUND * 4, running).await.expect("the running stream ended");
    let (status, events) = running.unwrap();
    assert_eq!((status, error_then_done(&events)), (200, (Some("timeout".into()), true)), "{events:?}");
    // Ended by request_timeout (2 s), not by the decode stall (11 s): said
    // by the error itself, whatever a busy machine makes of the time.
    let error = events[events.len() - 2].json();
    assert!(error["error"]["message"].as_str().unwrap().contains("The request time-out expired"), "{error}");

    // Still queued: its head was held, so the refusal is its status, which a proxy retries elsewhere.
    let ending = tokio::time::timeout(STALL_BOUND * 4, queued).await.expect("ended").unwrap();
    assert_eq!(ending, (503, Some("runtime_unresponsive".into()), false));

    let r = d.post("/v1/chat/completions", chat("m", "third")).await;
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "runtime_unresponsive", "{e}");
    // Not ready: a load balancer must stop sending requests here.
    let (code, ready) = d.get_json("/health/ready").await;
    assert_eq!((code, ready["status"].as_str()), (503, Some("stalled")), "{ready}");
}

/// The same with batched decoding: a batch whose every slot was left (here,
/// timed out) is aborted, and a runtime that does not return from it counts
/// as unresponsive too (the batch held the turn with no time limit before).
#[tokio::test]
async fn a_wedged_batched_run_makes_the_runtime_unresponsive_too() {
    let d = wedging_daemon(&["--request-timeout-secs", "2", "--batch", "2"]);
    let running = spawn_stream(&d, "first");
    d.wait_generating().await;
    let queued = spawn_stream(&d, "second");
    d.wait_queue(|_, waiting| waiting == 1).await;
    let ending = tokio::time::timeout(STALL_BOUND * 4, running).await.expect("ended").unwrap();
    assert_eq!(ending, (200, Some("timeout".into()), true));
    let ending = tokio::time::timeout(STALL_BOUND * 4, queued).await.expect("ended").unwrap();
    assert_eq!(ending, (503, Some("runtime_unresponsive".into()), false));
    let r = d.post("/v1/chat/completions", chat("m", "third")).await;
    assert_eq!(r.status().as_u16(), 503);
    let (code, ready) = d.get_json("/health/ready").await;
    assert_eq!((code, ready["status"].as_str()), (503, Some("stalled")), "{ready}");
}

#[tokio::test]
async fn sigterm_ends_running_and_queued_streams_with_shutting_down_and_done() {
    let d = wedging_daemon(&["--shutdown-grace-secs", "1"]);
    let running = spawn_stream(&d, "first");
    d.wait_generating().await;
    let queued = spawn_stream(&d, "second");
    d.wait_queue(|_, waiting| waiting == 1).await;
    let signalled = Instant::now();
    // SAFETY: plain kill(2) on our child's pid.
    assert_eq!(unsafe { kill(d.pid() as i32, 15) }, 0);
    let running = tokio::time::timeout(Duration::from_secs(8), running).await.expect("ended").unwrap();
    assert_eq!(running, (200, Some("shutting_down".into()), true));
    // Still queued: its head was held, so the refusal is its status.
    let queued = tokio::time::timeout(Duration::from_secs(8), queued).await.expect("ended").unwrap();
    assert_eq!(queued, (503, Some("shutting_down".into()), false));
    // The grace period (1 s) + the abort's grace (1 s), 3 × for a loaded machine.
    let took = signalled.elapsed();
    assert!(took < Duration::from_secs(6), "the streams ended {took:?} after SIGTERM");
}

/// Seconds into the day of a log line's timestamp ("2026-11-28T00:29:27.254755Z  INFO …").
fn logged_at(log: &str, needle: &str) -> f64 {
    let line = log.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no line with {needle:?}:\n{log}"));
    let time = line.split_once('T').and_then(|(_, rest)| rest.split_once('Z')).map(|(t, _)| t).unwrap_or("");
    let parts: Vec<f64> = time.split(':').map(|p| p.parse().unwrap_or(f64::NAN)).collect();
    assert_eq!(parts.len(), 3, "no time in {line:?}");
    parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
}

/// From the signal's log line to the last one, by the daemon's own clock.
fn shutdown_took(log: &str) -> f64 {
    let took = logged_at(log, "stopped") - logged_at(log, "shutting down: no new requests");
    // Across midnight.
    if took < 0.0 {
        took + 86_400.0
    } else {
        took
    }
}

/// SIGTERM, then the exit status and the whole log (read after the exit).
async fn sigterm(d: Daemon) -> (std::process::ExitStatus, String) {
    tokio::task::block_in_place(|| d.exit())
}

/// The runtime is stuck in an aborted run, so nothing is producing: SIGTERM
/// exits 0 at once instead of waiting the grace period (30 s by default)
/// and then failing on the model it cannot destroy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_on_a_wedged_daemon_exits_0_without_waiting_for_the_grace() {
    let d = wedging_daemon(&["--request-timeout-secs", "2"]);
    let running = spawn_stream(&d, "first");
    d.wait_generating().await;
    let ending = tokio::time::timeout(Duration::from_secs(20), running).await.expect("ended").unwrap();
    assert_eq!(ending, (200, Some("timeout".into()), true));
    let (code, ready) = d.get_json("/health/ready").await;
    assert_eq!((code, ready["status"].as_str()), (503, Some("stalled")), "{ready}");

    let (status, log) = sigterm(d).await;
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("no run is producing"), "{log}");
    assert!(log.contains("exiting without destroying the model"), "{log}");
    let took = shutdown_took(&log);
    // The grace period is 30 s; a few seconds is a generous multiple of the 1.5 s linger.
    assert!(took < 10.0, "the shutdown took {took} s by the daemon's clock:\n{log}");
}

/// A rerank of 2,000 documents (7 MB) being tokenized, nothing running:
/// SIGTERM answers it 503 `shutting_down` and exits 0 without waiting for
/// the tokenizing to end or for the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_a_rerank_is_being_prepared_cancels_it_and_exits_0() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--model-id", "m"]);
    let document = "apples and pears, ".repeat(200);
    let documents = vec![document; 2_000];
    let body = serde_json::json!({"model": "m", "query": "fruit", "documents": documents});
    let rerank = tokio::spawn(d.client().post(format!("{}/v1/rerank", d.url)).json(&body).send());
    // Waiting counts a request from its place in the queue, while it is prepared too.
    d.wait_queue(|running, waiting| running == 0 && waiting == 1).await;

    let (status, log) = sigterm(d).await;
    let r = rerank.await.unwrap().unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "shutting_down", "{e}");
    assert!(status.success(), "{status:?}\n{log}");
    let took = shutdown_took(&log);
    assert!(took < 10.0, "the shutdown took {took} s by the daemon's clock:\n{log}");
}

/// Once a stuck runtime was detected: a new request gets 503
/// `runtime_unresponsive` with `Retry-After`, and readiness says `stalled`.
async fn a_new_request_is_refused_while_stalled(d: &Daemon) {
    let r = d.post("/v1/chat/completions", chat("m", "third")).await;
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "5");
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "runtime_unresponsive", "{e}");
    let (code, ready) = d.get_json("/health/ready").await;
    assert_eq!((code, ready["status"].as_str()), (503, Some("stalled")), "{ready}");
}

/// A stalled request is answered 504 naming `stall` within `bound`; while
/// the run has not returned, new requests are refused and readiness says
/// `stalled`; once it returned, the daemon is ready again (within `bound`).
async fn told_then_ready_again(
    d: &Daemon,
    stalled: tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
    bound: Duration,
    stall: &str,
) {
    let r = tokio::time::timeout(bound, stalled).await.expect("answered").unwrap().unwrap();
    assert_eq!(r.status().as_u16(), 504);
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "timeout", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains(stall), "{e}");
    a_new_request_is_refused_while_stalled(d).await;
    let deadline = Instant::now() + bound;
    while d.get_json("/health/ready").await.0 != 200 {
        assert!(Instant::now() < deadline, "never ready again; log:\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
