//! The Markdown report: settings, the server's description, per-level
//! summaries, findings, per-request figures, prompts and responses.

use super::measure::DEFINITIONS;
use super::procstat::ServerProcess;
use super::report::Report;
use super::stats::FORMULAS;
use super::table::{num, summary_cells, summary_rows};
use std::fmt::Write;

/// A fenced block whose fence is longer than any backtick run inside.
fn fenced(lang: &str, text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}{lang}\n{text}\n{fence}\n")
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# rkllmd bench report\n\nServer `{}`, model `{}`, rkllmd {}.\n", r.url, r.model, r.version);
    if let Some(note) = r.simulated_note() {
        let _ = writeln!(out, "> **{note}**\n");
    }
    out.push_str("## Settings\n\n");
    out.push_str(&fenced("json", &serde_json::to_string_pretty(&r.settings).unwrap_or_default()));
    out.push_str("\n## Server (`GET /v1/system`)\n\n");
    match (&r.server_system, &r.server_system_note) {
        (Some(v), _) => out.push_str(&fenced("json", &serde_json::to_string_pretty(v).unwrap_or_default())),
        (None, note) => {
            let _ = writeln!(out, "Not available: {}.", note.as_deref().unwrap_or("not asked"));
        }
    }
    for l in &r.levels {
        let _ = writeln!(
            out,
            "\n## {}\n\n{} requests, {} ok, {} failed, wall {:.2} s. Throughput {:.2} req/s, {:.1} output tok/s \
             ({} tokens).\n",
            l.label,
            l.requests,
            l.succeeded,
            l.failed,
            l.wall_s,
            l.request_throughput,
            l.output_throughput,
            l.output_tokens
        );
        if let (Some(mean), Some(max)) = (l.batch_n.mean, l.batch_n.max) {
            let _ =
                writeln!(out, "Batch (server `timings.batch_n`): mean {mean:.2}, max {max:.0} requests per NPU run.\n");
        }
        out.push_str("| figure | n | mean | p50 | p90 | p99 | max | std |\n|---|---|---|---|---|---|---|---|\n");
        for (name, s) in summary_rows(l) {
            let _ = writeln!(out, "| {name} | {} |", summary_cells(s).join(" | "));
        }
        let errors: Vec<String> = l.errors.iter().map(|(k, n)| format!("`{k}` × {n}")).collect();
        let findings: Vec<String> = l.findings.iter().map(|(k, n)| format!("`{k}` × {n}")).collect();
        for (what, list) in [("Errors", errors), ("Findings", findings)] {
            if !list.is_empty() {
                let _ = writeln!(out, "\n{what}: {}.", list.join(", "));
            }
        }
        if let Some(p) = &l.server_process {
            let _ = writeln!(out, "\n{}.", server_process(p));
        }
    }
    out.push_str("\n## Definitions\n\n");
    for (name, def) in DEFINITIONS {
        let _ = writeln!(out, "* `{name}` = {def}");
    }
    let _ = writeln!(out, "* statistics: {FORMULAS}");
    if !r.findings.is_empty() {
        out.push_str("\n## Findings\n\n| level | prompt | source | kind | detail |\n|---|---|---|---|---|\n");
        for f in &r.findings {
            let _ = writeln!(
                out,
                "| {} | {} | {} | `{}` | {} |",
                f.level,
                f.prompt,
                f.finding.source,
                f.finding.kind,
                cell(&f.finding.detail)
            );
        }
    }
    out.push_str("\n## Requests\n\n| level | prompt | ok | prompt tok | output tok | TTFT ms | TPOT ms | E2E ms | mean ITL ms | error |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    let count = |n: Option<u64>| n.map_or("-".into(), |n| n.to_string());
    for q in &r.requests {
        let itl = (!q.itl_ms.is_empty()).then(|| q.itl_ms.iter().sum::<f64>() / q.itl_ms.len() as f64);
        let error = q.error.as_ref().map_or(String::new(), |e| cell(&format!("{}: {}", e.kind, e.message)));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {error} |",
            q.level,
            q.prompt,
            if q.ok { "yes" } else { "no" },
            count(q.prompt_tokens),
            count(q.completion_tokens),
            num(q.ttft_ms),
            num(q.tpot_ms),
            num(q.e2e_ms),
            num(itl)
        );
    }
    out.push_str("\n## Prompts and responses\n");
    for q in &r.requests {
        let _ = writeln!(out, "\n### level {}, prompt {}\n", q.level, q.prompt);
        out.push_str(&fenced("text", &q.prompt_text));
        out.push('\n');
        out.push_str(&fenced("text", &q.response));
    }
    out
}

/// The server process's figures for one level, as a sentence (the Markdown
/// and HTML reports both say it).
pub(super) fn server_process(p: &ServerProcess) -> String {
    format!(
        "Server process {}: CPU {:.0} ms = {} µs per streamed token; VmRSS peak {} KiB (end {} KiB); VmHWM {} KiB",
        p.pid,
        p.cpu_ms,
        num(p.cpu_us_per_token),
        p.rss_peak_kib,
        p.rss_end_kib,
        p.vm_hwm_kib
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_outgrow_the_backticks_inside() {
        assert_eq!(fenced("", "a"), "```\na\n```\n");
        assert_eq!(fenced("text", "x ```` y"), "`````text\nx ```` y\n`````\n");
    }
}
