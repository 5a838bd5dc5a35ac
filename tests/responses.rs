//! Both response shapes field by field, streaming rules, timings invariants.

mod common;
use common::*;
use serde_json::{json, Value};

const FAST: &str = "sim:qwen2.5-1.5b?time_scale=0.02&reply_tokens=8";

fn assert_timings_invariants(t: &Value, usage: &Value) {
    let f = |k: &str| t[k].as_f64();
    let n = t["predicted_n"].as_u64().unwrap();
    assert_eq!(n, usage["completion_tokens"].as_u64().unwrap(), "predicted_n = completion_tokens");
    assert_eq!(Some(n), t["runtime"]["generate_tokens"].as_u64(), "= runtime.generate_tokens");
    let (queue, prompt, ttft, e2e) =
        (f("queue_ms").unwrap(), f("prompt_ms").unwrap(), f("ttft_ms").unwrap(), f("e2e_ms").unwrap());
    assert!(close(queue + prompt, ttft, 0.01), "queue + prefill = ttft: {t}");
    assert!(ttft <= e2e, "{t}");
    for k in [
        "queue_ms",
        "prompt_ms",
        "ttft_ms",
        "e2e_ms",
        "predicted_ms",
        "predicted_per_token_ms",
        "predicted_per_second",
        "prompt_per_second",
    ] {
        if let Some(x) = f(k) {
            assert!(x >= 0.0 && x.is_finite(), "{k} = {x}");
        }
    }
    if n > 1 {
        assert!(f("predicted_ms").unwrap() <= e2e);
    } else {
        assert!(t["predicted_per_second"].is_null() && t["predicted_ms"].is_null());
    }
    assert!(prompt >= t["runtime"]["prefill_time_ms"].as_f64().unwrap() - 0.5, "our prefill ≥ the runtime's: {t}");
    assert_eq!(t["prompt_n"], usage["prompt_tokens"]);
}

#[tokio::test]
async fn non_stream_chat_completion_field_by_field() {
    let d = Daemon::start(&["--backend", "sim", "--model", FAST, "--model-id", "m"]);
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let r = d.post("/v1/chat/completions", chat("m", "Hello there")).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let b: Value = r.json().await.unwrap();
    assert!(b["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(b["object"], "chat.completion");
    let created = b["created"].as_u64().unwrap();
    assert!(created >= before && created <= before + 5);
    assert_eq!(b["model"], "m");
    assert!(b["system_fingerprint"].as_str().unwrap().contains("sim"));
    let choice = &b["choices"][0];
    assert_eq!(b["choices"].as_array().unwrap().len(), 1);
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    assert!(!choice["message"]["content"].as_str().unwrap().is_empty());
    assert_eq!(choice["finish_reason"], "stop");
    assert!(choice["logprobs"].is_null() && choice.as_object().unwrap().contains_key("logprobs"));
    let u = &b["usage"];
    assert_eq!(u["completion_tokens"], 8);
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(u["total_tokens"].as_u64(), Some(u["prompt_tokens"].as_u64().unwrap() + 8));
    assert_timings_invariants(&b["timings"], u);
}

#[tokio::test]
async fn stream_follows_the_wire_rules_and_matches_non_stream_text() {
    let d = Daemon::start(&["--backend", "sim", "--model", FAST, "--model-id", "m"]);
    let plain: Value = d.post("/v1/chat/completions", chat("m", "Tell me a story")).await.json().await.unwrap();
    let mut body = chat("m", "Tell me a story");
    body["stream"] = json!(true);
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "text/event-stream");
    assert_eq!(h["cache-control"], "no-cache");
    assert_eq!(h["x-accel-buffering"], "no");
    let (events, _) = read_sse(r).await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(SseEvent::json).collect();
    let (id, created) = (&chunks[0]["id"], &chunks[0]["created"]);
    for c in &chunks {
        assert_eq!((&c["id"], &c["created"]), (id, created), "one id and created per stream");
        assert_eq!(c["object"], "chat.completion.chunk");
    }
    // The role rides on the first token's chunk; then one chunk per token.
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: Vec<&Value> = chunks.iter().filter(|c| !c["choices"][0]["delta"]["content"].is_null()).collect();
    assert_eq!(content.len(), 8, "one chunk per runtime token");
    assert!(chunks[1..].iter().all(|c| c["choices"][0]["delta"].get("role").is_none()));
    let text: String = content.iter().map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
    assert_eq!(text, plain["choices"][0]["message"]["content"].as_str().unwrap());
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["delta"], json!({}));
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_timings_invariants(&last["timings"], &last["usage"]);
}

