//! Every generation front end says the same of how it served a request, in
//! the same headers, streamed or not (`api/finish.rs`): how the prompt was
//! made (`x-rkllmd-template-mode`), the request fields not applied
//! (`x-rkllmd-ignored-params`: on ABI 1.2 the sampling fields), a token
//! limit served as a ceiling (`x-rkllmd-max-tokens-clamped`), and the
//! board (`x-rkllmd-instance`).

mod common;
use common::*;
use serde_json::{json, Value};

/// Each front end's request for a short reply with `temperature` and a
/// token limit above the server's (`ASKED`).
const ASKED: u32 = 100_000;

fn requests(stream: bool) -> Vec<(&'static str, Value)> {
    let messages = json!([{"role": "user", "content": "hi"}]);
    vec![
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": messages, "temperature": 0.2, "max_tokens": ASKED, "stream": stream}),
        ),
        (
            "/v1/completions",
            json!({"model": "m", "prompt": "hi", "temperature": 0.2, "max_tokens": ASKED, "stream": stream}),
        ),
        (
            "/v1/responses",
            json!({"model": "m", "input": "hi", "temperature": 0.2, "max_output_tokens": ASKED, "stream": stream}),
        ),
        (
            "/v1/messages",
            json!({"model": "m", "messages": messages, "temperature": 0.2, "max_tokens": ASKED, "stream": stream}),
        ),
        (
            "/api/chat",
            json!({"model": "m", "messages": messages, "options": {"temperature": 0.2, "num_predict": ASKED}, "stream": stream}),
        ),
        (
            "/api/generate",
            json!({"model": "m", "prompt": "hi", "options": {"temperature": 0.2, "num_predict": ASKED}, "stream": stream}),
        ),
    ]
}

#[tokio::test]
async fn every_generation_front_end_sends_the_same_headers_streamed_or_not() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--runtime-abi",
        "1.2",
        "--model",
        "sim:instant?reply_tokens=3",
        "--model-id",
        "m",
        "--max-new-tokens",
        "8",
    ]);
    let mut modes = Vec::new();
    for stream in [false, true] {
        for (path, body) in requests(stream) {
            let r = d.post(path, body).await;
            let at = format!("{path} stream={stream}");
            assert_eq!(r.status(), 200, "{at}");
            let h = r.headers().clone();
            let header = |name: &str| h.get(name).map(|v| v.to_str().unwrap().to_owned());
            modes.push(header("x-rkllmd-template-mode").unwrap_or_else(|| panic!("{at}: no template mode")));
            let ignored = header("x-rkllmd-ignored-params").unwrap_or_else(|| panic!("{at}: no ignored params"));
            assert!(ignored.split(',').any(|p| p == "temperature"), "{at}: {ignored}");
            assert_eq!(header("x-rkllmd-max-tokens-clamped").as_deref(), Some("100000->8"), "{at}");
            assert!(header("x-rkllmd-instance").is_some_and(|i| !i.is_empty()), "{at}");
            // The reply itself is whole.
            assert!(!r.bytes().await.unwrap().is_empty(), "{at}");
        }
    }
    assert!(modes.iter().all(|m| *m == modes[0]), "one model, one template mode: {modes:?}");
}
