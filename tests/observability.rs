//! The timings definitions (docs/timings.md) over many requests and
//! profiles, pacing against known simulator timings, the timings log, and
//! the simulator profiles against Rockchip's published figures.

mod common;
use common::*;
use serde_json::{json, Value};

/// Every invariant of docs/timings.md that one response's figures must
/// satisfy. (`queue_ms + prompt_ms = ttft_ms` is not among them: the three are
/// derived from the same instants by timeline.rs, so it could not fail here;
/// `complete` holds `e2e_ms` against the client's own clock instead.)
fn check_timings(t: &Value, usage: &Value) {
    let f = |k: &str| t[k].as_f64();
    let n = t["predicted_n"].as_u64().unwrap();
    assert_eq!(Some(n), usage["completion_tokens"].as_u64(), "predicted_n = completion_tokens: {t}");
    assert_eq!(Some(n), t["runtime"]["generate_tokens"].as_u64(), "= runtime.generate_tokens: {t}");
    assert_eq!(t["prompt_n"], usage["prompt_tokens"]);
    for (k, v) in t.as_object().unwrap() {
        if let Some(x) = v.as_f64() {
            assert!(x.is_finite() && x >= 0.0, "{k} = {x}");
        }
    }
    let (prefill, ttft, e2e) = (f("prompt_ms").unwrap(), f("ttft_ms").unwrap(), f("e2e_ms").unwrap());
    assert!(prefill <= ttft && ttft <= e2e, "prefill ≤ ttft ≤ e2e: {t}");
    assert!(prefill + 1.0 >= t["runtime"]["prefill_time_ms"].as_f64().unwrap(), "ours ≥ the runtime's: {t}");
    if n <= 1 {
        for k in ["predicted_ms", "predicted_per_token_ms", "predicted_per_second"] {
            assert!(t[k].is_null(), "{k} must be null for n = {n}: {t}");
        }
    } else {
        let decode = f("predicted_ms").unwrap();
        assert!(decode <= e2e, "decode ≤ e2e: {t}");
        assert!(close(f("predicted_per_token_ms").unwrap(), decode / (n - 1) as f64, 1e-6), "tpot: {t}");
        assert!(close(f("predicted_per_second").unwrap(), (n - 1) as f64 / (decode / 1000.0), 1e-3), "tps: {t}");
    }
}

fn body(content: &str, extra: Value) -> Value {
    let mut b = chat("m", content);
    b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    b
}

/// Sends one request and returns (timings, usage, finish_reason) from the
/// body or the stream's final chunk.
/// The server's `e2e_ms` spans part of what the client waited from sending
/// the request to reading the reply's end, so it cannot be longer.
async fn complete(d: &Daemon, b: Value) -> (Value, Value, String) {
    let stream = b["stream"].as_bool().unwrap_or(false);
    let sent = std::time::Instant::now();
    let r = d.post("/v1/chat/completions", b).await;
    assert_eq!(r.status(), 200);
    let (timings, usage, finish) = if !stream {
        let v: Value = r.json().await.unwrap();
        (v["timings"].clone(), v["usage"].clone(), v["choices"][0]["finish_reason"].as_str().unwrap().into())
    } else {
        let (events, _) = read_sse(r).await;
        let last = events[events.len() - 2].json();
        let finish = events[..events.len() - 1]
            .iter()
            .rev()
            .find_map(|e| e.json().pointer("/choices/0/finish_reason")?.as_str().map(String::from));
        (last["timings"].clone(), last["usage"].clone(), finish.unwrap())
    };
    let waited_ms = sent.elapsed().as_secs_f64() * 1000.0;
    assert!(
        timings["e2e_ms"].as_f64().unwrap() <= waited_ms,
        "e2e_ms within the client's {waited_ms:.2} ms: {timings}"
    );
    (timings, usage, finish)
}

