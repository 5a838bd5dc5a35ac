//! The request log: one structured event per finished request (and, with
//! `timings_log`, one JSON line in a file), plus the cross-check of our
//! measurement against the runtime's own perf stats.

use super::{RuntimePerf, Timeline, Timings};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Sender};
use std::time::Instant;

/// Which cross-check against the runtime's perf stats failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Our generated-token count ≠ `generate_tokens`.
    Tokens,
    /// Our prefill is shorter than the runtime's `prefill_time_ms`.
    Prefill,
}

impl Mismatch {
    pub(super) fn label(self) -> &'static str {
        match self {
            Mismatch::Tokens => "tokens",
            Mismatch::Prefill => "prefill",
        }
    }
}

/// What a request asked of the model (the `kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A generation: chat, completions, Ollama's chat and generate.
    Completion,
    /// Hidden-layer runs pooled into vectors: `/v1/embeddings`, Ollama's embed.
    Embedding,
    /// Logits runs scored against a query: `/v1/rerank`.
    Rerank,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Completion => "completion",
            Kind::Embedding => "embedding",
            Kind::Rerank => "rerank",
        }
    }
}

/// A request that reached the engine, at its end.
#[derive(Debug, Clone, Copy)]
pub struct Finished<'a> {
    pub id: &'a str,
    /// The model that served it (the `model` label).
    pub model: &'a str,
    pub kind: Kind,
    /// The inputs of an embedding or rerank request (texts, documents);
    /// `None` for a completion, whose one prompt is not counted so.
    pub inputs: Option<usize>,
    /// The HTTP status its outcome carries (for a stream that failed after it
    /// started: the status of the error event); 499 when the client went away.
    pub status: u16,
    /// `stop`, `length`, `timeout`, `error`, `shutdown` or `abort`.
    pub finish_reason: &'static str,
    pub timeline: &'a Timeline,
    pub perf: Option<RuntimePerf>,
    /// Tokens the runtime generated that rkllmd left out of the reply (after
    /// a stop sequence, the limit, a time-out or a disconnect).
    pub dropped_tokens: u32,
    pub client_disconnected: bool,
    /// The prompt's length by the model's tokenizer, when one is configured;
    /// for an embedding or rerank request, the tokens the runtime read
    /// (its `num_tokens`, over every input), when every input ran.
    pub counted_prompt_tokens: Option<u32>,
    /// Prompt tokens reused from the conversation cache.
    pub cached_tokens: u32,
}

impl Finished<'_> {
    /// `usage.prompt_tokens`: see [`usage_prompt_tokens`].
    pub fn prompt_tokens(&self, t: &Timings) -> Option<i64> {
        usage_prompt_tokens(self.counted_prompt_tokens, t)
    }
}

/// What `usage.prompt_tokens` reports: the tokenizer's exact count, else
/// the runtime's prefill count. The final chunk, the log and the metrics
/// all use this one rule.
pub fn usage_prompt_tokens(counted: Option<u32>, t: &Timings) -> Option<i64> {
    counted.map(i64::from).or(t.prompt_n)
}

/// The raw timeline, µs after `received`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct TimelineUs {
    pub admitted: Option<u64>,
    pub first_token: Option<u64>,
    pub last_token: Option<u64>,
    pub finished: Option<u64>,
}

impl TimelineUs {
    pub fn of(t: &Timeline) -> TimelineUs {
        let us = |at: Option<Instant>| at.map(|a| a.saturating_duration_since(t.received).as_micros() as u64);
        TimelineUs {
            admitted: us(t.admitted),
            first_token: us(t.first_token),
            last_token: us(t.last_token),
            finished: us(t.finished),
        }
    }
}

/// One line of the timings log.
#[derive(Debug, Serialize)]
pub struct Line<'a> {
    /// Wall-clock end of the request, ms since the Unix epoch (for joining with other logs).
    pub unix_ms: u128,
    pub id: &'a str,
    pub model: &'a str,
    pub kind: Kind,
    pub inputs: Option<usize>,
    pub status: u16,
    pub finish_reason: &'a str,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: u32,
    pub client_disconnected: bool,
    /// finished − admitted: the request's time on the runtime.
    pub run_ms: Option<f64>,
    pub timeline_us: TimelineUs,
    /// Exactly the `timings` object of the final chunk.
    pub timings: &'a Timings,
}

/// A figure in milliseconds as the log shows it: to the microsecond. The
/// subtraction of two instants as `f64` leaves binary noise in the last
/// digits (`63.69188100000001`); a rounded value prints as its decimal.
fn shown(ms: Option<f64>) -> Option<f64> {
    ms.map(|x| (x * 1000.0).round() / 1000.0)
}

/// The one INFO event per request (target `rkllmd::request`).
pub fn log(f: &Finished, t: &Timings, model: &str) {
    let raw = TimelineUs::of(f.timeline);
    let perf = f.perf;
    tracing::info!(
        target: "rkllmd::request",
        id = f.id,
        model,
        kind = f.kind.as_str(),
        inputs = f.inputs,
        status = f.status,
        finish_reason = f.finish_reason,
        prompt_tokens = f.prompt_tokens(t),
        cached_tokens = t.cache_n,
        prompt_cache_tokens = t.prompt_cache_n,
        cache = t.cache,
        cache_miss = t.cache_miss,
        completion_tokens = t.predicted_n,
        client_disconnected = f.client_disconnected,
        admitted_us = raw.admitted,
        first_token_us = raw.first_token,
        last_token_us = raw.last_token,
        finished_us = raw.finished,
        queue_ms = shown(t.queue_ms),
        run_ms = shown(super::timeline::run_ms(f.timeline)),
        prefill_ms = shown(t.prompt_ms),
        ttft_ms = shown(t.ttft_ms),
        decode_ms = shown(t.predicted_ms),
        tpot_ms = shown(t.predicted_per_token_ms),
        decode_tps = shown(t.predicted_per_second),
        prefill_tps = shown(t.prompt_per_second),
        e2e_ms = shown(t.e2e_ms),
        runtime_prefill_ms = perf.map(|p| p.prefill_time_ms),
        runtime_prefill_tokens = perf.map(|p| p.prefill_tokens),
        runtime_generate_ms = perf.map(|p| p.generate_time_ms),
        runtime_generate_tokens = perf.map(|p| p.generate_tokens),
        runtime_memory_mb = perf.map(|p| p.memory_usage_mb),
        runtime_batch_size = perf.map(|p| p.batch_size),
        "request finished"
    );
}

