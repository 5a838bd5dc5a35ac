//! `/metrics` parsed as Prometheus text, its counters against the requests
//! sent (errors included) and the timings log; telemetry from fixture trees;
//! `/v1/system`; the separate metrics listener.

mod common;
use common::*;
use prometheus_parse::{Scrape, Value as Metric};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

async fn scrape_at(url: &str) -> Scrape {
    let r = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    let text = r.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"));
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

/// The sum of a metric's samples whose labels include `labels`.
fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = s
        .samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match x.value {
            Metric::Counter(v) | Metric::Gauge(v) | Metric::Untyped(v) => v,
            _ => panic!("{name} is not a single value"),
        })
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

/// A histogram's `_count`, after checking its buckets are cumulative and end at it.
fn histogram_count(s: &Scrape, name: &str) -> u64 {
    let count = value(s, &format!("{name}_count"), &[]).unwrap_or_else(|| panic!("no {name}_count"));
    let sample = s.samples.iter().find(|x| x.metric == name).unwrap_or_else(|| panic!("no {name} buckets"));
    let Metric::Histogram(buckets) = &sample.value else { panic!("{name} is not a histogram") };
    let mut buckets = buckets.clone();
    buckets.sort_by(|a, b| a.less_than.total_cmp(&b.less_than));
    assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count), "{name}: buckets not cumulative");
    let last = buckets.last().unwrap();
    assert!(last.less_than.is_infinite() && last.count == count, "{name}: +Inf bucket ≠ count");
    assert_eq!(buckets.first().unwrap().less_than, 0.001, "{name}: buckets start at 1 ms");
    assert_eq!(buckets[buckets.len() - 2].less_than, 600.0, "{name}: buckets end at 10 min");
    count as u64
}

fn streaming(content: &str) -> Value {
    let mut b = chat("m", content);
    b["stream"] = json!(true);
    b
}

/// Reads a stream until its first `data:` event.
async fn first_event(r: &mut reqwest::Response) {
    let mut buf = String::new();
    while !buf.contains("data: ") {
        let bytes = r.chunk().await.unwrap().expect("stream ended early");
        buf.push_str(std::str::from_utf8(&bytes).unwrap());
    }
}

