//! The report: per-request rows, per-level summaries, findings, and the
//! server's self-description. Every renderer (table, JSON, Markdown, charts)
//! reads this one structure.

use super::args::BenchArgs;
use super::client::{Failure, RequestRecord};
use super::finding::Finding;
use super::measure::figures;
use super::procstat::ServerProcess;
use super::stats::Summary;
use super::workload::Load;
use super::{crosscheck, wire};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
pub struct RequestRow {
    /// Index into `levels`.
    pub level: usize,
    /// The prompt's number (synthetic prompts are numbered; file prompts cycle).
    pub prompt: usize,
    /// The turn of its conversation (0 without --turns).
    pub turn: usize,
    pub ok: bool,
    pub error: Option<Failure>,
    pub http_status: Option<u16>,
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, when the server reports it.
    pub cached_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub itl_ms: Vec<f64>,
    pub token_chunks: usize,
    /// The server's `timings` (or Ollama's durations) as sent.
    pub server_timings: Option<Value>,
    #[serde(skip)]
    pub prompt_text: String,
    #[serde(skip)]
    pub response: String,
}

#[derive(Debug, Serialize)]
pub struct FindingRow {
    pub level: usize,
    pub prompt: usize,
    #[serde(flatten)]
    pub finding: Finding,
}

#[derive(Debug, Serialize)]
pub struct LevelReport {
    pub label: String,
    pub concurrency: Option<usize>,
    pub rate: Option<f64>,
    pub requests: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub errors: BTreeMap<String, usize>,
    pub wall_s: f64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub output_tokens: u64,
    pub ttft_ms: Summary,
    pub tpot_ms: Summary,
    pub itl_ms: Summary,
    pub e2e_ms: Summary,
    pub prompt_tokens: Summary,
    pub completion_tokens: Summary,
    /// Requests that shared each request's NPU run, by the server's
    /// `timings.batch_n` (rkllmd with `batch` > 1; empty elsewhere).
    pub batch_n: Summary,
    /// With --image: the server's `timings.images.preprocess_ms`, `.encoder_ms`
    /// (requests whose image ran the encoder) and `timings.prompt_ms` (prefill).
    pub image_preprocess_ms: Summary,
    pub image_encoder_ms: Summary,
    pub image_prefill_ms: Summary,
    /// Count of findings by kind.
    pub findings: BTreeMap<&'static str, usize>,
    pub server_process: Option<ServerProcess>,
    /// With --turns: TTFT and cached tokens by turn index (empty otherwise).
    pub by_turn: Vec<TurnSummary>,
}

#[derive(Debug, Serialize)]
pub struct TurnSummary {
    /// 1-based turn of the conversations.
    pub turn: usize,
    pub ttft_ms: Summary,
    /// The server's split of the TTFT: waiting for the NPU (`timings.queue_ms`)
    /// and the prefill (`timings.prompt_ms`).
    pub queue_ms: Summary,
    pub prefill_ms: Summary,
    pub prompt_tokens: Summary,
    /// What the server said it reused; `n` = how many replies reported it.
    pub cached_tokens: Summary,
    /// Replies of this turn that reported cached tokens > 0, of those that
    /// reported a count (the conversation cache's hit rate).
    pub hits: usize,
    /// How rkllmd found each prompt's state (`timings.cache`: resident,
    /// restored, miss), counted; empty for servers that do not say.
    pub found: BTreeMap<String, usize>,
}

impl TurnSummary {
    /// `hits/n (p %)`, or `-` when no reply said what it reused.
    pub fn hit_rate(&self) -> String {
        let n = self.cached_tokens.n;
        if n == 0 {
            return "-".into();
        }
        format!("{}/{n} ({:.0} %)", self.hits, 100.0 * self.hits as f64 / n as f64)
    }

