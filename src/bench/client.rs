//! One streamed chat completion, observed: every SSE event stamped with a
//! monotonic clock on arrival, nothing judged yet (see `measure`, `wire`,
//! `crosscheck`).

use super::sse::SseParser;
use crate::error_text::chain;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where and how requests are sent.
pub struct Target {
    pub http: reqwest::Client,
    pub base: String,
    pub api_key: Option<String>,
    pub model: String,
    pub timeout: Duration,
    pub ignore_eos: bool,
}

impl Target {
    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.auth(self.http.get(format!("{}{path}", self.base)))
    }

    fn auth(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(key) => r.bearer_auth(key),
            None => r,
        }
    }
}

/// What one request asks.
#[derive(Debug)]
pub struct Prompt {
    pub messages: Value,
    pub max_tokens: u32,
}

/// The fields of one JSON chunk that the checks read.
#[derive(Debug, Default)]
pub struct Chunk {
    pub id: Option<String>,
    pub created: Option<i64>,
    pub object: Option<String>,
    pub role: Option<String>,
    /// The delta has `content` (even empty), `reasoning_content` or `tool_calls`.
    pub carries_token: bool,
    /// The delta's reasoning and content: the reply as generated.
    pub text: String,
    /// Its content only: what a client resends of the reply (the openai
    /// SDK drops `reasoning_content`).
    pub content: String,
    pub finish_reason: Option<String>,
    pub usage: Option<Value>,
    /// llama.cpp-style `timings`, or Ollama's `*_duration`/`*_count` fields gathered into one object.
    pub timings: Option<Value>,
}

#[derive(Debug)]
pub enum Event {
    /// Boxed: a chunk is far larger than the other variants, and a stream holds thousands of events.
    Chunk(Box<Chunk>),
    Done,
    /// `{"error": …}` sent after the stream started.
    Error(Value),
    NotJson(String),
}

/// Milliseconds after the request was sent.
#[derive(Debug)]
pub struct Stamped {
    pub at_ms: f64,
    pub event: Event,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Failure {
    pub kind: String,
    pub message: String,
}

#[derive(Debug)]
pub struct RequestRecord {
    pub prompt: Arc<Prompt>,
    pub status: Option<u16>,
    pub content_type: Option<String>,
    pub events: Vec<Stamped>,
    pub comments: usize,
    /// Bytes left at the end that never formed a complete event.
    pub unterminated: Option<String>,
    pub failure: Option<Failure>,
    /// When the body ended (or the request failed).
    pub end_ms: f64,
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

pub async fn run_one(target: &Target, prompt: Arc<Prompt>) -> RequestRecord {
    let start = Instant::now();
    let mut record = RequestRecord {
        prompt: prompt.clone(),
        status: None,
        content_type: None,
        events: Vec::new(),
        comments: 0,
        unterminated: None,
        failure: None,
        end_ms: 0.0,
    };
    let outcome = tokio::time::timeout(target.timeout, stream(target, &prompt, start, &mut record)).await;
    record.failure = match outcome {
        Err(_) => Some(fail("timeout", format!("no end of stream after {:?}", target.timeout))),
        Ok(result) => result.err(),
    };
    record.end_ms = ms_since(start);
    record
}

fn fail(kind: &str, message: impl Into<String>) -> Failure {
    Failure { kind: kind.into(), message: message.into() }
}

async fn stream(target: &Target, prompt: &Prompt, start: Instant, record: &mut RequestRecord) -> Result<(), Failure> {
    let mut body = json!({
        "model": target.model,
        "messages": prompt.messages,
        "max_tokens": prompt.max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if target.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    let request = target.auth(target.http.post(format!("{}/v1/chat/completions", target.base))).json(&body);
    let mut response = request.send().await.map_err(|e| fail("connect", chain(&e)))?;
    let status = response.status().as_u16();
    record.status = Some(status);
    record.content_type =
        response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    if status != 200 {
        let text = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text.chars().take(200).collect());
        return Err(fail(&format!("http_{status}"), message));
    }
    let mut parser = SseParser::default();
    let mut stream_error = None;
    loop {
        let bytes = match response.chunk().await {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(e) => return Err(fail("read", chain(&e))),
        };
        let at_ms = ms_since(start);
        let parsed = parser.feed(&bytes);
        record.comments += parsed.comments;
        for data in parsed.events {
            let event = classify(&data);
            if let Event::Error(e) = &event {
                stream_error.get_or_insert_with(|| fail("stream_error", e.to_string()));
            }
            record.events.push(Stamped { at_ms, event });
        }
    }
    record.unterminated = parser.finish();
    stream_error.map_or(Ok(()), Err)
}

const OLLAMA_FIELDS: [&str; 6] =
    ["total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"];

fn classify(data: &str) -> Event {
    if data.trim() == "[DONE]" {
        return Event::Done;
    }
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        return Event::NotJson(data.chars().take(200).collect());
    };
    if v.get("error").is_some_and(|e| !e.is_null()) {
        return Event::Error(v["error"].clone());
    }
    let delta = &v["choices"][0]["delta"];
    let present = |key: &str| delta.get(key).is_some_and(|x| !x.is_null());
    let ollama: serde_json::Map<String, Value> =
        OLLAMA_FIELDS.iter().filter_map(|k| v.get(*k).map(|x| (k.to_string(), x.clone()))).collect();
    let timings = match v.get("timings") {
        Some(t) if !t.is_null() => Some(t.clone()),
        _ => (!ollama.is_empty()).then_some(Value::Object(ollama)),
    };
    Event::Chunk(Box::new(Chunk {
        id: v["id"].as_str().map(str::to_owned),
        created: v["created"].as_i64(),
        object: v["object"].as_str().map(str::to_owned),
        role: delta["role"].as_str().map(str::to_owned),
        carries_token: present("content") || present("reasoning_content") || present("tool_calls"),
        text: [&delta["reasoning_content"], &delta["content"]].iter().filter_map(|x| x.as_str()).collect(),
        content: delta["content"].as_str().unwrap_or_default().to_owned(),
        finish_reason: v["choices"][0]["finish_reason"].as_str().map(str::to_owned),
        usage: v.get("usage").filter(|u| !u.is_null()).cloned(),
        timings,
    }))
}
