//! A request's client-side figures, by the definitions in docs/timings.md
//! (vLLM bench's and AIPerf's):
//! TTFT = first chunk carrying a token − request start;
//! E2E = last chunk carrying a token − request start;
//! TPOT = (E2E − TTFT) / (completion_tokens − 1), completion_tokens from `usage`;
//! ITL = each gap between consecutive chunks carrying a token.

use super::client::{Chunk, Event, RequestRecord};
use serde_json::Value;

pub const DEFINITIONS: [(&str, &str); 6] = [
    ("ttft_ms", "first chunk carrying a token (delta.content, even empty, with or without the role) − request sent"),
    ("e2e_ms", "last chunk carrying a token − request sent"),
    ("tpot_ms", "(E2E − TTFT) / (usage.completion_tokens − 1); null when completion_tokens ≤ 1"),
    ("itl_ms", "every gap between consecutive chunks carrying a token, pooled over requests"),
    ("request_throughput", "successful requests / wall time of the level (its start → last stream ended)"),
    ("output_throughput", "Σ usage.completion_tokens / the same wall time"),
];

#[derive(Debug, Default)]
pub struct Figures {
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub itl_ms: Vec<f64>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Chunks that carried a token (after dropping a token-less role chunk).
    pub token_chunks: usize,
    /// The role chunk arrived on its own, before any token: it starts no clock.
    pub role_chunk_tokenless: bool,
    pub text: String,
    /// The reply's content, without its reasoning: what the next turn resends.
    pub content: String,
    pub usage: Option<Value>,
    pub timings: Option<Value>,
}

pub fn chunks(record: &RequestRecord) -> impl Iterator<Item = (f64, &Chunk)> {
    record.events.iter().filter_map(|s| match &s.event {
        Event::Chunk(c) => Some((s.at_ms, &**c)),
        _ => None,
    })
}

pub fn figures(record: &RequestRecord) -> Figures {
    let usage = chunks(record).filter_map(|(_, c)| c.usage.clone()).last();
    let timings = chunks(record).filter_map(|(_, c)| c.timings.clone()).last();
    let count = |key: &str| usage.as_ref().and_then(|u| u[key].as_u64());
    let completion_tokens = count("completion_tokens");
    let mut tokens: Vec<(f64, &Chunk)> = chunks(record).filter(|(_, c)| c.carries_token).collect();
    // A role chunk without a token: either it has no content at all, or it is
    // an empty one that makes the token chunks outnumber the server's count.
    let role_chunk_tokenless = chunks(record).next().is_some_and(|(_, first)| {
        first.role.is_some()
            && (!first.carries_token
                || (first.text.is_empty() && completion_tokens.is_some_and(|n| tokens.len() as u64 > n)))
    });
    if role_chunk_tokenless && tokens.first().is_some_and(|(_, c)| c.role.is_some()) {
        tokens.remove(0);
    }
    let ttft_ms = tokens.first().map(|t| t.0);
    let e2e_ms = tokens.last().map(|t| t.0);
    let tpot_ms = match (ttft_ms, e2e_ms, completion_tokens) {
        (Some(t), Some(e), Some(n)) if n > 1 => Some((e - t) / (n - 1) as f64),
        _ => None,
    };
    Figures {
        ttft_ms,
        e2e_ms,
        tpot_ms,
        itl_ms: tokens.windows(2).map(|w| w[1].0 - w[0].0).collect(),
        prompt_tokens: count("prompt_tokens"),
        completion_tokens,
        token_chunks: tokens.len(),
        role_chunk_tokenless,
        text: tokens.iter().map(|(_, c)| c.text.as_str()).collect(),
        content: tokens.iter().map(|(_, c)| c.content.as_str()).collect(),
        usage,
        timings,
    }
}
