//! Keep-alives during a long prefill, time-outs, CORS.

mod common;
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn a_long_prefill_gets_keep_alive_comments_before_the_first_token() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant?prefill_extra_ms=2500&reply_tokens=2",
        "--model-id",
        "m",
        "--keepalive-secs",
        "1",
    ]);
    let mut body = chat("m", "slow prefill");
    body["stream"] = json!(true);
    let mut r = d.post("/v1/chat/completions", body).await;
    let mut raw = String::new();
    while let Some(bytes) = r.chunk().await.unwrap() {
        raw.push_str(std::str::from_utf8(&bytes).unwrap());
    }
    let first_data = raw.find("data: ").unwrap();
    assert!(raw[..first_data].contains(": keep-alive\n\n"), "no keep-alive before the first token: {raw:?}");
    assert!(raw.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn first_token_time_out_aborts_and_reports_504_then_serving_goes_on() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant?prefill_extra_ms=2000&reply_tokens=3",
        "--model-id",
        "m",
        "--first-token-timeout-secs",
        "1",
        "--first-token-timeout-ms-per-kib",
        "0",
    ]);
    let r = d.post("/v1/chat/completions", chat("m", "too slow")).await;
    assert_eq!(r.status(), 504);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "timeout");
    assert!(b["error"]["message"].as_str().unwrap().contains("first token"));
    let mut body = chat("m", "too slow");
    body["stream"] = json!(true);
    let (events, _) = read_sse(d.post("/v1/chat/completions", body).await).await;
    assert_eq!(events[events.len() - 2].json()["error"]["code"], "timeout");
    assert_eq!(events.last().unwrap().data, "[DONE]");
    assert_eq!(d.get_json("/health/ready").await.0, 200);
}

#[tokio::test]
async fn cors_is_off_by_default_and_allows_configured_origins() {
    let preflight = |d: &Daemon, origin: &str| {
        d.client()
            .request(reqwest::Method::OPTIONS, format!("{}/v1/chat/completions", d.url))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type,authorization")
            .send()
    };
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant"]);
    let r = preflight(&d, "http://webui.local").await.unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    drop(d);
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--cors-origins", "http://webui.local"]);
    let r = preflight(&d, "http://webui.local").await.unwrap();
    assert_eq!(r.headers()["access-control-allow-origin"], "http://webui.local");
    let r = preflight(&d, "http://evil.local").await.unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
}