    /// `restored 3, miss 1`, or `-`.
    pub fn found_text(&self) -> String {
        if self.found.is_empty() {
            return "-".into();
        }
        self.found.iter().map(|(how, n)| format!("{how} {n}")).collect::<Vec<_>>().join(", ")
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub version: &'static str,
    pub url: String,
    pub model: String,
    pub settings: BenchArgs,
    /// GET /v1/system as the server sent it, when it answered 200 with JSON.
    pub server_system: Option<Value>,
    pub server_system_note: Option<String>,
    pub definitions: BTreeMap<&'static str, &'static str>,
    pub levels: Vec<LevelReport>,
    pub findings: Vec<FindingRow>,
    pub requests: Vec<RequestRow>,
}

impl Report {
    /// A warning when the server said (`/v1/system` `simulated`) that it ran
    /// the simulated runtime: then no figure describes a board.
    pub fn simulated_note(&self) -> Option<String> {
        let system = self.server_system.as_ref()?;
        (system["simulated"] == Value::Bool(true)).then(|| {
            "The server ran the simulated runtime: these figures describe the simulator on this machine, not an NPU."
                .to_owned()
        })
    }
}

/// Measures and checks one finished request.
pub fn request_row(level: usize, prompt: usize, turn: usize, record: &RequestRecord) -> (RequestRow, Vec<Finding>) {
    let fig = figures(record);
    let mut findings = Vec::new();
    if record.status == Some(200) {
        findings.extend(wire::check(record, &fig));
        findings.extend(crosscheck::check(&fig, record.end_ms));
    }
    let error = record.failure.clone().or_else(|| {
        fig.ttft_ms
            .is_none()
            .then(|| Failure { kind: "no_tokens".into(), message: "the stream carried no token".into() })
    });
    let prompt_text = record.prompt.messages.as_array().and_then(|m| m.last()).map_or_else(
        || record.prompt.messages.to_string(),
        |m| m["content"].as_str().map_or_else(|| m["content"].to_string(), str::to_owned),
    );
    let row = RequestRow {
        level,
        prompt,
        turn,
        ok: error.is_none(),
        error,
        http_status: record.status,
        prompt_tokens: fig.prompt_tokens,
        cached_tokens: fig.usage.as_ref().and_then(|u| u["prompt_tokens_details"]["cached_tokens"].as_u64()),
        completion_tokens: fig.completion_tokens,
        ttft_ms: fig.ttft_ms,
        tpot_ms: fig.tpot_ms,
        e2e_ms: fig.e2e_ms,
        itl_ms: fig.itl_ms,
        token_chunks: fig.token_chunks,
        server_timings: fig.timings,
        prompt_text,
        response: fig.text,
    };
    (row, findings)
}

pub fn level_report(
    load: Load,
    rows: &[&RequestRow],
    findings: &[&Finding],
    wall_s: f64,
    server_process: Option<ServerProcess>,
) -> LevelReport {
    let ok: Vec<&&RequestRow> = rows.iter().filter(|r| r.ok).collect();
    let mut errors = BTreeMap::new();
    for e in rows.iter().filter_map(|r| r.error.as_ref()) {
        *errors.entry(e.kind.clone()).or_insert(0) += 1;
    }
    let mut counts = BTreeMap::new();
    for f in findings {
        *counts.entry(f.kind).or_insert(0) += 1;
    }
    let output_tokens: u64 = ok.iter().filter_map(|r| r.completion_tokens).sum();
    let per_s = |x: f64| if wall_s > 0.0 { x / wall_s } else { 0.0 };
    let summary = |f: fn(&RequestRow) -> Option<f64>| Summary::of(ok.iter().filter_map(|r| f(r)));
    let (label, concurrency, rate) = match load {
        Load::Concurrency(c) => (format!("concurrency {c}"), Some(c), None),
        Load::Rate(r) => (format!("rate {r} req/s"), None, Some(r)),
    };
    LevelReport {
        label,
        concurrency,
        rate,
        requests: rows.len(),
        succeeded: ok.len(),
        failed: rows.len() - ok.len(),
        errors,
        wall_s,
        request_throughput: per_s(ok.len() as f64),
        output_throughput: per_s(output_tokens as f64),
        output_tokens,
        ttft_ms: summary(|r| r.ttft_ms),
        tpot_ms: summary(|r| r.tpot_ms),
        itl_ms: Summary::of(ok.iter().flat_map(|r| r.itl_ms.iter().copied())),
        e2e_ms: summary(|r| r.e2e_ms),
        prompt_tokens: summary(|r| r.prompt_tokens.map(|n| n as f64)),
        completion_tokens: summary(|r| r.completion_tokens.map(|n| n as f64)),
        batch_n: Summary::of(ok.iter().filter_map(|r| r.server_timings.as_ref()?["batch_n"].as_f64())),
        image_preprocess_ms: Summary::of(
            ok.iter().filter_map(|r| r.server_timings.as_ref()?["images"]["preprocess_ms"].as_f64()),
        ),
        image_encoder_ms: Summary::of(
            ok.iter().filter_map(|r| r.server_timings.as_ref()?["images"]["encoder_ms"].as_f64()),
        ),
        image_prefill_ms: Summary::of(
            ok.iter()
                .filter(|r| r.server_timings.as_ref().is_some_and(|t| t["images"].is_object()))
                .filter_map(|r| r.server_timings.as_ref()?["prompt_ms"].as_f64()),
        ),
        findings: counts,
        server_process,
        by_turn: by_turn(&ok),
    }
}

/// Per-turn summaries of the successful requests, when there are several turns.
fn by_turn(ok: &[&&RequestRow]) -> Vec<TurnSummary> {
    let turns = ok.iter().map(|r| r.turn + 1).max().unwrap_or(0);
    if turns < 2 {
        return Vec::new();
    }
    (0..turns)
        .map(|t| {
            let of_turn = || ok.iter().filter(move |r| r.turn == t);
            TurnSummary {
                turn: t + 1,
                ttft_ms: Summary::of(of_turn().filter_map(|r| r.ttft_ms)),
                queue_ms: Summary::of(of_turn().filter_map(|r| r.server_timings.as_ref()?["queue_ms"].as_f64())),
                prefill_ms: Summary::of(of_turn().filter_map(|r| r.server_timings.as_ref()?["prompt_ms"].as_f64())),
                prompt_tokens: Summary::of(of_turn().filter_map(|r| r.prompt_tokens.map(|n| n as f64))),
                cached_tokens: Summary::of(of_turn().filter_map(|r| r.cached_tokens.map(|n| n as f64))),
                hits: of_turn().filter(|r| r.cached_tokens.is_some_and(|n| n > 0)).count(),
                found: of_turn().filter_map(|r| r.server_timings.as_ref()?["cache"].as_str()).fold(
                    BTreeMap::new(),
                    |mut found, how| {
                        *found.entry(how.to_owned()).or_default() += 1;
                        found
                    },
                ),
            }
        })
        .collect()
}
