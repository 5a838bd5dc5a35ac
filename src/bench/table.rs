//! The readable report printed at the end of a run.

use super::measure::DEFINITIONS;
use super::report::{LevelReport, Report};
use super::stats::{Summary, FORMULAS};
use std::fmt::Write;

/// How many findings are printed in full (all are counted, and all are in --json).
const SHOWN_FINDINGS: usize = 20;

pub fn num(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(x) if x.abs() >= 1000.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
    }
}

pub fn summary_cells(s: &Summary) -> [String; 7] {
    [s.n.to_string(), num(s.mean), num(s.p50), num(s.p90), num(s.p99), num(s.max), num(s.std)]
}

/// The figures of a level, as (name, summary) rows.
pub fn summary_rows(l: &LevelReport) -> [(&'static str, &Summary); 6] {
    [
        ("TTFT ms", &l.ttft_ms),
        ("TPOT ms", &l.tpot_ms),
        ("ITL ms", &l.itl_ms),
        ("E2E ms", &l.e2e_ms),
        ("prompt tokens", &l.prompt_tokens),
        ("output tokens", &l.completion_tokens),
    ]
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "rkllmd bench {} → {} model {}", r.version, r.url, r.model);
    match (&r.server_system, &r.server_system_note) {
        (Some(_), _) => out.push_str("server: /v1/system included in --json/--markdown/--html\n"),
        (None, Some(note)) => {
            let _ = writeln!(out, "server: {note}");
        }
        (None, None) => {}
    }
    if let Some(note) = r.simulated_note() {
        let _ = writeln!(out, "NOTE: {note}");
    }
    for l in &r.levels {
        level(&mut out, l);
    }
    out.push_str("\nDefinitions:\n");
    for (name, def) in DEFINITIONS {
        let _ = writeln!(out, "  {name} = {def}");
    }
    let _ = writeln!(out, "  {FORMULAS}");
    if !r.findings.is_empty() {
        let _ = writeln!(out, "\nFindings ({}; first {SHOWN_FINDINGS}):", r.findings.len());
        for f in r.findings.iter().take(SHOWN_FINDINGS) {
            let _ = writeln!(
                out,
                "  [{} #{} {}] {}: {}",
                r.levels.get(f.level).map_or("", |l| l.label.as_str()),
                f.prompt,
                f.finding.source,
                f.finding.kind,
                f.finding.detail
            );
        }
    }
    out
}

fn level(out: &mut String, l: &LevelReport) {
    let _ = writeln!(
        out,
        "\n== {}: {} requests, {} ok, {} failed, {:.2} s ==",
        l.label, l.requests, l.succeeded, l.failed, l.wall_s
    );
    let _ = writeln!(
        out,
        "{:<14}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "", "n", "mean", "p50", "p90", "p99", "max", "std"
    );
    for (name, s) in summary_rows(l) {
        let c = summary_cells(s);
        let _ = writeln!(
            out,
            "{name:<14}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6]
        );
    }
    let _ = writeln!(
        out,
        "throughput: {:.2} req/s = {} ok / {:.2} s; {:.1} output tok/s = {} tokens / {:.2} s",
        l.request_throughput, l.succeeded, l.wall_s, l.output_throughput, l.output_tokens, l.wall_s
    );
    if !l.by_turn.is_empty() {
        let _ = writeln!(
            out,
            "{:<6}{:>12}{:>12}{:>12}{:>12}{:>16}{:>16}{:>16}  found (server)",
            "turn",
            "TTFT p50",
            "TTFT mean",
            "queue p50",
            "prefill p50",
            "prompt tokens",
            "cached tokens",
            "cached (hits)"
        );
        for t in &l.by_turn {
            let _ = writeln!(
                out,
                "{:<6}{:>12}{:>12}{:>12}{:>12}{:>16}{:>16}{:>16}  {}",
                t.turn,
                num(t.ttft_ms.p50),
                num(t.ttft_ms.mean),
                num(t.queue_ms.p50),
                num(t.prefill_ms.p50),
                num(t.prompt_tokens.mean),
                num(t.cached_tokens.mean),
                t.hit_rate(),
                t.found_text()
            );
        }
    }
    if let (Some(mean), Some(max)) = (l.batch_n.mean, l.batch_n.max) {
        let _ = writeln!(out, "batch (server timings.batch_n): mean {mean:.2}, max {max:.0} requests per NPU run");
    }
    if l.image_preprocess_ms.n > 0 {
        let _ = writeln!(
            out,
            "images (server timings.images), TTFT split: preprocessing p50 {} ms, encoder p50 {} ms ({} of {} requests ran it; the rest hit the cache), prefill p50 {} ms",
            num(l.image_preprocess_ms.p50),
            num(l.image_encoder_ms.p50),
            l.image_encoder_ms.n,
            l.image_preprocess_ms.n,
            num(l.image_prefill_ms.p50)
        );
    }
    if !l.errors.is_empty() {
        let list: Vec<String> = l.errors.iter().map(|(k, n)| format!("{k} × {n}")).collect();
        let _ = writeln!(out, "errors: {}", list.join(", "));
    }
    if !l.findings.is_empty() {
        let list: Vec<String> = l.findings.iter().map(|(k, n)| format!("{k} × {n}")).collect();
        let _ = writeln!(out, "findings: {}", list.join(", "));
    }
    if let Some(p) = &l.server_process {
        let _ = writeln!(
            out,
            "server pid {}: CPU {:.0} ms (tick {} ms) = {} µs/token; RSS peak {} KiB, end {} KiB; VmHWM {} KiB",
            p.pid,
            p.cpu_ms,
            p.tick_ms,
            num(p.cpu_us_per_token),
            p.rss_peak_kib,
            p.rss_end_kib,
            p.vm_hwm_kib
        );
    }
}
