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

    let lines = timings_log_lines(log.path(), 2);
    assert!(lines.iter().all(|l| l["timings"]["instance"] == "board-7"), "{lines:?}");
    let (_, stderr) = d.exit();
    assert!(stderr.contains("instance=\"board-7\""), "the request log names the instance:\n{stderr}");
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

/// One sample of `/metrics`: series name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: std::collections::BTreeMap<String, String>,
    value: f64,
}

/// `/metrics`' samples. Read here rather than by prometheus-parse, which
/// skips names with colons (vLLM's and llama.cpp's).
async fn scrape(d: &Daemon) -> Vec<Sample> {
    let text = reqwest::get(format!("{}/metrics", d.url)).await.unwrap().text().await.unwrap();
    // Go's text parser (expfmt, what routers' scrapers use) refuses an unknown
    // TYPE, and with it the whole scrape; OpenMetrics' `info` is one.
    let types = text.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split_whitespace().nth(1));
    for t in types {
        assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&t), "TYPE {t}");
    }
    let sample = |line: &str| {
        let (series, value) = line.rsplit_once(' ')?;
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        let labels = labels.strip_suffix('}')?;
        let labels = labels
            .split("\",")
            .filter(|kv| !kv.is_empty())
            .filter_map(|kv| kv.split_once("=\""))
            .map(|(k, v)| (k.to_owned(), v.trim_end_matches('"').to_owned()))
            .collect();
        Some(Sample { name: name.to_owned(), labels, value: value.parse().ok()? })
    };
    text.lines().filter(|l| !l.starts_with('#')).map(|l| sample(l).unwrap_or_else(|| panic!("{l}"))).collect()
}

fn sample(s: &[Sample], name: &str) -> Option<f64> {
    s.iter().find(|x| x.name == name).map(|x| x.value)
}

#[tokio::test]
async fn routers_read_the_queue_and_kv_cache_under_vllm_and_llama_cpp_names() {
    // 300 ms a token: the first reply's remaining 11 tokens outlast the
    // scrape below that must see it running and the second waiting, even
    // on a machine busy enough to take seconds over it.
    // One slot, without `auto`'s timing runs at load (seconds at this pace).
    let d =
        Daemon::start(&["--model", "sim:qwen2.5-1.5b?reply_tokens=12&time_scale=5", "--model-id", "m", "--batch", "1"]);
    let s = scrape(&d).await;
    assert_eq!(sample(&s, "vllm:num_requests_running"), Some(0.0));
    assert_eq!(sample(&s, "vllm:kv_cache_usage_perc"), None, "unknown before the first run: absent, not 0");
    assert_eq!(sample(&s, "vllm:lora_requests_info"), None, "no adapters: no LoRA series, as vLLM");

    // One running, one waiting.
    let url = d.url.clone();
    let send = |content: &'static str| {
        let url = url.clone();
        tokio::spawn(async move {
            reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&chat("m", content)).send().await
        })
    };
    let first = send("first");
    d.wait_generating().await;
    let second = send("second");
    d.wait_queue(|running, waiting| running == 1 && waiting == 1).await;
    let s = scrape(&d).await;
    for (alias, own) in [
        ("vllm:num_requests_running", "rkllmd_requests_running"),
        ("vllm:num_requests_waiting", "rkllmd_requests_waiting"),
        ("llamacpp:requests_processing", "rkllmd_requests_running"),
        ("llamacpp:requests_deferred", "rkllmd_requests_waiting"),
    ] {
        assert_eq!(sample(&s, alias), sample(&s, own), "{alias} = {own}");
    }
    assert_eq!(
        (sample(&s, "vllm:num_requests_running"), sample(&s, "vllm:num_requests_waiting")),
        (Some(1.0), Some(1.0))
    );
    for r in [first, second] {
        assert_eq!(r.await.unwrap().unwrap().status(), 200);
    }

    let s = scrape(&d).await;
    let tokens = sample(&s, "rkllmd_kv_cache_tokens").expect("sampled after the run");
    let usage = sample(&s, "rkllmd_kv_cache_usage_ratio").unwrap();
    assert!(tokens > 12.0 && (usage - tokens / 4096.0).abs() < 1e-9, "tokens {tokens} over the 4096 context: {usage}");
    for alias in ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio"] {
        assert_eq!(sample(&s, alias), Some(usage), "{alias}");
    }
    assert_eq!(sample(&s, "llamacpp:kv_cache_tokens"), Some(tokens));
    assert_eq!(sample(&s, "llamacpp:prompt_tokens_total"), sample(&s, "rkllmd_prompt_tokens_total"));
    assert_eq!(sample(&s, "llamacpp:tokens_predicted_total"), Some(24.0));
}

