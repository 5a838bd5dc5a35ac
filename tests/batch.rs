//! Batched decoding (`--batch N`) through the real binary and real HTTP, on
//! the in-process simulator and on the `dlopen`ed `librkllm_sim.so`: queued
//! requests share one run, and every client gets exactly its own reply.

mod common;

use common::{chat, read_sse, run_to_exit, script, sim_cdylib, Daemon};
use serde_json::{json, Value};

/// Four distinct scripted replies, of different lengths, with characters
/// split over several tokens.
const REPLIES: [(&str, &str); 4] = [
    ("ALPHA", "Alpha here: a short café answer."),
    ("BRAVO", "Bravo speaking, with 東京 and a noticeably longer reply than the first client will get from us."),
    ("CHARLIE", "Charlie: naïve 🙂 words in a middle length reply, nothing more."),
    ("DELTA", "Delta replies with its own words, the water is cold and the light is low tonight."),
];
/// A long reply (~90 tokens, ~0.65 s at the pace below) that keeps the NPU
/// busy while the others queue up, also on a loaded machine.
const BLOCKER: (&str, &str) = (
    "BLOCKER",
    "The first request keeps the runtime busy for a while, so that every other request queues up behind it and they all start together in one batched run afterwards, one slot each. It goes on for a second sentence of about the same length, so that a slow machine has the time it needs to send the others.",
);

fn entries() -> Vec<(&'static str, &'static str)> {
    let mut all = REPLIES.to_vec();
    all.push(BLOCKER);
    all
}

/// `--batch 4` on the paced simulator, in-process or through dlopen (with
/// the simulator's tokenizer as a file: batched runs need one); the daemon
/// and the files it reads.
fn daemon(dlopen: bool, keys: &str, extra: &[&str]) -> (Daemon, [tempfile::NamedTempFile; 2]) {
    let file = script(&entries());
    let tokenizer = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokenizer.path(), rkllm_sim::tokenizer_json()).unwrap();
    let spec = format!("sim:qwen2-0.5b?time_scale=0.3&script={}{keys}", file.path().display());
    let lib = sim_cdylib();
    let backend: Vec<&str> = if dlopen {
        vec!["--backend", "rkllm", "--lib", lib.to_str().unwrap(), "--tokenizer", tokenizer.path().to_str().unwrap()]
    } else {
        vec!["--backend", "sim"]
    };
    let args = [&backend[..], &["--model", &spec, "--model-id", "m", "--batch", "4"], extra].concat();
    (Daemon::start(&args), [file, tokenizer])
}

/// The runtime counts a batch's prefill as a whole: without a tokenizer no
/// request's `usage.prompt_tokens` could be a number, so the model does not load.
#[test]
fn batched_runs_without_a_tokenizer_fail_the_start() {
    let lib = sim_cdylib();
    let mut start = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"));
    start.args(["--host", "127.0.0.1", "--port", "0", "--backend", "rkllm", "--lib", lib.to_str().unwrap()]);
    let out = run_to_exit(start.args(["--model", "sim:instant", "--batch", "2"]), std::time::Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("batch = 2 needs the model's tokenizer.json"), "{stderr}");
}

/// What a spawned client needs of the daemon.
#[derive(Clone)]
struct Api {
    url: String,
    client: reqwest::Client,
}

impl Api {
    fn of(d: &Daemon) -> Api {
        Api { url: d.url.clone(), client: d.client() }
    }

    async fn post(&self, body: Value) -> reqwest::Response {
        self.client.post(format!("{}/v1/chat/completions", self.url)).json(&body).send().await.unwrap()
    }

    /// Sends `body` on a task of its own; the response once its head came.
    fn post_later(&self, body: Value) -> tokio::task::JoinHandle<reqwest::Response> {
        let api = self.clone();
        tokio::spawn(async move { api.post(body).await })
    }

    /// Streams `content` on a task of its own.
    fn spawn(&self, content: &str, extra: Value) -> tokio::task::JoinHandle<(String, String, Value)> {
        let (api, content) = (self.clone(), content.to_owned());
        tokio::spawn(async move { streamed(&api, &content, extra).await })
    }
}