#[tokio::test]
async fn include_usage_adds_a_usage_only_chunk_last() {
    let d = Daemon::start(&["--backend", "sim", "--model", FAST, "--model-id", "m"]);
    let mut body = chat("m", "Hi");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (events, _) = read_sse(d.post("/v1/chat/completions", body).await).await;
    let n = events.len();
    assert_eq!(events[n - 1].data, "[DONE]");
    let usage = events[n - 2].json();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 8);
    assert_timings_invariants(&usage["timings"], &usage["usage"]);
    let finish = events[n - 3].json();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert!(finish.get("usage").is_none());
}

#[tokio::test]
async fn tokens_are_streamed_as_generated_at_the_sims_pacing() {
    // qwen2.5-1.5b decodes at 16.7 tok/s: 60 ms per token at time_scale 1.
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:qwen2.5-1.5b?time_scale=1&reply_tokens=12",
        "--model-id",
        "m",
    ]);
    let mut body = chat("m", "Pace me");
    body["stream"] = json!(true);
    let (events, _) = read_sse(d.post("/v1/chat/completions", body).await).await;
    let content: Vec<&SseEvent> =
        events.iter().filter(|e| e.data != "[DONE]" && !e.json()["choices"][0]["delta"]["content"].is_null()).collect();
    assert_eq!(content.len(), 12);
    let mut gaps: Vec<f64> = content.windows(2).map(|w| (w[1].at - w[0].at).as_secs_f64() * 1000.0).collect();
    gaps.sort_by(f64::total_cmp);
    let median = gaps[gaps.len() / 2];
    let decode_ms = 1000.0 / 16.7;
    assert!(
        close(median, decode_ms, decode_ms * 0.5),
        "median gap {median:.1} ms vs pacing {decode_ms:.1} ms; gaps {gaps:?}"
    );
    let spread = (content[11].at - content[0].at).as_secs_f64() * 1000.0;
    assert!(
        spread > 11.0 * decode_ms * 0.7,
        "the first chunk arrived long before the last ({spread:.0} ms): real streaming"
    );
    let t = events[events.len() - 2].json()["timings"].clone();
    let tpot = t["predicted_per_token_ms"].as_f64().unwrap();
    assert!(close(tpot, decode_ms, decode_ms * 0.25), "reported TPOT {tpot} vs pacing {decode_ms}");
    let tps = t["predicted_per_second"].as_f64().unwrap();
    assert!(close(tps, 16.7, 16.7 * 0.25), "reported decode rate {tps} tok/s");
}

#[tokio::test]
async fn max_tokens_gives_length_and_completions_endpoint_works() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant?reply_tokens=40", "--model-id", "m"]);
    let mut body = chat("m", "Long please");
    body["max_tokens"] = json!(3);
    let b: Value = d.post("/v1/chat/completions", body).await.json().await.unwrap();
    assert_eq!(b["choices"][0]["finish_reason"], "length");
    assert_eq!(b["usage"]["completion_tokens"], 3);

    let b: Value = d.post("/v1/completions", json!({"model": "m", "prompt": "Once upon"})).await.json().await.unwrap();
    assert!(b["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(b["object"], "text_completion");
    assert!(b["choices"][0]["text"].is_string());
    assert_eq!(b["usage"]["completion_tokens"], 16, "legacy max_tokens defaults to 16");
    assert_eq!(b["choices"][0]["finish_reason"], "length");

    let (events, _) = read_sse(
        d.post("/v1/completions", json!({"model": "m", "prompt": ["Once"], "max_tokens": 4, "stream": true})).await,
    )
    .await;
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(SseEvent::json).collect();
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    assert_eq!(chunks.iter().filter(|c| c["choices"][0]["finish_reason"].is_null()).count(), 4, "one chunk per token");
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 4);
}

