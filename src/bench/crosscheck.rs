//! The server's own timings held against what the client observed.
//!
//! Reads rkllmd's and llama.cpp's `timings` (same names) and Ollama's
//! `*_duration` (ns) / `*_count` fields, and flags figures that are impossible
//! (negative, a server-side span longer than the client's) or inconsistent
//! (a decode rate far from the one the client saw, token counts that differ).

use super::finding::Finding;
use super::measure::Figures;
use serde_json::Value;

/// A client decode span shorter than this is too short to judge a rate by.
const MIN_DECODE_SPAN_MS: f64 = 20.0;
/// Server and client decode rates may differ by this factor (transport, batching).
const RATE_FACTOR: f64 = 2.0;
/// Clock slack between the server's spans and the client's, which contain them.
const SLACK_MS: f64 = 1.0;

/// The server's figures in one shape, whichever server sent them.
#[derive(Debug, Default)]
struct ServerView {
    decode_n: Option<f64>,
    decode_ms: Option<f64>,
    decode_tps: Option<f64>,
    prompt_n: Option<f64>,
    prompt_ms: Option<f64>,
    queue_ms: Option<f64>,
    ttft_ms: Option<f64>,
    e2e_ms: Option<f64>,
    runtime_generate_tokens: Option<f64>,
    /// Every numeric field, with the name it came with (to flag negative ones).
    raw: Vec<(String, f64)>,
}

fn view(t: &Value) -> ServerView {
    let f = |k: &str| t[k].as_f64();
    let mut raw = Vec::new();
    numbers("", t, &mut raw);
    if t.get("eval_count").is_some() || t.get("eval_duration").is_some() {
        let ms = |k: &str| f(k).map(|ns| ns / 1e6);
        let decode_tps = f("eval_count").zip(ms("eval_duration")).filter(|(_, d)| *d > 0.0).map(|(n, d)| n / d * 1e3);
        return ServerView {
            decode_n: f("eval_count"),
            decode_ms: ms("eval_duration"),
            decode_tps,
            prompt_n: f("prompt_eval_count"),
            prompt_ms: ms("prompt_eval_duration"),
            e2e_ms: ms("total_duration"),
            raw,
            ..ServerView::default()
        };
    }
    ServerView {
        decode_n: f("predicted_n"),
        decode_ms: f("predicted_ms"),
        decode_tps: f("predicted_per_second"),
        prompt_n: f("prompt_n"),
        prompt_ms: f("prompt_ms"),
        queue_ms: f("queue_ms"),
        ttft_ms: f("ttft_ms"),
        e2e_ms: f("e2e_ms"),
        // A batched run's perf counts every slot's tokens, not this request's.
        runtime_generate_tokens: t["runtime"]["generate_tokens"]
            .as_f64()
            .filter(|_| t["runtime"]["batch_size"].as_u64().is_none_or(|n| n <= 1)),
        raw,
    }
}

fn numbers(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>) {
    if let Some(map) = v.as_object() {
        for (k, x) in map {
            let name = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            match x.as_f64() {
                Some(n) => out.push((name, n)),
                None => numbers(&name, x, out),
            }
        }
    }
}

/// `end_ms`: when the client saw the body end.
pub fn check(fig: &Figures, end_ms: f64) -> Vec<Finding> {
    let Some(t) = &fig.timings else { return Vec::new() };
    let s = view(t);
    let mut out = Vec::new();
    for (name, x) in &s.raw {
        if *x < 0.0 {
            out.push(Finding::server("negative_value", format!("{name} = {x}")));
        }
    }
    let completion = fig.completion_tokens.map(|n| n as f64);
    if let (Some(n), Some(c)) = (s.decode_n, completion) {
        if n != c {
            out.push(Finding::server(
                "predicted_n_mismatch",
                format!("server generated {n} tokens, usage.completion_tokens = {c}"),
            ));
        }
    }
    if let (Some(g), Some(c)) = (s.runtime_generate_tokens, completion) {
        if g != c {
            out.push(Finding::server(
                "runtime_tokens_mismatch",
                format!("runtime.generate_tokens {g} ≠ completion_tokens {c}"),
            ));
        }
    }
    if let (Some(p), Some(u)) = (s.prompt_n, fig.prompt_tokens) {
        // prompt_n may be smaller (a cached prefix is not prefilled again), never larger.
        if p > u as f64 {
            out.push(Finding::server("prompt_n_exceeds_usage", format!("prompt_n {p} > usage.prompt_tokens {u}")));
        }
    }
    check_rates(&s, fig, &mut out);
    check_spans(&s, fig, end_ms, &mut out);
    out
}