#[tokio::test]
async fn counters_add_up_to_the_requests_sent_including_errors() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("timings.jsonl");
    // LONG: a 100-token reply at Qwen2-0.5B's 24 ms per token outlasts the 1-s request time-out.
    let long_reply = "word ".repeat(100);
    let script = script(&[("LONG", &long_reply)]);
    let spec = format!("sim:qwen2-0.5b?reply_tokens=4&script={}", script.path().display());
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        &spec,
        "--model-id",
        "m",
        "--queue-depth",
        "1",
        "--request-timeout-secs",
        "1",
        "--max-context-len",
        "256",
        "--max-new-tokens",
        "128",
        "--timings-log",
        log.to_str().unwrap(),
    ]);
    let mut expected: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut expect = |status: &'static str, reason: &'static str| *expected.entry((status, reason)).or_default() += 1;
    let post = |body: Value| d.post("/v1/chat/completions", body);

    for i in 0..3 {
        assert_eq!(post(chat("m", &format!("plain {i}"))).await.status(), 200);
        expect("200", "stop");
    }
    let (events, _) = read_sse(post(streaming("streamed")).await).await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    expect("200", "stop");
    let mut one = chat("m", "one token");
    one["max_tokens"] = json!(1);
    assert_eq!(post(one).await.status(), 200);
    expect("200", "length");
    let legacy = d.post("/v1/completions", json!({"model": "m", "prompt": "legacy", "max_tokens": 2})).await;
    assert_eq!(legacy.status(), 200);
    expect("200", "length");

    // Refused before the engine.
    let mut hot = chat("m", "x");
    hot["temperature"] = json!(5);
    assert_eq!(post(hot).await.status(), 400);
    expect("400", "none");
    // These two name no model served here: counted, under `model=""` (checked below).
    assert_eq!(post(chat("other-model", "x")).await.status(), 404);
    let r = d.client().post(format!("{}/v1/chat/completions", d.url)).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 415);

    // A prompt that does not fit: the simulator's tokenizer counts it, so it never reaches the runtime.
    assert_eq!(post(chat("m", &"overflow ".repeat(300))).await.status(), 400);
    expect("400", "none");

    // LONG runs into the request time-out; meanwhile one waits (and leaves), one is refused.
    let long = tokio::spawn({
        let (client, url) = (d.client(), d.url.clone());
        async move { client.post(format!("{url}/v1/chat/completions")).json(&chat("m", "LONG")).send().await }
    });
    d.wait_generating().await;
    let queued = tokio::spawn({
        let (client, url) = (d.client(), d.url.clone());
        async move { client.post(format!("{url}/v1/chat/completions")).json(&streaming("queued")).send().await }
    });
    d.wait_queue(|r, w| r == 1 && w == 1).await;
    assert_eq!(post(chat("m", "refused")).await.status(), 429);
    expect("429", "none");
    queued.abort();
    let _ = queued.await;
    expect("499", "abort");
    assert_eq!(long.await.unwrap().unwrap().status(), 504);
    expect("504", "timeout");

    // A client that leaves mid-stream.
    let mut gone = post(streaming("LONG again")).await;
    first_event(&mut gone).await;
    drop(gone);
    expect("499", "abort");
    d.wait_queue(|r, w| r == 0 && w == 0).await;

    let sent: u64 = expected.values().sum();
    let rejected: u64 = expected.iter().filter(|((_, r), _)| *r == "none").map(|(_, n)| n).sum();
    let lines = timings_log_lines(&log, (sent - rejected) as usize);
    assert_eq!(lines.len() as u64, sent - rejected, "one timings-log line per request that reached the engine");
    let s = scrape_at(&d.url).await;

    let total = value(&s, "rkllmd_requests_total", &[]).unwrap() as u64;
    assert_eq!(total, sent + 2, "every request counted once");
    for status in ["404", "415"] {
        assert_eq!(value(&s, "rkllmd_requests_total", &[("model", ""), ("status", status)]), Some(1.0), "{status}");
    }
    for ((status, reason), n) in &expected {
        let got = value(&s, "rkllmd_requests_total", &[("model", "m"), ("status", status), ("finish_reason", reason)]);
        assert_eq!(got, Some(*n as f64), "requests_total{{status={status},finish_reason={reason}}}");
    }
    assert_eq!(value(&s, "rkllmd_client_disconnects_total", &[]), Some(2.0));
    assert_eq!(value(&s, "rkllmd_timing_mismatch_total", &[]), Some(0.0));

    // Histogram counts against the requests, per the definitions.
    let tokens: Vec<u64> = lines.iter().map(|l| l["completion_tokens"].as_u64().unwrap()).collect();
    let count = |pred: &dyn Fn(&Value) -> bool| lines.iter().filter(|l| pred(l)).count() as u64;
    assert_eq!(histogram_count(&s, "rkllmd_e2e_request_latency_seconds"), sent - rejected);
    assert_eq!(
        histogram_count(&s, "rkllmd_request_queue_time_seconds"),
        count(&|l| !l["timeline_us"]["admitted"].is_null()),
        "every admitted request"
    );
    assert_eq!(
        sent - rejected - histogram_count(&s, "rkllmd_request_queue_time_seconds"),
        1,
        "only the client that left the queue was never admitted"
    );
    let with_tokens = tokens.iter().filter(|&&n| n >= 1).count() as u64;
    let decoding = tokens.iter().filter(|&&n| n >= 2).count() as u64;
    assert_eq!(histogram_count(&s, "rkllmd_time_to_first_token_seconds"), with_tokens);
    assert_eq!(histogram_count(&s, "rkllmd_request_prefill_time_seconds"), with_tokens);
    assert_eq!(histogram_count(&s, "rkllmd_time_per_output_token_seconds"), decoding);
    assert_eq!(histogram_count(&s, "rkllmd_request_decode_time_seconds"), decoding);
    let gaps: u64 = tokens.iter().map(|n| n.saturating_sub(1)).sum();
    assert_eq!(histogram_count(&s, "rkllmd_inter_token_latency_seconds"), gaps, "n − 1 gaps per request");
    assert_eq!(value(&s, "rkllmd_generation_tokens_total", &[]), Some(tokens.iter().sum::<u64>() as f64));
    let prompt: i64 = lines.iter().filter_map(|l| l["prompt_tokens"].as_i64()).sum();
    assert_eq!(value(&s, "rkllmd_prompt_tokens_total", &[]), Some(prompt as f64));
    // The timings log agrees with the labels.
    let mut from_log: BTreeMap<(String, String), u64> = BTreeMap::new();
    for l in &lines {
        *from_log.entry((l["status"].to_string(), l["finish_reason"].as_str().unwrap().to_owned())).or_default() += 1;
    }
    for ((status, reason), n) in expected.iter().filter(|((_, r), _)| *r != "none") {
        assert_eq!(from_log.get(&(status.to_string(), reason.to_string())), Some(n), "{status}/{reason} in the log");
    }

    // Gauges of this moment.
    assert_eq!(value(&s, "rkllmd_requests_running", &[]), Some(0.0));
    assert_eq!(value(&s, "rkllmd_requests_waiting", &[]), Some(0.0));
    let kv = value(&s, "rkllmd_kv_cache_tokens", &[]).unwrap();
    assert!(kv > 0.0, "the conversation cache keeps the last run's tokens (keep_history = 1): {kv}");
    assert!(value(&s, "rkllmd_runtime_peak_memory_bytes", &[]).unwrap() > 1e6);
    assert!(value(&s, "process_resident_memory_bytes", &[]).unwrap() > 1e6);
    assert!(value(&s, "process_cpu_seconds_total", &[]).is_some());
    assert_eq!(value(&s, "rkllmd_runtime_info", &[("backend", "sim"), ("runtime_version", "1.3.0")]), Some(1.0));
}