#[tokio::test]
async fn stop_sequence_split_across_tokens_trims_and_finishes_with_stop() {
    let script = script(&[("weather", "It is sunny today. END of report, more text follows")]);
    let spec = format!("sim:instant?script={}", script.path().display());
    let d = Daemon::start(&["--backend", "sim", "--model", &spec, "--model-id", "m"]);
    for stream in [false, true] {
        let mut body = chat("m", "How is the weather?");
        body["stop"] = json!("END");
        body["stream"] = json!(stream);
        let r = d.post("/v1/chat/completions", body).await;
        let (text, finish) = if stream {
            let (events, _) = read_sse(r).await;
            let chunks: Vec<Value> = events[..events.len() - 1].iter().map(SseEvent::json).collect();
            let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
            (text, chunks.last().unwrap()["choices"][0]["finish_reason"].clone())
        } else {
            let b: Value = r.json().await.unwrap();
            (
                b["choices"][0]["message"]["content"].as_str().unwrap().to_owned(),
                b["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!(text, "It is sunny today. ", "stream={stream}");
        assert_eq!(finish, "stop");
    }
}

#[tokio::test]
async fn models_health_and_openapi() {
    let d = Daemon::start(&["--backend", "sim", "--model", FAST]);
    let (s, m) = d.get_json("/v1/models").await;
    assert_eq!(s, 200);
    assert_eq!(m["object"], "list");
    let card = &m["data"][0];
    assert_eq!(card["id"], "sim-qwen2.5-1.5b");
    assert_eq!(card["object"], "model");
    assert!(card["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(card["owned_by"], "rkllmd");
    assert_eq!(card["state"], "loaded", "the one-model case is loaded at start");
    assert!(card["loaded_since"].as_u64().unwrap() >= card["created"].as_u64().unwrap());
    assert_eq!(card["expires_at"], json!(null), "one model stays loaded");
    let (s, one) = d.get_json("/v1/models/sim-qwen2.5-1.5b").await;
    assert_eq!((s, &one["id"]), (200, &card["id"]));
    let (s, e) = d.get_json("/v1/models/nope").await;
    assert_eq!((s, &e["error"]["code"]), (404, &json!("model_not_found")));

    let (s, h) = d.get_json("/health").await;
    assert_eq!(s, 200);
    assert_eq!((&h["status"], &h["backend"]), (&json!("ok"), &json!("sim")));
    assert_eq!(h["runtime"]["abi"], "1.3");
    assert_eq!(h["queue"]["capacity"], 16);
    let (s, r) = d.get_json("/health/ready").await;
    assert_eq!((s, &r["status"]), (200, &json!("ready")));

    let (s, doc) = d.get_json("/openapi.json").await;
    assert_eq!(s, 200);
    for path in ["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/{id}", "/health", "/health/ready"]
    {
        assert!(doc["paths"].get(path).is_some(), "{path} missing from the OpenAPI document");
    }
    // usage.prompt_tokens is documented as what it reports: the tokenizer's count, else the runtime's.
    let prompt_tokens = doc["components"]["schemas"]["Usage"]["properties"]["prompt_tokens"]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(prompt_tokens.contains("tokenizer") && prompt_tokens.contains("prefill"), "{prompt_tokens:?}");
    let ui = d.client().get(format!("{}/docs/", d.url)).send().await.unwrap();
    assert_eq!(ui.status(), 200);
    assert!(ui.text().await.unwrap().contains("swagger-ui-bundle.js"));
    let js = d.client().get(format!("{}/docs/swagger-ui-bundle.js", d.url)).send().await.unwrap();
    assert_eq!(js.status(), 200);
    assert_eq!(js.headers()["content-encoding"], "gzip");
    let bytes = js.bytes().await.unwrap();
    assert!(bytes.len() > 100_000 && bytes.starts_with(&[0x1f, 0x8b]), "a gzip stream");
}

/// Swagger UI's files are read from a folder (`docs_dir`), not built into
/// the binary: a folder that does not hold them gets a page saying so, and
/// the document is served all the same.
#[tokio::test]
async fn docs_are_served_from_the_configured_folder_or_said_missing() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--docs-dir", dir.path().to_str().unwrap()]);
    let ui = d.client().get(format!("{}/docs/", d.url)).send().await.unwrap();
    assert_eq!(ui.status(), 404);
    let page = ui.text().await.unwrap();
    assert!(page.contains("docs_dir") && page.contains("/openapi.json"), "{page}");
    assert_eq!(d.get_json("/openapi.json").await.0, 200);
    drop(d);
    // The same folder once it holds the files (a copy: the path is the configured one, not the source tree).
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/swagger-ui");
    for file in ["swagger-ui-bundle.js.gz", "swagger-ui.css.gz"] {
        std::fs::copy(source.join(file), dir.path().join(file)).unwrap();
    }
    std::fs::write(dir.path().join("swagger-ui.css.gz"), b"\x1f\x8bcopied").unwrap();
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--docs-dir", dir.path().to_str().unwrap()]);
    let css = d.client().get(format!("{}/docs/swagger-ui.css", d.url)).send().await.unwrap();
    assert_eq!((css.status().as_u16(), css.headers()["content-type"].to_str().unwrap()), (200, "text/css"));
    assert_eq!(&css.bytes().await.unwrap()[..], b"\x1f\x8bcopied", "the configured folder's file");
}