fn check_rates(s: &ServerView, fig: &Figures, out: &mut Vec<Finding>) {
    // The server's rate against its own n and span: (n − 1)/span (rkllmd) or n/span (llama.cpp, Ollama).
    if let (Some(tps), Some(n), Some(ms)) = (s.decode_tps, s.decode_n, s.decode_ms) {
        if ms > 0.0 && n > 1.0 {
            let fits = |count: f64| (tps - count / ms * 1e3).abs() <= 0.02 * tps.abs().max(1e-9);
            if !fits(n - 1.0) && !fits(n) {
                out.push(Finding::server(
                    "rate_formula",
                    format!("decode rate {tps:.2} tok/s is neither (n−1)/decode_s nor n/decode_s for n = {n}, decode = {ms} ms"),
                ));
            }
        }
    }
    let client_span = fig.e2e_ms.zip(fig.ttft_ms).map(|(e, t)| e - t);
    if let (Some(tps), Some(span), Some(n)) = (s.decode_tps, client_span, fig.completion_tokens) {
        if span >= MIN_DECODE_SPAN_MS && n > 1 {
            let client = (n - 1) as f64 / span * 1e3;
            if tps > client * RATE_FACTOR || tps * RATE_FACTOR < client {
                out.push(Finding::server(
                    "decode_rate_inconsistent",
                    format!("server reports {tps:.1} tok/s decode, client observed {client:.1} tok/s"),
                ));
            }
        }
    }
}

fn check_spans(s: &ServerView, fig: &Figures, end_ms: f64, out: &mut Vec<Finding>) {
    if let (Some(server), Some(client)) = (s.ttft_ms, fig.ttft_ms) {
        if server > client + SLACK_MS {
            out.push(Finding::server(
                "ttft_exceeds_client",
                format!(
                    "server ttft_ms {server:.2} > client TTFT {client:.2} (the client's span contains the server's)"
                ),
            ));
        }
    }
    if let Some(server) = s.e2e_ms {
        if server > end_ms + SLACK_MS {
            out.push(Finding::server(
                "e2e_exceeds_client",
                format!("server e2e {server:.2} ms > client's whole request {end_ms:.2} ms"),
            ));
        }
    }
    if let (Some(q), Some(p), Some(t)) = (s.queue_ms, s.prompt_ms, s.ttft_ms) {
        if (q + p - t).abs() > SLACK_MS {
            out.push(Finding::server("phases_inconsistent", format!("queue_ms {q} + prompt_ms {p} ≠ ttft_ms {t}")));
        }
    }
    for (name, part) in [("ttft_ms", s.ttft_ms), ("predicted_ms", s.decode_ms)] {
        if let (Some(part), Some(e2e)) = (part, s.e2e_ms) {
            if part > e2e + SLACK_MS {
                out.push(Finding::server("phases_inconsistent", format!("{name} {part} > e2e {e2e}")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fig(timings: Value, completion: u64) -> Figures {
        Figures {
            ttft_ms: Some(100.0),
            e2e_ms: Some(280.0),
            completion_tokens: Some(completion),
            prompt_tokens: Some(50),
            timings: Some(timings),
            ..Figures::default()
        }
    }

    fn kinds(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn consistent_rkllmd_timings_pass() {
        // 10 tokens over 180 ms at the client: 50 tok/s; the server saw 175 ms.
        let t = json!({"prompt_n": 50, "prompt_ms": 90.0, "predicted_n": 10, "predicted_ms": 175.0,
            "predicted_per_second": 9.0 / 0.175, "queue_ms": 5.0, "ttft_ms": 95.0, "e2e_ms": 275.0,
            "runtime": {"generate_tokens": 10}});
        assert_eq!(check(&fig(t, 10), 285.0), vec![]);
    }

    #[test]
    fn impossible_figures_are_flagged() {
        let t = json!({"prompt_n": 60, "prompt_ms": -3.0, "predicted_n": 12, "predicted_ms": 1.0,
            "predicted_per_second": 8000.0, "queue_ms": 1.0, "ttft_ms": 150.0, "e2e_ms": 900.0,
            "runtime": {"generate_tokens": 11}});
        let got = check(&fig(t, 10), 285.0);
        for kind in [
            "negative_value",
            "predicted_n_mismatch",
            "runtime_tokens_mismatch",
            "prompt_n_exceeds_usage",
            "rate_formula",
            "decode_rate_inconsistent",
            "ttft_exceeds_client",
            "e2e_exceeds_client",
            "phases_inconsistent",
        ] {
            assert!(kinds(&got).contains(&kind), "{kind} missing from {got:#?}");
        }
    }

    #[test]
    fn a_batched_runs_token_count_is_not_one_requests() {
        let t = json!({"predicted_n": 10, "runtime": {"generate_tokens": 37, "batch_size": 4}});
        assert!(!kinds(&check(&fig(t, 10), 285.0)).contains(&"runtime_tokens_mismatch"));
        let t = json!({"predicted_n": 10, "runtime": {"generate_tokens": 37, "batch_size": 1}});
        assert!(kinds(&check(&fig(t, 10), 285.0)).contains(&"runtime_tokens_mismatch"));
    }

    #[test]
    fn ollama_durations_are_read_in_nanoseconds() {
        let ok = json!({"eval_count": 10, "eval_duration": 180_000_000u64, "total_duration": 270_000_000u64});
        assert_eq!(check(&fig(ok, 10), 285.0), vec![]);
        let fast = json!({"eval_count": 10, "eval_duration": 1_000_000u64});
        assert_eq!(kinds(&check(&fig(fast, 10), 285.0)), ["decode_rate_inconsistent"]);
    }
}