/// Reads a stream until its first chunk with generated text.
async fn first_content(response: &mut reqwest::Response) {
    let mut seen = String::new();
    while !seen.contains("\"content\":\"") {
        let chunk = response.chunk().await.unwrap().expect("the stream ended before any text");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

fn stream(content: &str, extra: Value) -> Value {
    let mut body = chat("m", content);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    body
}

/// The streamed text, the finish reason and the final chunk's timings.
async fn streamed(api: &Api, content: &str, extra: Value) -> (String, String, Value) {
    let (events, _) = read_sse(api.post(stream(content, extra)).await).await;
    let chunks: Vec<Value> = events.iter().filter(|e| e.data != "[DONE]").map(|e| e.json()).collect();
    assert!(chunks.iter().all(|c| c.get("error").is_none()), "{chunks:?}");
    let text = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    let finish = chunks.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str()).unwrap_or_default();
    let timings = chunks.iter().rev().find(|c| !c["timings"].is_null()).map(|c| c["timings"].clone());
    // Batched or not, each request's own count (the schema's integer).
    let usage = chunks.iter().find_map(|c| c.get("usage").filter(|u| !u.is_null()));
    let prompt_tokens = usage.and_then(|u| u["prompt_tokens"].as_u64());
    assert!(prompt_tokens.is_some_and(|n| n > 0), "usage.prompt_tokens: {usage:?}");
    (text, finish.to_owned(), timings.unwrap_or(Value::Null))
}

/// Starts the blocker and waits until it generates, so that what follows queues.
async fn occupy(d: &Daemon) -> tokio::task::JoinHandle<(String, String, Value)> {
    let blocker = Api::of(d).spawn(BLOCKER.0, json!({}));
    d.wait_generating().await;
    blocker
}

async fn each_client_gets_its_own_reply(dlopen: bool) {
    let (d, _script) = daemon(dlopen, "", &[]);
    let blocker = occupy(&d).await;
    let api = Api::of(&d);
    let clients: Vec<_> = REPLIES.iter().map(|(key, _)| api.spawn(&format!("{key}, please"), json!({}))).collect();
    d.wait_queue(|_, waiting| waiting == 4).await;
    for ((_, reply), client) in REPLIES.iter().zip(clients) {
        let (text, finish, timings) = client.await.unwrap();
        assert_eq!(text, *reply, "every client receives exactly its own reply");
        assert_eq!(finish, "stop");
        assert_eq!(timings["batch_n"], 4, "the four queued requests shared one run: {timings}");
        assert_eq!(timings["runtime"].get("batch_size").and_then(Value::as_u64).unwrap_or(4), 4, "{timings}");
        assert!(timings["prompt_n"].is_null(), "a batch's prefill count is not one request's: {timings}");
    }
    let (text, _, timings) = blocker.await.unwrap();
    assert_eq!((text.as_str(), &timings["batch_n"]), (BLOCKER.1, &json!(1)), "a lone request starts at once");
}

#[tokio::test]
async fn concurrent_requests_share_a_run_and_each_gets_its_own_reply() {
    each_client_gets_its_own_reply(false).await;
}

#[tokio::test]
async fn through_dlopen_each_client_gets_its_own_reply() {
    each_client_gets_its_own_reply(true).await;
}

#[tokio::test]
async fn each_slot_ends_at_its_own_max_tokens_and_stop_sequence() {
    let (d, _script) = daemon(false, "", &[]);
    let blocker = occupy(&d).await;
    let api = Api::of(&d);
    let limited = api.spawn("BRAVO", json!({"max_tokens": 3}));
    let stopped = api.spawn("DELTA", json!({"stop": ["water"]}));
    let full = api.spawn("CHARLIE", json!({}));
    d.wait_queue(|_, waiting| waiting == 3).await;
    let (text, finish, timings) = limited.await.unwrap();
    assert_eq!((finish.as_str(), &timings["predicted_n"], &timings["batch_n"]), ("length", &json!(3), &json!(3)));
    assert!(REPLIES[1].1.starts_with(&text), "{text}");
    let (text, finish, _) = stopped.await.unwrap();
    assert_eq!((text.as_str(), finish.as_str()), ("Delta replies with its own words, the ", "stop"));
    let (text, finish, _) = full.await.unwrap();
    assert_eq!((text.as_str(), finish.as_str()), (REPLIES[2].1, "stop"), "the others run on");
    blocker.await.unwrap();
}

#[tokio::test]
async fn a_client_leaving_mid_batch_is_dropped_and_the_others_finish() {
    let (d, _script) = daemon(false, "", &[]);
    let blocker = occupy(&d).await;
    let api = Api::of(&d);
    let stays = api.spawn("BRAVO", json!({}));
    // A queued stream's head comes when its run starts (api.md, "Streaming").
    let leaves = api.post_later(stream("DELTA", json!({})));
    d.wait_queue(|_, waiting| waiting == 2).await;
    blocker.await.unwrap();
    let mut leaves = leaves.await.unwrap();
    // The leaving client reads its first token of the shared run, then goes.
    first_content(&mut leaves).await;
    drop(leaves);
    let (text, finish, timings) = stays.await.unwrap();
    assert_eq!((text.as_str(), finish.as_str(), &timings["batch_n"]), (REPLIES[1].1, "stop", &json!(2)));
    d.wait_queue(|running, waiting| running == 0 && waiting == 0).await;
    assert!(d.wait_metric("rkllmd_client_disconnects_total", |n| n == 1.0).await, "the leaving client is recorded");
}

#[tokio::test]
async fn when_every_client_leaves_the_batch_is_aborted() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let (d, _script) = daemon(false, &format!("&record={}", record.path().display()), &[]);
    let blocker = occupy(&d).await;
    let api = Api::of(&d);
    let heads: Vec<_> = ["BRAVO", "DELTA"].into_iter().map(|key| api.post_later(stream(key, json!({})))).collect();
    d.wait_queue(|_, waiting| waiting == 2).await;
    blocker.await.unwrap();
    let mut clients = Vec::new();
    for head in heads {
        clients.push(head.await.unwrap());
    }
    for client in &mut clients {
        first_content(client).await;
    }
    drop(clients);
    d.wait_queue(|running, waiting| running == 0 && waiting == 0).await;
    let (text, _, _) = streamed(&api, "ALPHA", json!({})).await;
    assert_eq!(text, REPLIES[0].1, "serving goes on");
    d.wait_queue(|running, _| running == 0).await;
    let calls: Vec<Value> =
        std::fs::read_to_string(record.path()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ends: Vec<&str> = calls.iter().filter(|c| c["call"] == "run_end").map(|c| c["end"].as_str().unwrap()).collect();
    // The first runs are the probes at load: short batches, which this
    // simulator refuses (`engine/short_batch.rs`), then a batched run's file
    // saved and restored (`engine/batch_files.rs`).
    assert_eq!(ends.len(), 6, "{ends:?}");
    assert_eq!(ends[..3], ["error", "length", "length"], "{ends:?}");
    assert_eq!(ends[4], "abort", "the batch whose clients all left was aborted: {ends:?}");
    assert_eq!(ends[5], "abort", "a lone job's run ends with its reply, not with its fillers': {ends:?}");
    let (_, log) = d.exit();
    assert!(!log.contains("surprise"), "{log}");
}

#[tokio::test]
async fn a_runtime_error_mid_batch_ends_every_slot_with_an_error_event() {
    // A slow prefill (~0.9 s) lets the two requests queue behind a short first one.
    let (d, _script) = daemon(false, "&error_after=4&prefill_extra_ms=3000", &[]);
    let api = Api::of(&d);
    let first = api.spawn("ALPHA", json!({"max_tokens": 2}));
    d.wait_queue(|running, _| running == 1).await;
    let clients: Vec<_> = ["BRAVO", "DELTA"]
        .into_iter()
        .map(|key| {
            let api = api.clone();
            tokio::spawn(async move { read_sse(api.post(stream(key, json!({}))).await).await })
        })
        .collect();
    d.wait_queue(|_, waiting| waiting == 2).await;
    assert_eq!(first.await.unwrap().1, "length");
    for client in clients {
        let (events, _) = client.await.unwrap();
        let n = events.len();
        assert_eq!(events[n - 1].data, "[DONE]");
        assert_eq!(events[n - 2].json()["error"]["type"], "server_error", "{:?}", events[n - 2]);
    }
    assert_eq!(d.get_json("/health/ready").await.0, 200, "still serving");
}

/// A runtime whose batched run puts its figures in another slot than the
/// manual's `result[0]` (the simulator's `batch_perf_last` fault) is counted
/// and logged, not silent; every client still gets its own reply.
#[tokio::test]
async fn a_runtime_contradicting_the_batch_layout_is_counted() {
    let (d, _script) = daemon(false, "&batch_perf_last=1", &[]);
    assert_eq!(d.metric("rkllmd_runtime_surprises_total").await, Some(0.0));
    let blocker = occupy(&d).await;
    let api = Api::of(&d);
    let clients: Vec<_> = REPLIES[..2].iter().map(|(key, _)| api.spawn(&format!("{key}, please"), json!({}))).collect();
    d.wait_queue(|_, waiting| waiting == 2).await;
    for ((_, reply), client) in REPLIES.iter().zip(clients) {
        let (text, finish, timings) = client.await.unwrap();
        assert_eq!((text.as_str(), finish.as_str()), (*reply, "stop"));
        assert_eq!(timings["batch_n"], 2, "{timings}");
    }
    blocker.await.unwrap();
    assert!(d.wait_metric("rkllmd_runtime_surprises_total", |n| n >= 2.0).await, "the blocker's run and the pair's");
}

#[tokio::test]
async fn requests_with_different_sampling_do_not_share_a_run() {
    let (d, _script) = daemon(false, "", &[]);
    let blocker = occupy(&d).await;
    let api = Api::of(&d);
    let a = api.spawn("ALPHA", json!({}));
    let hot = api.spawn("BRAVO", json!({"temperature": 1.5, "top_k": 40}));
    let c = api.spawn("CHARLIE", json!({}));
    d.wait_queue(|_, waiting| waiting == 3).await;
    blocker.await.unwrap();
    let batch_n = |t: &Value| t["batch_n"].as_u64().unwrap();
    let (a, hot, c) = (a.await.unwrap(), hot.await.unwrap(), c.await.unwrap());
    assert_eq!((batch_n(&a.2), batch_n(&hot.2), batch_n(&c.2)), (2, 1, 2), "{a:?} {hot:?} {c:?}");
    assert_eq!(a.0, REPLIES[0].1);
}

#[tokio::test]
async fn batch_one_is_todays_path_and_batch_is_checked() {
    let file = script(&entries());
    let spec = format!("sim:instant?script={}", file.path().display());
    let d = Daemon::start(&["--backend", "sim", "--model", &spec, "--model-id", "m"]);
    let (text, _, timings) = streamed(&Api::of(&d), "ALPHA", json!({})).await;
    assert_eq!(text, REPLIES[0].1);
    assert_eq!((&timings["batch_n"], &timings["runtime"]["batch_size"]), (&json!(1), &json!(1)));
    assert!(timings["prompt_n"].as_i64().unwrap() > 0, "one request's prefill count: {timings}");
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd")).args(["--batch", "9", "--print-config"]).output();
    let out = out.unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("batch must be `auto` or a number from 1 to 8, got `9`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Clients that send their next request as soon as their reply ends.
async fn closed_loop(api: &Api, rounds: usize) -> Vec<Vec<Value>> {
    let clients: Vec<_> = REPLIES
        .iter()
        .map(|(key, _)| {
            let (api, key) = (api.clone(), key.to_string());
            tokio::spawn(async move {
                let mut timings = Vec::new();
                for round in 0..rounds {
                    let (_, finish, t) = streamed(&api, &format!("{key}, round {round}"), json!({})).await;
                    assert_eq!(finish, "stop");
                    timings.push(t);
                }
                timings
            })
        })
        .collect();
    let mut all = Vec::new();
    for client in clients {
        all.push(client.await.unwrap());
    }
    all
}

#[tokio::test]
async fn closed_loop_clients_gather_into_full_batches() {
    closed_loop_gathers(false).await;
}

#[tokio::test]
async fn through_dlopen_closed_loop_clients_gather_into_full_batches() {
    closed_loop_gathers(true).await;
}

async fn closed_loop_gathers(dlopen: bool) {
    let (d, _script) = daemon(dlopen, "", &["--batch-gather-ms", "200"]);
    let rounds = 4;
    let timings = closed_loop(&Api::of(&d), rounds).await;
    // The first request starts alone, at once, and the others queue behind
    // it; after a run the next one waits for the clients whose replies just
    // ended, so from then on all four share every run — but for the end,
    // where the client that started alone is one request ahead of the rest.
    let batch_n: Vec<Vec<u64>> =
        timings.iter().map(|t| t.iter().map(|t| t["batch_n"].as_u64().unwrap_or(0)).collect()).collect();
    for (client, n) in batch_n.iter().enumerate() {
        assert_eq!(n[1..rounds - 1], [4, 4], "client {client}: the middle rounds ran in full batches: {batch_n:?}");
    }
}

#[tokio::test]
async fn a_lone_client_never_waits_for_a_batch_to_gather() {
    let (d, _script) = daemon(false, "", &["--batch-gather-ms", "1000"]);
    // The first on an idle daemon; the next ones right after a run, by the
    // only client there is (expected alone: nobody else to wait for).
    for key in ["ALPHA", "CHARLIE", "ALPHA"] {
        let (_, finish, timings) = streamed(&Api::of(&d), key, json!({})).await;
        assert_eq!((finish.as_str(), &timings["batch_n"]), ("stop", &json!(1)));
        let queue_ms = timings["queue_ms"].as_f64().unwrap();
        assert!(queue_ms < 500.0, "a lone request starts at once, not after the 1 s gathering time: {timings}");
    }
}

#[tokio::test]
async fn a_client_back_before_its_run_ended_is_not_expected_twice() {
    let (d, _script) = daemon(false, "", &["--batch-gather-ms", "1000"]);
    let api = Api::of(&d);
    let blocker = occupy(&d).await;
    // Both queue behind the blocker and share the next run, where ALPHA's
    // reply ends long before BLOCKER's and its client sends again at once.
    let short = {
        let api = api.clone();
        tokio::spawn(
            async move { (streamed(&api, "ALPHA", json!({})).await, streamed(&api, "ALPHA", json!({})).await) },
        )
    };
    d.wait_queue(|_, waiting| waiting == 1).await;
    let long = api.spawn(BLOCKER.0, json!({}));
    d.wait_queue(|_, waiting| waiting == 2).await;
    blocker.await.unwrap();
    let (_, _, shared) = long.await.unwrap();
    assert_eq!(shared["batch_n"], json!(2), "{shared}");
    // The run had two clients, and one of them is already back: the next
    // run starts when the other is, not after the 1 s gathering time
    // spent waiting for a third.
    let (_, _, again) = streamed(&api, BLOCKER.0, json!({})).await;
    let ((_, _, first), (_, _, back)) = short.await.unwrap();
    assert_eq!((&first["batch_n"], &back["batch_n"], &again["batch_n"]), (&json!(2), &json!(2), &json!(2)));
    let queue_ms = again["queue_ms"].as_f64().unwrap();
    assert!(queue_ms < 500.0, "the second client's request waited for a client that was not coming: {again}");
}

#[tokio::test]
async fn a_runtime_whose_abort_does_not_end_a_batch_is_reported() {
    // A lone job's run is aborted when its reply ends early (here at a stop
    // sequence), which is what ends its filler slots' decoding; this runtime
    // ignores the abort.
    let (d, _script) = daemon(false, "&batch_abort_ignored=1", &[]);
    let (text, finish, _) = streamed(&Api::of(&d), "BRAVO", json!({"stop": ["with"]})).await;
    assert_eq!((text.as_str(), finish.as_str()), ("Bravo speaking, ", "stop"));
    // The run that reports it holds the NPU turn until it has: once the next
    // request is answered, it has. The ERROR is what the operator has (no
    // metric counts it), read after the exit.
    let (text, _, _) = streamed(&Api::of(&d), "ALPHA", json!({})).await;
    assert_eq!(text, REPLIES[0].1);
    let (_, log) = d.exit();
    assert!(log.contains("steps after rkllm_abort"), "the fillers decoding on is reported: {log}");
    assert!(log.contains("contradicts rkllmd's reading of the manual"), "{log}");
}