#[tokio::test]
async fn routers_see_the_lora_adapters_as_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("style.rkllm");
    std::fs::write(&path, "adapter").unwrap();
    let lora = format!("style={}", path.display());
    let d = Daemon::start(&["--model", "sim:instant", "--model-id", "base", "--lora", &lora]);
    let s = scrape(&d).await;
    let info = s.iter().find(|x| x.name == "vllm:lora_requests_info").expect("the LoRA series");
    let label = |k: &str| info.labels.get(k).map(String::as_str);
    assert_eq!(label("running_lora_adapters"), Some("base:style"), "the id clients name: {info:?}");
    assert_eq!((label("waiting_lora_adapters"), label("max_lora")), (Some(""), Some("1")));
}

fn stream_body(content: &str) -> Value {
    json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": content}]})
}

/// Sends a stream request; gives the response and how long its head took.
async fn stream_head(d: &Daemon, content: &str) -> (reqwest::Response, std::time::Duration) {
    let sent = std::time::Instant::now();
    let r = d.post("/v1/chat/completions", stream_body(content)).await;
    (r, sent.elapsed())
}

/// The queue time the stream's last chunk reports.
async fn queue_ms(r: reqwest::Response) -> f64 {
    let (events, _) = read_sse(r).await;
    events[events.len() - 2].json()["timings"]["queue_ms"].as_f64().unwrap()
}

#[tokio::test]
async fn a_queued_streams_head_waits_for_its_run_within_the_bound() {
    // ~1.5 s per reply on the simulator's paced profile.
    let model = "sim:qwen2.5-1.5b?reply_tokens=20";
    for (head_wait, held) in [("30", true), ("0", false)] {
        let d = Daemon::start(&["--model", model, "--model-id", "m", "--head-wait-secs", head_wait]);
        let blocker = d.post("/v1/chat/completions", stream_body("first"));
        let (blocker, _) = tokio::join!(blocker, d.wait_generating());
        let (queued, head) = stream_head(&d, "second").await;
        assert_eq!(queued.status(), 200);
        let (_, queue_ms) = tokio::join!(read_sse(blocker), queue_ms(queued));
        let head_ms = head.as_secs_f64() * 1000.0;
        assert!(queue_ms > 500.0, "the second request waited: {queue_ms} ms");
        if held {
            assert!(
                head_ms + 5.0 >= queue_ms,
                "the head came when the run started: {head_ms} ms, queued {queue_ms} ms"
            );
        } else {
            assert!(head_ms < queue_ms / 2.0, "head_wait_secs = 0: at once ({head_ms} ms, queued {queue_ms} ms)");
        }
    }
}

#[tokio::test]
async fn past_the_bound_the_head_goes_out_and_the_stream_runs() {
    let d = Daemon::start(&["--model", "sim:qwen2.5-1.5b?reply_tokens=30", "--model-id", "m", "--head-wait-secs", "1"]);
    let blocker = d.post("/v1/chat/completions", stream_body("first"));
    let (blocker, _) = tokio::join!(blocker, d.wait_generating());
    let (queued, head) = stream_head(&d, "second").await;
    let (_, queue_ms) = tokio::join!(read_sse(blocker), queue_ms(queued));
    let head_ms = head.as_secs_f64() * 1000.0;
    assert!(
        (1000.0..queue_ms).contains(&head_ms),
        "head after the 1-s bound, before the run: {head_ms} ms (queued {queue_ms})"
    );
}

#[tokio::test]
async fn a_stream_still_queued_when_the_daemon_stops_gets_a_status_a_proxy_retries() {
    let d = Daemon::start(&[
        "--model",
        "sim:qwen2.5-1.5b?reply_tokens=200",
        "--model-id",
        "m",
        "--shutdown-grace-secs",
        "1",
        "--instance",
        "board-3",
    ]);
    let running = d.post("/v1/chat/completions", stream_body("first"));
    let (running, _) = tokio::join!(running, d.wait_generating());
    let url = d.url.clone();
    let queued = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .json(&stream_body("second"))
            .send()
            .await
            .unwrap()
    });
    let url = d.url.clone();
    let ollama = tokio::spawn(async move {
        let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "third"}]});
        reqwest::Client::new().post(format!("{url}/api/chat")).json(&body).send().await.unwrap()
    });
    d.wait_queue(|running, waiting| running == 1 && waiting == 2).await;
    let pid = d.pid();
    let stopped = std::thread::spawn(move || d.terminate());
    let queued = queued.await.unwrap();
    assert_eq!(queued.status(), 503, "not a 200 with an error event inside");
    assert_eq!(queued.headers()["retry-after"], "2");
    assert_eq!(queued.headers()[INSTANCE], "board-3");
    let body: Value = queued.json().await.unwrap();
    assert_eq!(body["error"]["code"], "shutting_down", "{body}");
    let ollama = ollama.await.unwrap();
    assert_eq!(ollama.status(), 503, "Ollama's stream too");
    assert!(ollama.text().await.unwrap().contains("shutting down"));
    // The running one had its head: it ends with an error event the client sees.
    let (events, _) = read_sse(running).await;
    assert!(events.iter().any(|e| e.data.contains("shutting_down")), "pid {pid}: {events:?}");
    assert!(stopped.join().unwrap().success());
}