/// A stop sequence ends the reply, but the runtime delivers tokens after the
/// match before the abort lands (`abort_lag`: it notices the abort two
/// tokens late), so it counts tokens the daemon dropped. Those are
/// accounted for: no token mismatch, no WARN.
#[tokio::test]
async fn tokens_dropped_after_a_stop_sequence_are_no_mismatch() {
    let script = script(&[("STOP AT END", "Hello world END more text here")]);
    let spec = format!("sim:instant?abort_lag=2&script={}", script.path().display());
    let d = Daemon::start(&["--backend", "sim", "--model", &spec, "--model-id", "m"]);
    for _ in 0..3 {
        let mut b = chat("m", "STOP AT END");
        b["stop"] = json!(["END"]);
        let v: Value = d.post("/v1/chat/completions", b).await.json().await.unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "Hello world ", "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let (ours, runtime) = (
            v["timings"]["predicted_n"].as_u64().unwrap(),
            v["timings"]["runtime"]["generate_tokens"].as_u64().unwrap(),
        );
        assert!(ours < runtime, "the runtime went past the match: {v}");
    }
    let s = scrape_at(&d.url).await;
    assert_eq!(value(&s, "rkllmd_timing_mismatch_total", &[("check", "tokens")]), Some(0.0));
}

/// A daemon on `sim:instant` (model id `m`) reading its telemetry from the
/// fixture tree `tests/fixtures/telemetry/NAME`.
fn start_on_fixture(name: &str, extra: &[&str]) -> Daemon {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/telemetry").join(name);
    let mut args = vec!["--backend", "sim", "--model", "sim:instant", "--model-id", "m", "--telemetry-root"];
    args.push(root.to_str().unwrap());
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

#[tokio::test]
async fn board_telemetry_appears_in_metrics_and_system() {
    let d = start_on_fixture("rk3588", &["--api-key", "k"]);
    let s = scrape_at(&d.url).await; // public, like /health
    for (core, ratio) in [("0", 0.35), ("1", 0.0), ("2", 1.0)] {
        assert_eq!(value(&s, "rkllmd_npu_load_ratio", &[("core", core)]), Some(ratio));
    }
    assert_eq!(value(&s, "rkllmd_npu_frequency_hertz", &[]), Some(1e9));
    assert_eq!(value(&s, "rkllmd_soc_temperature_celsius", &[("zone", "npu-thermal")]), Some(40.662));
    assert_eq!(value(&s, "rkllmd_system_load_average", &[("window", "5m")]), Some(0.98));
    assert_eq!(value(&s, "rkllmd_runtime_info", &[("driver_version", "0.9.8"), ("abi", "1.3")]), Some(1.0));

    let r = d.client().get(format!("{}/v1/system", d.url)).send().await.unwrap();
    assert_eq!(r.status(), 401, "/v1/system is part of the authenticated API");
    let r = d.client().get(format!("{}/v1/system", d.url)).bearer_auth("k").send().await.unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!((v["runtime"]["backend"].as_str(), v["runtime"]["abi"].as_str()), (Some("sim"), Some("1.3")));
    assert_eq!(v["runtime"]["version"], "1.3.0");
    // The driver and cores are read from the board's files; the platform only the
    // runtime would print, and the simulator's banner names no board it runs on.
    assert_eq!((v["platform"].as_str(), v["driver_version"].as_str()), (None, Some("0.9.8")));
    assert_eq!(v["simulated"], true);
    assert_eq!(v["npu"]["cores"], 3);
    assert_eq!(
        v["npu"]["load"],
        json!([{"core": 0, "ratio": 0.35}, {"core": 1, "ratio": 0.0}, {"core": 2, "ratio": 1.0}])
    );
    assert_eq!(v["npu"]["frequency_hz"], 1_000_000_000u64);
    assert_eq!(v["temperatures"].as_array().unwrap().len(), 3);
    assert_eq!(v["temperatures"][2], json!({"zone": "npu-thermal", "celsius": 40.662}));
    assert_eq!(v["cpu"]["load_average"], json!([1.52, 0.98, 0.44]));
    assert!(v["cpu"]["count"].as_u64().unwrap() >= 1);
    assert!(v["cpu"]["process_seconds"].as_f64().unwrap() >= 0.0);
    let (rss, peak) = (v["memory"]["rss_bytes"].as_u64().unwrap(), v["memory"]["peak_rss_bytes"].as_u64().unwrap());
    assert!(rss > 1_000_000 && peak >= rss, "{}", v["memory"]);
    assert!(v["memory"]["runtime_peak_bytes"].is_null(), "no run yet");

    let openapi = d.get_json("/openapi.json").await.1;
    assert!(openapi["paths"]["/v1/system"]["get"].is_object(), "in the OpenAPI document");
}

#[tokio::test]
async fn missing_telemetry_is_missing_not_zero_and_metrics_can_have_their_own_listener() {
    let d = start_on_fixture("missing", &["--metrics-addr", "127.0.0.1:0"]);
    let r = d.client().get(format!("{}/metrics", d.url)).send().await.unwrap();
    assert_eq!(r.status(), 404, "not on the main listener when metrics_addr is set");
    let log = d.log();
    let at = log.find("metrics on http://").expect("metrics listener line") + "metrics on ".len();
    let metrics_url = log[at..].split_whitespace().next().unwrap().trim_end_matches("/metrics").to_owned();
    let s = scrape_at(&metrics_url).await;
    for absent in [
        "rkllmd_npu_load_ratio",
        "rkllmd_npu_frequency_hertz",
        "rkllmd_soc_temperature_celsius",
        "rkllmd_system_load_average",
    ] {
        assert!(s.samples.iter().all(|x| x.metric != absent), "{absent} must be absent");
    }
    assert!(value(&s, "rkllmd_requests_running", &[]).is_some());

    let v = d.get_json("/v1/system").await.1;
    for pointer in ["/npu/load", "/npu/frequency_hz", "/temperatures", "/cpu/load_average"] {
        assert!(v.pointer(pointer).unwrap().is_null(), "{pointer} must be null: {v}");
    }
    // The simulator prints a board's banner at init (driver 0.9.8, RK3588, three
    // cores); none of it describes this machine, so all are null and it says so.
    assert_eq!(v["simulated"], true, "{v}");
    for pointer in ["/driver_version", "/platform", "/npu/cores"] {
        assert!(v.pointer(pointer).unwrap().is_null(), "{pointer} must be null on the simulator: {v}");
    }
    assert_eq!(value(&s, "rkllmd_runtime_info", &[("backend", "sim"), ("simulated", "true")]), Some(1.0));
    let info = s.samples.iter().find(|x| x.metric == "rkllmd_runtime_info").unwrap();
    assert!(info.labels.get("platform").is_none() && info.labels.get("driver_version").is_none(), "{info:?}");
    // The scrape and /v1/system read the missing files: not logged at info (read after the exit).
    let (_, log) = d.exit();
    assert!(!log.contains("telemetry source not available"), "{log}");
}

#[tokio::test]
async fn a_runtime_error_is_counted_once_as_500_error() {
    let d =
        Daemon::start(&["--backend", "sim", "--model", "sim:instant?reply_tokens=8&error_after=2", "--model-id", "m"]);
    assert_eq!(d.post("/v1/chat/completions", chat("m", "x")).await.status(), 500);
    let s = scrape_at(&d.url).await;
    assert_eq!(value(&s, "rkllmd_requests_total", &[]), Some(1.0));
    let got = value(&s, "rkllmd_requests_total", &[("model", "m"), ("status", "500"), ("finish_reason", "error")]);
    assert_eq!(got, Some(1.0));
}

/// `rkllmd_requests_total` per kind, status and finish reason.
fn requests(s: &Scrape, kind: &str, status: &str, reason: &str) -> Option<f64> {
    value(s, "rkllmd_requests_total", &[("kind", kind), ("status", status), ("finish_reason", reason)])
}

/// A histogram's `_count` for one `kind`.
fn kind_count(s: &Scrape, name: &str, kind: &str) -> Option<f64> {
    value(s, &format!("{name}_count"), &[("kind", kind)])
}

#[tokio::test]
async fn embedding_and_rerank_requests_are_recorded_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("timings.jsonl");
    let args = ["--backend", "sim", "--model", "sim:instant", "--model-id", "m", "--max-context-len", "256"];
    let d = Daemon::start(&[&args[..], &["--max-new-tokens", "16", "--timings-log", log.to_str().unwrap()]].concat());
    let texts = ["red apples", "green pears", "the train left late"];
    let (n_ok, m_ok) = (3, 2);
    // The model's first embedding shows its width: a wrong `dimensions` is refused after that run, recorded.
    let wrong = json!({"model": "m", "input": "hi", "dimensions": 3});
    assert_eq!(d.post("/v1/embeddings", wrong.clone()).await.status(), 400);
    let mut tokens = 0;
    for i in 0..n_ok {
        let r = d.post("/v1/embeddings", json!({"model": "m", "input": &texts[..=i]})).await;
        assert_eq!(r.status(), 200);
        tokens += r.json::<Value>().await.unwrap()["usage"]["prompt_tokens"].as_u64().unwrap();
    }
    let r = d.client().post(format!("{}/api/embed", d.url)).json(&json!({"model": "m", "input": texts})).send().await;
    let v: Value = r.unwrap().json().await.unwrap();
    tokens += v["prompt_eval_count"].as_u64().unwrap();
    for _ in 0..m_ok {
        let r = d.post("/v1/rerank", json!({"model": "m", "query": "apples", "documents": texts})).await;
        assert_eq!(r.status(), 200);
        tokens += r.json::<Value>().await.unwrap()["usage"]["prompt_tokens"].as_u64().unwrap();
    }
    // Refused before the engine: never queued, counted by the middleware only.
    for body in [json!({"model": "m", "input": []}), json!({"model": "m", "input": "word ".repeat(300)})] {
        assert_eq!(d.post("/v1/embeddings", body).await.status(), 400);
    }
    assert_eq!(d.post("/v1/rerank", json!({"model": "m", "query": "q", "documents": []})).await.status(), 400);
    assert_eq!(d.post("/v1/rerank", json!({"model": "nope", "query": "q", "documents": ["d"]})).await.status(), 404);
    // Ollama's embed with no input only loads the model: no run, counted by the middleware.
    assert_eq!(d.post("/api/embed", json!({"model": "m"})).await.status(), 200);
    // Once the width is known, the same is refused before the engine: no run.
    assert_eq!(d.post("/v1/embeddings", wrong).await.status(), 400);

    let engine_side = n_ok + 1 + m_ok + 1;
    let lines = timings_log_lines(&log, engine_side);
    assert_eq!(lines.len(), engine_side, "one line per request that reached the engine");
    let s = scrape_at(&d.url).await;
    assert_eq!(value(&s, "rkllmd_requests_total", &[]), Some((engine_side + 6) as f64), "every request once");
    assert_eq!(requests(&s, "embedding", "200", "none"), Some(1.0), "the load-only embed");
    assert_eq!(requests(&s, "embedding", "200", "stop"), Some((n_ok + 1) as f64));
    assert_eq!(requests(&s, "embedding", "400", "invalid_dimensions"), Some(1.0));
    assert_eq!(requests(&s, "embedding", "400", "none"), Some(3.0));
    assert_eq!(requests(&s, "rerank", "200", "stop"), Some(m_ok as f64));
    assert_eq!(requests(&s, "rerank", "400", "none"), Some(1.0));
    assert_eq!(requests(&s, "rerank", "404", "none"), Some(1.0));
    assert_eq!(value(&s, "rkllmd_requests_total", &[("kind", "completion")]), None, "no completion was sent");
    // Queue and end-to-end latency per kind; no token figures for runs that generate none.
    for name in ["rkllmd_e2e_request_latency_seconds", "rkllmd_request_queue_time_seconds"] {
        assert_eq!(kind_count(&s, name, "embedding"), Some((n_ok + 2) as f64), "{name}");
        assert_eq!(kind_count(&s, name, "rerank"), Some(m_ok as f64), "{name}");
    }
    for name in ["rkllmd_time_to_first_token_seconds", "rkllmd_time_per_output_token_seconds"] {
        assert_eq!(histogram_count(&s, name), 0, "{name}");
    }
    assert_eq!(value(&s, "rkllmd_generation_tokens_total", &[]), Some(0.0));
    let dims_tokens = rkllm_sim::token_ids("hi").len() as u64;
    assert_eq!(value(&s, "rkllmd_prompt_tokens_total", &[]), Some((tokens + dims_tokens) as f64));

    // The log lines: by value, with the inputs, the tokens and the measured instants only.
    let of = |kind: &str, status: u64| lines.iter().filter(|l| l["kind"] == kind && l["status"] == status).count();
    assert_eq!((of("embedding", 200), of("embedding", 400), of("rerank", 200)), (n_ok + 1, 1, m_ok));
    let inputs: Vec<u64> =
        lines.iter().filter(|l| l["kind"] == "embedding").map(|l| l["inputs"].as_u64().unwrap()).collect();
    assert_eq!(inputs, [1, 1, 2, 3, 3]);
    assert!(lines.iter().filter(|l| l["kind"] == "rerank").all(|l| l["inputs"] == 3));
    let logged: u64 = lines.iter().map(|l| l["prompt_tokens"].as_u64().unwrap()).sum();
    assert_eq!(logged, tokens + dims_tokens);
    for l in &lines {
        let t = &l["timings"];
        let (queue, e2e, run) =
            (t["queue_ms"].as_f64().unwrap(), t["e2e_ms"].as_f64().unwrap(), l["run_ms"].as_f64().unwrap());
        assert!(close(queue + run, e2e, 1e-3), "queue + run = e2e: {l}");
        for null in ["ttft_ms", "prompt_ms", "predicted_ms", "predicted_per_token_ms"] {
            assert!(t[null].is_null(), "{null} is not measured for a {}: {l}", l["kind"]);
        }
        // The runtime's own figures are one run's: a request's only when it had one input.
        if l["inputs"] == 1 {
            assert_eq!(t["runtime"]["prefill_tokens"], l["prompt_tokens"], "{l}");
            assert!(t["runtime"]["prefill_time_ms"].as_f64().unwrap() <= run + 1.0, "{l}");
        } else {
            assert!(t["runtime"].is_null(), "{l}");
        }
        assert_eq!((l["completion_tokens"].as_u64(), l["client_disconnected"].as_bool()), (Some(0), Some(false)));
    }
    // The request log, read after the exit: one event for each request
    // that reached the engine, and a line saying why for each refusal
    // before it, in order (the 404 before the last request's 400).
    let (_, log) = d.exit();
    assert_eq!(log.matches("request finished").count(), engine_side, "one request-log event each");
    let refused: Vec<&str> = log.lines().filter(|l| l.contains("request refused before the engine")).collect();
    assert_eq!(refused.len(), 5, "{log}");
    let said = |i: usize, kind: &str, status: u16| {
        let line = refused[i];
        assert!(line.contains(&format!("kind=\"{kind}\"")) && line.contains(&format!("status={status}")), "{line}");
    };
    said(0, "embedding", 400);
    said(3, "rerank", 404);
    said(4, "embedding", 400);
}