#[tokio::test]
async fn invariants_hold_over_many_requests_and_profiles() {
    let script = script(&[("SCRIPTED", "alpha beta gamma delta epsilon zeta")]);
    for profile in ["qwen2-0.5b", "tinyllama-1.1b", "phi3-3.8b", "chatglm3-6b"] {
        let spec = format!("sim:{profile}?time_scale=0.2&reply_tokens=6&script={}", script.path().display());
        let d = Daemon::start(&["--backend", "sim", "--model", &spec, "--model-id", "m"]);
        let mut seen = Vec::new();
        for (i, stream) in [false, true, false, true].into_iter().enumerate() {
            let (t, u, finish) =
                complete(&d, body(&format!("question {i} {profile}"), json!({"stream": stream}))).await;
            check_timings(&t, &u);
            assert_eq!(finish, "stop");
            seen.push(t["predicted_n"].as_u64().unwrap());
        }
        assert!(seen.iter().all(|&n| n == 6), "{profile}: {seen:?}");

        // A one-token reply: no decode phase, so no decode rate.
        let (t, u, finish) = complete(&d, body("one", json!({"max_tokens": 1}))).await;
        check_timings(&t, &u);
        assert_eq!((finish.as_str(), t["predicted_n"].as_u64()), ("length", Some(1)));

        // A stop sequence aborts the run: the runtime may have gone on, our n stops at the match.
        let (whole, _, _) = complete(&d, body("SCRIPTED", json!({}))).await;
        let (t, u, finish) = complete(&d, body("SCRIPTED", json!({"stop": "gamma", "stream": true}))).await;
        assert_eq!(finish, "stop");
        let (n, all) = (t["predicted_n"].as_u64().unwrap(), whole["predicted_n"].as_u64().unwrap());
        assert!(n >= 2 && n < all, "{profile}: aborted at the stop sequence, n = {n} of {all}");
        assert_eq!(Some(n), u["completion_tokens"].as_u64());

        // Two at once: the second waits for the first; its queue time is inside its TTFT.
        let (a, b) = tokio::join!(
            complete(&d, body("first of two", json!({"max_tokens": 4}))),
            complete(&d, body("second of two", json!({"max_tokens": 4, "stream": true})))
        );
        check_timings(&a.0, &a.1);
        check_timings(&b.0, &b.1);
        let queued = if a.0["queue_ms"].as_f64() > b.0["queue_ms"].as_f64() { &a.0 } else { &b.0 };
        let other = if std::ptr::eq(queued, &a.0) { &b.0 } else { &a.0 };
        let q = queued["queue_ms"].as_f64().unwrap();
        assert!(q > 0.5 * other["e2e_ms"].as_f64().unwrap(), "{profile}: queued behind the other: {queued} / {other}");
        assert!(q < queued["ttft_ms"].as_f64().unwrap(), "{profile}: queue time is part of TTFT: {queued}");
    }
}

/// With Qwen2.5-1.5B's real pacing (59.9 ms per token) and a 300 ms extra
/// prefill, TTFT and TPOT must match the profile. The bands allow a loaded
/// 2-core machine tens of ms of scheduling delay, but exclude the wrong
/// definitions: TPOT including the prefill (e2e / n ≈ 110 ms here) and
/// TPOT over n instead of n − 1 intervals (52.4 ms).
#[tokio::test]
async fn reported_ttft_and_tpot_match_a_known_pacing() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:qwen2.5-1.5b?reply_tokens=8&prefill_extra_ms=300",
        "--model-id",
        "m",
    ]);
    let profile = rkllm_sim::profile("qwen2.5-1.5b").unwrap();
    let mut tpots = Vec::new();
    for i in 0..3 {
        let (t, u, _) = complete(&d, body(&format!("pacing {i}"), json!({"stream": i % 2 == 1}))).await;
        check_timings(&t, &u);
        let prompt = t["prompt_n"].as_u64().unwrap() as usize;
        let expected_ttft = profile.prefill_ms(prompt) + 300.0;
        let ttft = t["ttft_ms"].as_f64().unwrap();
        assert!(
            (expected_ttft - 1.0..expected_ttft + 60.0).contains(&ttft),
            "TTFT {ttft:.1} ms, expected {expected_ttft:.1} ms (−1 … +60)"
        );
        tpots.push(t["predicted_per_token_ms"].as_f64().unwrap());
    }
    tpots.sort_by(f64::total_cmp);
    let tpot = tpots[1];
    let (lo, hi) = (0.93 * profile.decode_ms, 1.10 * profile.decode_ms + 2.0);
    assert!(
        (lo..hi).contains(&tpot),
        "median TPOT {tpot:.2} ms outside {lo:.1} … {hi:.1} (pacing {:.1})",
        profile.decode_ms
    );
}

