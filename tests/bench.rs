//! `rkllmd bench` as a subprocess: against rkllmd with known simulated pacing
//! (the figures must match it), and against a deliberately wrong server
//! written here (every defect must be flagged in the JSON report).

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Runs `rkllmd bench ARGS…` and returns its JSON report (stdout).
async fn bench(args: Vec<String>) -> Value {
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_rkllmd")).arg("bench").arg("--json").args(args).output().expect("spawn bench")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "bench failed: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bench stdout is not JSON ({e}): {stdout}"))
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn kinds(report: &Value) -> Vec<String> {
    report["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap().to_owned()).collect()
}

/// The client's figures against the pacing and against the daemon's own
/// timings of the same request: a busy machine moves both clocks alike, so
/// the bounds above the server's figures are generous multiples of one
/// decode step, not of this machine's speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_match_the_simulated_pacing() {
    let p = rkllm_sim::profile("qwen2-0.5b").unwrap();
    // A long prefill, so that a TPOT that divided E2E by n (~(prefill +
    // 11 steps) / 12) would be off by far more than the tolerance.
    let extra = 450.0;
    let spec = format!("sim:qwen2-0.5b?reply_tokens=12&prefill_extra_ms={extra}");
    let d = Daemon::start(&["--model", &spec]);
    let report =
        bench(args(&["--url", &d.url, "--requests", "3", "--prompt-tokens", "40", "--output-tokens", "64"])).await;

    assert_eq!(report["model"], "sim-qwen2-0.5b", "default model = first id of /v1/models");
    // rkllmd serves /v1/system: embedded as sent, and it says the runtime is the simulator.
    let system = &report["server_system"];
    assert!(report["server_system_note"].is_null(), "{}", report["server_system_note"]);
    assert_eq!(
        (system["runtime"]["backend"].as_str(), system["simulated"].as_bool()),
        (Some("sim"), Some(true)),
        "{system}"
    );
    assert_eq!(kinds(&report), Vec::<String>::new(), "rkllmd's streams break no rule: {}", report["findings"]);
    let requests = report["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 3, "the warm-up request is not measured");
    let step = p.decode_ms;
    for r in requests {
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["completion_tokens"], 12);
        assert_eq!(r["token_chunks"], 12, "one chunk per token");
        let server = |k: &str| r["server_timings"][k].as_f64().unwrap_or_else(|| panic!("no server {k}: {r}"));
        // TTFT spans the whole prefill, and the client's clock spans more
        // than the server's (it sent before the server received).
        let prompt = r["prompt_tokens"].as_f64().unwrap();
        let prefill = p.base_ms + p.per_token_ms * prompt + extra;
        let ttft = r["ttft_ms"].as_f64().unwrap();
        assert!(ttft >= prefill - 2.0, "TTFT {ttft} ms, pacing gives {prefill} ms");
        assert!((server("ttft_ms") - 2.0..server("ttft_ms") + 5.0 * step).contains(&ttft), "TTFT {ttft}: {r}");
        // TPOT excludes the first token, as the server's does: E2E / n
        // would be ~(prefill + 11 steps) / 12, tens of ms more.
        let tpot = r["tpot_ms"].as_f64().unwrap();
        assert!((tpot - server("predicted_per_token_ms")).abs() < step / 2.0, "TPOT {tpot} ms: {r}");
        assert_eq!(r["itl_ms"].as_array().unwrap().len(), 11, "n − 1 gaps");
        // E2E is TTFT and the 11 steps after it, as the server measured them.
        let e2e = r["e2e_ms"].as_f64().unwrap();
        assert!((e2e - ttft - server("predicted_ms")).abs() < 5.0 * step, "E2E {e2e}, TTFT {ttft}: {r}");
        assert_eq!(r["server_timings"]["predicted_n"], 12);
    }
    let level = &report["levels"][0];
    assert_eq!((level["concurrency"].as_u64(), level["succeeded"].as_u64()), (Some(1), Some(3)));
    let itl_p50 = level["itl_ms"]["p50"].as_f64().unwrap();
    let server_step: Vec<f64> =
        requests.iter().map(|r| r["server_timings"]["predicted_per_token_ms"].as_f64().unwrap()).collect();
    let (low, high) = server_step.iter().fold((f64::MAX, f64::MIN), |(l, h), s| (l.min(*s), h.max(*s)));
    assert!((low - step / 2.0..high + step / 2.0).contains(&itl_p50), "ITL p50 {itl_p50}, server {server_step:?}");
    // Output throughput is Σ completion tokens / wall time.
    let expect = 36.0 / level["wall_s"].as_f64().unwrap();
    assert!((level["output_throughput"].as_f64().unwrap() - expect).abs() < 1e-6 * expect);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_turn_conversations_report_ttft_and_cached_tokens_by_turn() {
    let d = Daemon::start(&["--model", "sim:qwen2-0.5b?reply_tokens=8&time_scale=0.2"]);
    // Two conversations at once (`--conversations`, the same as `--concurrency`).
    let report = bench(args(&[
        "--url",
        &d.url,
        "--turns",
        "3",
        "--conversations",
        "2",
        "--requests",
        "2",
        "--warmup",
        "0",
        "--prompt-tokens",
        "60",
        "--output-tokens",
        "16",
    ]))
    .await;
    let requests = report["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2 * 3, "two conversations of three turns");
    for r in requests {
        assert_eq!(r["ok"], true, "{r}");
        let turn = r["turn"].as_u64().unwrap();
        let cached = r["cached_tokens"].as_u64().unwrap();
        if turn == 0 {
            assert_eq!(cached, 0, "{r}");
        } else {
            // The history with the server's own reply is resent: the cache covers it.
            assert!(cached > 0 && cached < r["prompt_tokens"].as_u64().unwrap(), "{r}");
        }
    }
    let by_turn = report["levels"][0]["by_turn"].as_array().unwrap();
    assert_eq!(by_turn.iter().map(|t| t["turn"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(by_turn[0]["cached_tokens"]["mean"], 0.0);
    assert!(
        by_turn[2]["cached_tokens"]["mean"].as_f64().unwrap() > by_turn[1]["cached_tokens"]["mean"].as_f64().unwrap()
    );
    assert_eq!(by_turn[2]["ttft_ms"]["n"], 2);
    // The server's split of each turn's TTFT: queue and prefill, both reported.
    for t in by_turn {
        let (queue, prefill) = (t["queue_ms"]["p50"].as_f64().unwrap(), t["prefill_ms"]["p50"].as_f64().unwrap());
        let ttft = t["ttft_ms"]["max"].as_f64().unwrap() + 1.0;
        assert!(queue >= 0.0 && queue <= ttft && prefill > 0.0 && prefill <= ttft, "{t}");
    }
    // The hit rate: turn 1 never, every follow-up here.
    assert_eq!(by_turn.iter().map(|t| t["hits"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 2, 2]);
    // How the server found each prompt (`timings.cache`): nothing cached yet, then kept.
    assert_eq!(by_turn[0]["found"]["miss"], 2, "{}", by_turn[0]);
    let kept = |t: &serde_json::Value| {
        t["found"]["resident"].as_u64().unwrap_or(0) + t["found"]["restored"].as_u64().unwrap_or(0)
    };
    assert_eq!((kept(&by_turn[1]), kept(&by_turn[2])), (2, 2), "{by_turn:?}");
    assert_eq!(report["levels"][0]["concurrency"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn levels_sample_the_server_and_write_every_output() {
    let d = Daemon::start(&["--model", "sim:instant?reply_tokens=20", "--queue-depth", "8"]);
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let prompts = path("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\": \"Say something about owls.\"}\n\n{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me of | pipes\"}], \"max_tokens\": 5}\n",
    )
    .unwrap();
    let report = bench(args(&[
        "--url",
        &d.url,
        "--concurrency",
        "1,4",
        "--requests",
        "8",
        "--prompts",
        &prompts,
        "--server-pid",
        &d.pid().to_string(),
        "--markdown",
        &path("r.md"),
        "--svg",
        &path("r.svg"),
        "--html",
        &path("r.html"),
    ]))
    .await;
    let levels = report["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 2);
    for (level, c) in levels.iter().zip([1, 4]) {
        assert_eq!(level["concurrency"], c);
        assert_eq!(level["succeeded"], 8, "{level}");
        let process = &level["server_process"];
        assert_eq!(process["pid"], d.pid());
        assert!(process["vm_hwm_kib"].as_u64().unwrap() >= process["rss_end_kib"].as_u64().unwrap());
        assert!(process["rss_peak_kib"].as_u64().unwrap() > 1000, "{process}");
        assert!(process["cpu_us_per_token"].is_number(), "{process}");
    }
    // File prompts are used in turn, with their own max_tokens.
    let tokens: Vec<u64> =
        report["requests"].as_array().unwrap().iter().map(|r| r["completion_tokens"].as_u64().unwrap()).collect();
    assert!(tokens.contains(&5) && tokens.contains(&20), "{tokens:?}");

    let md = std::fs::read_to_string(path("r.md")).unwrap();
    for part in ["## concurrency 4", "| TTFT ms |", "Say something about owls.", "Tell me of | pipes", "## Definitions"]
    {
        assert!(md.contains(part), "markdown lacks {part:?}");
    }
    let svg = std::fs::read_to_string(path("r.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // Two distribution panels with a curve per level, and the throughput line.
    assert_eq!(svg.matches("<polyline").count(), 5, "{svg}");
    assert!(svg.contains("concurrency 4"));
    // A category axis has no numbered ticks (it once drew one at x = NaN).
    assert!(!svg.contains("NaN"), "{svg}");
    assert!(md.contains("simulated runtime"), "the simulator is named as such: {md}");
    let html = std::fs::read_to_string(path("r.html")).unwrap();
    assert!(html.contains("<svg") && !html.contains("NaN"));
    // HTML tables, not terminal text: each figure a row, the server's /v1/system field by field.
    assert!(!html.contains("<pre>"), "{html}");
    assert!(html.contains("<tr><td>TTFT ms</td><td class=\"n\">8</td>"), "{html}");
    assert!(html.contains("<tr><td>runtime.backend</td><td>sim</td></tr>"), "{html}");
    assert!(html.contains("<tr><td>simulated</td><td>true</td></tr>") && html.contains("class=\"warn\""), "{html}");
}

/// A server that gets everything wrong: the role chunk at accept time, a
/// changing id, no [DONE], and impossible timings.
async fn wrong_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(serve_wrongly(socket));
        }
    });
    url
}

async fn serve_wrongly(mut socket: TcpStream) {
    // One request per connection: the head, then Content-Length bytes of body.
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let Ok(n) = socket.read(&mut buf).await else { return };
        if n == 0 {
            return;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
        .unwrap_or(0);
    while data.len() < head_end + length {
        let Ok(n) = socket.read(&mut buf).await else { return };
        if n == 0 {
            return;
        }
        data.extend_from_slice(&buf[..n]);
    }
    let respond = |status: &str, kind: &str, body: String| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let reply = if head.starts_with("get /v1/models") {
        respond("200 OK", "application/json", json!({"object": "list", "data": [{"id": "wrong-model"}]}).to_string())
    } else if head.starts_with("get /v1/system") {
        respond("200 OK", "application/json", json!({"npu": {"cores": 3, "load": [1, 0, 0]}}).to_string())
    } else if head.starts_with("post /v1/chat/completions") {
        return stream_wrongly(socket).await;
    } else {
        respond("404 Not Found", "text/plain", "no".into())
    };
    let _ = socket.write_all(reply.as_bytes()).await;
}

async fn stream_wrongly(mut socket: TcpStream) {
    let chunk = |id: &str, delta: Value, extra: Value| {
        let mut c = json!({"id": id, "object": "chat.completion.chunk", "created": 1, "model": "wrong-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        format!("data: {c}\n\n")
    };
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    // The role chunk goes out at accept time, before any token exists.
    let first = format!("{head}{}", chunk("a", json!({"role": "assistant", "content": ""}), json!({})));
    if socket.write_all(first.as_bytes()).await.is_err() {
        return;
    }
    tokio::time::sleep(Duration::from_millis(80)).await; // the "prefill"
    for i in 0..10 {
        let id = if i < 5 { "a" } else { "b" };
        if socket.write_all(chunk(id, json!({"content": "tok "}), json!({})).as_bytes()).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(15)).await; // ~66 tok/s
    }
    let end = chunk(
        "b",
        json!({}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15},
               "timings": {"prompt_n": 5, "prompt_ms": -4.0, "predicted_n": 12, "predicted_ms": 1.5,
                           "predicted_per_second": 8000.0}}),
    );
    // …and the stream ends without data: [DONE].
    let _ = socket.write_all(end.as_bytes()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_defect_of_a_wrong_server_is_flagged() {
    let url = wrong_server().await;
    let report = bench(args(&["--url", &url, "--requests", "2", "--warmup", "0"])).await;
    assert_eq!(report["model"], "wrong-model");
    assert_eq!(report["server_system"], json!({"npu": {"cores": 3, "load": [1, 0, 0]}}), "embedded verbatim");
    let found = kinds(&report);
    for kind in [
        "role_chunk_without_token",
        "id_changed",
        "done_missing",
        "predicted_n_mismatch",
        "negative_value",
        "decode_rate_inconsistent",
    ] {
        assert_eq!(found.iter().filter(|k| *k == kind).count(), 2, "{kind} once per request: {}", report["findings"]);
    }
    let rate = report["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "decode_rate_inconsistent").unwrap();
    assert!(rate["detail"].as_str().unwrap().contains("server reports 8000.0 tok/s"), "{rate}");
    for r in report["requests"].as_array().unwrap() {
        // The accept-time role chunk starts no clock: TTFT is the first real token, after the 80 ms "prefill".
        let ttft = r["ttft_ms"].as_f64().unwrap();
        assert!(ttft >= 80.0, "TTFT {ttft} ms counted the role chunk");
        assert_eq!(r["token_chunks"], 10);
        assert_eq!(r["itl_ms"].as_array().unwrap().len(), 9);
    }
    assert_eq!(report["levels"][0]["findings"]["id_changed"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_requests_are_counted_by_kind() {
    let d = Daemon::start(&["--model", "sim:instant", "--api-key", "k1"]);
    let output = tokio::task::spawn_blocking({
        let url = d.url.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_rkllmd"))
                .args([
                    "bench",
                    "--json",
                    "--url",
                    &url,
                    "--model",
                    "sim-instant",
                    "--requests",
                    "2",
                    "--api-key",
                    "bad",
                ])
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(!output.status.success(), "no request succeeded: exit status says so");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["levels"][0]["errors"], json!({"http_401": 2}));
    assert_eq!(report["levels"][0]["failed"], 2);
    assert_eq!(report["levels"][0]["ttft_ms"]["mean"], Value::Null, "no sample, no figure");
    // Plain HTTP only: an https URL is refused up front with a clear message.
    let https =
        Command::new(env!("CARGO_BIN_EXE_rkllmd")).args(["bench", "--url", "https://127.0.0.1:1"]).output().unwrap();
    assert!(!https.status.success());
    assert!(String::from_utf8_lossy(&https.stderr).contains("only http:// URLs"), "{https:?}");
    // With the right key the same run succeeds.
    let ok = bench(args(&["--url", &d.url, "--requests", "2", "--api-key", "k1"])).await;
    assert_eq!(ok["levels"][0]["succeeded"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_with_each_request_splits_its_ttft() {
    // The simulated encoder takes Rockchip's 2930 ms × time_scale: 58.6 ms here.
    let d = Daemon::start(&["--model", "sim:qwen2.5-vl-3b?reply_tokens=4&time_scale=0.02"]);
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("red.png");
    image::RgbImage::from_pixel(64, 48, image::Rgb([255, 0, 0])).save(&image).unwrap();
    let report = bench(args(&[
        "--url",
        &d.url,
        "--image",
        image.to_str().unwrap(),
        "--concurrency",
        "1",
        "--requests",
        "3",
        "--warmup",
        "0",
        "--prompt-tokens",
        "20",
        "--output-tokens",
        "8",
    ]))
    .await;
    for r in report["requests"].as_array().unwrap() {
        assert_eq!(r["ok"], true, "{r}");
    }
    let level = &report["levels"][0];
    assert_eq!(level["image_preprocess_ms"]["n"], 3, "{level}");
    // The same image three times: the encoder ran for the first request only.
    assert_eq!(level["image_encoder_ms"]["n"], 1, "{level}");
    assert!(level["image_encoder_ms"]["p50"].as_f64().unwrap() >= 58.0, "{level}");
    assert_eq!(level["image_prefill_ms"]["n"], 3, "{level}");
}

/// bench reads none of the daemon's settings: a missing config file or a bad
/// `RKLLMD_PORT` in the environment does not stop it; and a server that is
/// not there is reported with the cause, "connection refused".
#[test]
fn bench_ignores_the_daemon_configuration_and_names_a_refused_connection() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // dropped: nobody listens
    let output = Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["bench", "--url", &format!("http://{closed}"), "--requests", "1"])
        .env("RKLLMD_CONFIG", "/nope/rkllmd.toml")
        .env("RKLLMD_PORT", "abc")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "a run that failed, not a configuration error (2): {stderr}");
    assert!(!stderr.contains("/nope") && !stderr.contains("--port"), "{stderr}");
    assert!(stderr.to_lowercase().contains("connection refused"), "{stderr}");
}