/// With two models, a request refused before the engine is counted under the
/// model its body named (not the first model); a name this daemon does not
/// serve, or no parsable body, under `model=""`.
#[tokio::test]
async fn a_refusal_is_counted_under_the_model_it_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    let tables =
        "[[models]]\nid = \"alpha\"\npath = \"sim:instant\"\n\n[[models]]\nid = \"beta\"\npath = \"sim:instant\"\n";
    std::fs::write(&config, tables).unwrap();
    let d = Daemon::start(&["--backend", "sim", "--config", config.to_str().unwrap()]);
    let mut bad = chat("beta", "x");
    bad["temperature"] = json!(-1);
    assert_eq!(d.post("/v1/chat/completions", bad).await.status(), 400);
    let ollama = json!({"model": "beta", "messages": [{"role": "user", "content": "x"}], "options": {"top_p": 7}});
    assert_eq!(d.post("/api/chat", ollama).await.status(), 400);
    assert_eq!(d.post("/v1/embeddings", json!({"model": "gamma", "input": "x"})).await.status(), 404);
    let s = scrape_at(&d.url).await;
    let refused =
        |model: &str, status: &str| value(&s, "rkllmd_requests_total", &[("model", model), ("status", status)]);
    assert_eq!(refused("beta", "400"), Some(2.0), "the 400s name beta");
    assert_eq!(refused("alpha", "400"), None, "nothing was asked of alpha");
    assert_eq!(refused("", "404"), Some(1.0), "an unknown name is no label");
    assert_eq!(value(&s, "rkllmd_requests_total", &[("model", "gamma")]), None);
}

/// Each model has its own KV cache: the gauge is their sum, not the last
/// run's model's (the same question to two identical models fills both alike).
#[tokio::test]
async fn the_kv_cache_gauge_sums_the_loaded_models() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    let tables = "[[models]]\nid = \"alpha\"\npath = \"sim:instant?reply_tokens=6\"\n\n\
                  [[models]]\nid = \"beta\"\npath = \"sim:instant?reply_tokens=6\"\n";
    std::fs::write(&config, tables).unwrap();
    let d = Daemon::start(&["--backend", "sim", "--config", config.to_str().unwrap(), "--max-loaded-models", "2"]);
    assert_eq!(d.post("/v1/chat/completions", chat("alpha", "the same question")).await.status(), 200);
    let one = value(&scrape_at(&d.url).await, "rkllmd_kv_cache_tokens", &[]).unwrap();
    assert!(one > 0.0, "{one}");
    assert_eq!(d.post("/v1/chat/completions", chat("beta", "the same question")).await.status(), 200);
    let both = value(&scrape_at(&d.url).await, "rkllmd_kv_cache_tokens", &[]).unwrap();
    assert_eq!(both, 2.0 * one, "alpha's cache still holds its {one} tokens");
}