/// Compares our figures with the runtime's; each disagreement is a WARN with
/// both numbers. That is how an inverted boundary gets caught instead of published.
pub fn cross_check(f: &Finished, t: &Timings) -> Vec<Mismatch> {
    // A batch's figures cover every slot: nothing to compare one request
    // with. An embedding or rerank run generates no token and has no
    // prefill boundary of ours (no first token): nothing to compare either.
    let Some(p) = f.perf.filter(|p| p.batch_size <= 1 && f.kind == Kind::Completion) else { return Vec::new() };
    let mut found = Vec::new();
    // The runtime counts every token it generated, the ones we dropped too.
    if p.generate_tokens != i64::from(t.predicted_n) + i64::from(f.dropped_tokens) {
        tracing::warn!(
            id = f.id,
            ours = t.predicted_n,
            dropped = f.dropped_tokens,
            runtime = p.generate_tokens,
            "generated-token count differs from the runtime's"
        );
        found.push(Mismatch::Tokens);
    }
    // Our prefill spans the runtime's (1 ms allowance for clock granularity).
    if let Some(prefill) = t.prompt_ms {
        if prefill + 1.0 < p.prefill_time_ms {
            tracing::warn!(
                id = f.id,
                ours_ms = prefill,
                runtime_ms = p.prefill_time_ms,
                "measured prefill is shorter than the runtime's own"
            );
            found.push(Mismatch::Prefill);
        }
    }
    found
}

/// Appends lines to the timings log on a thread of its own, so a slow disk
/// never holds up a request.
pub struct TimingsLog {
    lines: Sender<String>,
}

impl TimingsLog {
    /// Opens (creating) `path` for appending; fails at start, not per request.
    pub fn open(path: &Path) -> Result<TimingsLog, String> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open the timings log {}: {e}", path.display()))?;
        let (lines, rx) = channel::<String>();
        let shown: PathBuf = path.to_owned();
        std::thread::Builder::new()
            .name("timings-log".into())
            .spawn(move || {
                let mut failed = false;
                for line in rx {
                    // One write per line: appends from one writer never interleave.
                    if let Err(e) = file.write_all(line.as_bytes()) {
                        if !std::mem::replace(&mut failed, true) {
                            tracing::warn!(path = %shown.display(), "cannot write the timings log: {e}");
                        }
                    }
                }
            })
            .map_err(|e| format!("cannot start the timings-log thread: {e}"))?;
        Ok(TimingsLog { lines })
    }

    pub fn append(&self, line: &Line) {
        match serde_json::to_string(line) {
            Ok(mut text) => {
                text.push('\n');
                let _ = self.lines.send(text);
            }
            Err(e) => tracing::warn!("cannot serialise a timings-log line: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn logged_figures_print_as_their_decimals() {
        let noisy = 63.691881 + 1e-14;
        assert_eq!(format!("{noisy:?}"), "63.69188100000001", "the noise this rounds away");
        assert_eq!(format!("{:?}", shown(Some(noisy))), "Some(63.692)");
        assert_eq!(shown(None), None);
    }

    fn perf(prefill_ms: f64, tokens: i64) -> RuntimePerf {
        RuntimePerf {
            prefill_time_ms: prefill_ms,
            prefill_tokens: 10,
            generate_time_ms: 1.0,
            generate_tokens: tokens,
            memory_usage_mb: 1.0,
            batch_size: 1,
        }
    }

    fn check(prefill_ms: f64, runtime_tokens: i64, dropped_tokens: u32) -> Vec<Mismatch> {
        let r = Instant::now();
        let mut t = Timeline::new(r);
        t.admitted = Some(r);
        t.token(r + Duration::from_millis(100));
        t.token(r + Duration::from_millis(150));
        let p = perf(prefill_ms, runtime_tokens);
        let f = Finished {
            model: "m",
            id: "x",
            kind: Kind::Completion,
            inputs: None,
            status: 200,
            finish_reason: "stop",
            timeline: &t,
            perf: Some(p),
            dropped_tokens,
            client_disconnected: false,
            counted_prompt_tokens: None,
            cached_tokens: 0,
        };
        cross_check(&f, &Timings::derive(&t, Some(p), 0))
    }

    #[test]
    fn cross_check_finds_each_disagreement() {
        assert_eq!(check(99.0, 2, 0), vec![]);
        assert_eq!(check(99.0, 3, 0), vec![Mismatch::Tokens]);
        assert_eq!(check(99.0, 5, 3), vec![], "the runtime also counts the tokens we dropped");
        assert_eq!(check(99.0, 6, 3), vec![Mismatch::Tokens], "dropped tokens do not excuse a real gap");
        assert_eq!(check(99.0, 4, 3), vec![Mismatch::Tokens], "nor fewer tokens than we saw");
        assert_eq!(check(150.0, 2, 0), vec![Mismatch::Prefill]);
    }
}