#[tokio::test]
async fn timings_log_lines_match_the_final_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("timings.jsonl");
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:qwen2-0.5b?time_scale=0.05&reply_tokens=5",
        "--model-id",
        "m",
        "--timings-log",
        log.to_str().unwrap(),
    ]);
    let plain: Value = d.post("/v1/chat/completions", chat("m", "plain")).await.json().await.unwrap();
    let (events, _) = read_sse(d.post("/v1/chat/completions", body("streamed", json!({"stream": true}))).await).await;
    let last = events[events.len() - 2].json();
    let lines = timings_log_lines(&log, 2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (response, line) in [(&plain, &lines[0]), (&last, &lines[1])] {
        assert_eq!(line["id"], response["id"]);
        assert_eq!(line["timings"], response["timings"], "the log line carries the final chunk's timings exactly");
        assert_eq!(line["completion_tokens"], response["usage"]["completion_tokens"]);
        assert_eq!(line["prompt_tokens"], response["usage"]["prompt_tokens"]);
        assert_eq!((line["status"].as_u64(), line["finish_reason"].as_str()), (Some(200), Some("stop")));
        assert_eq!((line["model"].as_str(), line["client_disconnected"].as_bool()), (Some("m"), Some(false)));
        // The raw timeline gives the same figures (µs vs ms).
        let raw = &line["timeline_us"];
        let ms = |k: &str| raw[k].as_f64().unwrap() / 1000.0;
        assert!(close(ms("first_token"), line["timings"]["ttft_ms"].as_f64().unwrap(), 0.002));
        assert!(close(ms("finished"), line["timings"]["e2e_ms"].as_f64().unwrap(), 0.002));
        assert!(ms("admitted") <= ms("first_token") && ms("first_token") <= ms("last_token"));
    }
    // The same request is in the structured log, once (read after the exit).
    let id = plain["id"].as_str().unwrap().to_owned();
    let (_, stderr) = d.exit();
    assert_eq!(stderr.lines().filter(|l| l.contains("request finished") && l.contains(&id)).count(), 1, "{stderr}");
}

#[tokio::test]
async fn an_unwritable_timings_log_stops_the_start_with_a_clear_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--backend", "sim", "--model", "sim:instant", "--port", "0"])
        .args(["--timings-log", "/nonexistent-dir/t.jsonl"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot open the timings log /nonexistent-dir/t.jsonl"), "{err}");
}

/// Rockchip's published RK3588 figures (runtime 1.3.0, w8a8, 128-token
/// prompt; the table in docs/timings.md), measured through the daemon on the
/// simulator's profiles at half of real time. The TTFT at another prompt
/// length follows the Qwen2.5-1.5B field measurement, 104 ms + 2.14 ms per
/// prompt token (378 ms at 128), scaled to each model's published TTFT.
#[tokio::test]
async fn sim_profiles_reproduce_the_published_figures() {
    const SCALE: f64 = 0.5;
    let published = [
        ("qwen2-0.5b", 146.0, 41.6),
        ("qwen3-0.6b", 199.0, 32.9),
        ("tinyllama-1.1b", 244.0, 24.4),
        ("qwen2.5-1.5b", 378.0, 16.7),
        ("phi3-3.8b", 1017.0, 7.45),
        ("chatglm3-6b", 1353.0, 4.98),
    ];
    for (name, ttft_at_128, tokens_per_s) in published {
        let spec = format!("sim:{name}?time_scale={SCALE}&reply_tokens=8");
        let d = Daemon::start(&["--backend", "sim", "--model", &spec, "--model-id", "m"]);
        let (t, u, _) = complete(&d, body("the published figures", json!({}))).await;
        check_timings(&t, &u);
        let n = t["prompt_n"].as_f64().unwrap();
        let expected = ttft_at_128 * (104.0 + 274.0 / 128.0 * n) / 378.0 * SCALE;
        let prefill = t["prompt_ms"].as_f64().unwrap();
        // A sleep is never shorter; a loaded machine makes it longer.
        assert!(
            (expected - 1.0..expected * 1.2 + 40.0).contains(&prefill),
            "{name}: prefill {prefill:.1} ms at {n} tokens, expected {expected:.1}"
        );
        // Upper bands wide enough for a loaded 2-core machine; a wrong profile is off by more.
        let (tpot, expected) = (t["predicted_per_token_ms"].as_f64().unwrap(), 1000.0 / tokens_per_s * SCALE);
        assert!(
            (0.93 * expected..1.5 * expected + 5.0).contains(&tpot),
            "{name}: TPOT {tpot:.2} ms, expected {expected:.2}"
        );
    }
}
