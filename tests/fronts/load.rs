//! Clients through a front end: streamed chat requests in loops and a
//! non-stream probe, each request's outcome as the client saw it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// How one request went.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub sent: Instant,
    /// When the head came, its status and which board sent it.
    pub head: Option<(Instant, u16, String)>,
    /// When the first token's text came.
    pub first_token: Option<Instant>,
    /// `Ok` with the reply whole (`[DONE]` for a stream); `Err`: what the
    /// client saw instead.
    pub end: Result<(), String>,
    /// Whether any of the reply (a `data:` event, or a body) arrived.
    pub replied: bool,
    /// The reply's `timings` (the last chunk's, for a stream).
    pub timings: serde_json::Value,
    pub stream: bool,
}

impl Outcome {
    pub fn board(&self) -> Option<&str> {
        self.head.as_ref().map(|h| h.2.as_str())
    }

    /// The client's time to the first token, ms.
    pub fn ttft_ms(&self) -> Option<f64> {
        Some(self.first_token?.duration_since(self.sent).as_secs_f64() * 1000.0)
    }
}

fn chat(stream: bool) -> serde_json::Value {
    serde_json::json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "Hello"}]})
}

/// One chat request through `url`, streamed or not.
pub async fn request_once(client: &reqwest::Client, url: &str, stream: bool) -> Outcome {
    let sent = Instant::now();
    let mut out = Outcome {
        sent,
        head: None,
        first_token: None,
        end: Ok(()),
        replied: false,
        timings: serde_json::Value::Null,
        stream,
    };
    let mut r = match client.post(format!("{url}/v1/chat/completions")).json(&chat(stream)).send().await {
        Ok(r) => r,
        Err(e) => {
            out.end = Err(format!("no response: {e}"));
            return out;
        }
    };
    let instance = r.headers().get("x-rkllmd-instance").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let status = r.status().as_u16();
    out.head = Some((Instant::now(), status, instance));
    if status != 200 {
        out.end = Err(format!("status {status}: {}", r.text().await.unwrap_or_default()));
        return out;
    }
    if !stream {
        match r.json::<serde_json::Value>().await {
            Ok(body) => {
                out.first_token = out.head.as_ref().map(|h| h.0);
                out.replied = true;
                out.timings = body["timings"].clone();
            }
            Err(e) => out.end = Err(format!("body: {e:?}")),
        }
        return out;
    }
    // SSE events, read line by line as they arrive.
    let (mut pending, mut done, mut error) = (String::new(), false, None);
    out.end = loop {
        match r.chunk().await {
            Ok(Some(bytes)) => {
                pending.push_str(&String::from_utf8_lossy(&bytes));
                while let Some(at) = pending.find('\n') {
                    let line: String = pending.drain(..=at).collect();
                    let Some(data) = line.trim_end().strip_prefix("data: ") else { continue };
                    out.replied = true;
                    if data == "[DONE]" {
                        done = true;
                        continue;
                    }
                    let event: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
                    if !event["error"].is_null() {
                        error = Some(data.to_owned());
                    }
                    let text = event["choices"][0]["delta"]["content"].as_str().unwrap_or("");
                    if !text.is_empty() && out.first_token.is_none() {
                        out.first_token = Some(Instant::now());
                    }
                    if !event["timings"].is_null() {
                        out.timings = event["timings"].clone();
                    }
                }
            }
            Ok(None) => match error {
                Some(e) => break Err(format!("error event: {e}")),
                None if done => break Ok(()),
                None => break Err(format!("ended without [DONE]: {pending}")),
            },
            Err(e) => break Err(format!("transport error: {e:?}")),
        }
    };
    out
}

/// `streams` clients sending streamed requests in a loop, and one probe
/// sending non-stream ones, through `url` until `stop` is set.
pub fn clients(url: &str, streams: usize, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<Vec<Outcome>>> {
    (0..=streams)
        .map(|i| {
            let (url, stop) = (url.to_owned(), stop.clone());
            let stream = i < streams;
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut done = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    done.push(request_once(&client, &url, stream).await);
                }
                done
            })
        })
        .collect()
}

/// The `p`-th percentile (0–100) of `values`, nearest rank; NaN when empty.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}
