//! The HTML report: one self-contained page with the same content as the
//! Markdown report, as HTML tables (settings, the server's `/v1/system`,
//! per-level figures, findings, per-request figures) and the SVG charts.

use super::chart::{self, esc};
use super::measure::DEFINITIONS;
use super::report::{LevelReport, Report};
use super::stats::FORMULAS;
use super::table::{num, summary_cells, summary_rows};
use serde_json::Value;
use std::fmt::Write;

const STYLE: &str = "body{font-family:sans-serif;max-width:70em;margin:1em auto;padding:0 1em}\
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:2px 8px}\
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4;text-align:left}\
.warn{background:#fff3cd;border:1px solid #e0c060;padding:.5em}details{margin:.3em 0}";

/// A table: a header row, then rows of cells; `numeric` columns align right.
fn table(out: &mut String, head: &[&str], rows: impl IntoIterator<Item = Vec<String>>, numeric: &[usize]) {
    out.push_str("<table><tr>");
    for h in head {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if numeric.contains(&i) { " class=\"n\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", esc(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// A JSON object as (dotted path, value) rows: `{"npu": {"cores": 3}}` → `npu.cores`, `3`.
fn flatten(prefix: &str, v: &Value, rows: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&path, v, rows);
            }
        }
        Value::String(s) => rows.push(vec![prefix.to_owned(), s.clone()]),
        other => rows.push(vec![prefix.to_owned(), other.to_string()]),
    }
}

fn key_values(out: &mut String, v: &Value) {
    let mut rows = Vec::new();
    flatten("", v, &mut rows);
    table(out, &["field", "value"], rows, &[]);
}

pub fn render(r: &Report) -> String {
    let mut out = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>rkllmd bench: {}</title><style>{STYLE}</style></head><body>\n\
         <h1>rkllmd bench report</h1>\n<p>Server <code>{}</code>, model <code>{}</code>, rkllmd {}.</p>\n",
        esc(&r.model),
        esc(&r.url),
        esc(&r.model),
        r.version
    );
    if let Some(note) = r.simulated_note() {
        let _ = writeln!(out, "<p class=\"warn\">{}</p>", esc(&note));
    }
    for l in &r.levels {
        level(&mut out, l);
    }
    out.push_str("<h2>Charts</h2>\n");
    out.push_str(&chart::svg(r));
    out.push_str("<h2>Settings</h2>\n");
    key_values(&mut out, &serde_json::to_value(&r.settings).unwrap_or_default());
    out.push_str("<h2>Server (GET /v1/system)</h2>\n");
    match (&r.server_system, &r.server_system_note) {
        (Some(v), _) => key_values(&mut out, v),
        (None, note) => {
            let _ = writeln!(out, "<p>Not available: {}.</p>", esc(note.as_deref().unwrap_or("not asked")));
        }
    }
    out.push_str("<h2>Definitions</h2>\n<dl>\n");
    for (name, def) in DEFINITIONS {
        let _ = writeln!(out, "<dt><code>{name}</code></dt><dd>{}</dd>", esc(def));
    }
    let _ = writeln!(out, "<dt>statistics</dt><dd>{}</dd>\n</dl>", esc(FORMULAS));
    if !r.findings.is_empty() {
        out.push_str("<h2>Findings</h2>\n");
        let rows = r.findings.iter().map(|f| {
            let level = r.levels.get(f.level).map_or_else(|| f.level.to_string(), |l| l.label.clone());
            vec![level, f.prompt.to_string(), f.finding.source.into(), f.finding.kind.into(), f.finding.detail.clone()]
        });
        table(&mut out, &["level", "prompt", "source", "kind", "detail"], rows, &[1]);
    }
    requests(&mut out, r);
    out.push_str("</body></html>\n");
    out
}

fn level(out: &mut String, l: &LevelReport) {
    let _ = writeln!(
        out,
        "<h2>{}</h2>\n<p>{} requests, {} ok, {} failed, wall {:.2} s. Throughput {:.2} req/s, {:.1} output tok/s ({} tokens).</p>",
        esc(&l.label),
        l.requests,
        l.succeeded,
        l.failed,
        l.wall_s,
        l.request_throughput,
        l.output_throughput,
        l.output_tokens
    );
    let rows = summary_rows(l).into_iter().map(|(name, s)| {
        let mut row = vec![name.to_owned()];
        row.extend(summary_cells(s));
        row
    });
    table(out, &["figure", "n", "mean", "p50", "p90", "p99", "max", "std"], rows, &[1, 2, 3, 4, 5, 6, 7]);
    if !l.by_turn.is_empty() {
        let rows = l.by_turn.iter().map(|t| {
            vec![
                t.turn.to_string(),
                num(t.ttft_ms.p50),
                num(t.ttft_ms.mean),
                num(t.queue_ms.p50),
                num(t.prefill_ms.p50),
                num(t.prompt_tokens.mean),
                num(t.cached_tokens.mean),
                t.hit_rate(),
                t.found_text(),
            ]
        });
        let head = [
            "turn",
            "TTFT p50 ms",
            "TTFT mean ms",
            "queue p50 ms",
            "prefill p50 ms",
            "prompt tokens",
            "cached tokens",
            "cached (hits)",
            "found (server)",
        ];
        table(out, &head, rows, &[0, 1, 2, 3, 4, 5, 6]);
    }
    if let (Some(mean), Some(max)) = (l.batch_n.mean, l.batch_n.max) {
        let _ = writeln!(
            out,
            "<p>Batch (server <code>timings.batch_n</code>): mean {mean:.2}, max {max:.0} requests per NPU run.</p>"
        );
    }
    let errors: Vec<String> = l.errors.iter().map(|(k, n)| format!("<code>{}</code> × {n}", esc(k))).collect();
    let findings: Vec<String> = l.findings.iter().map(|(k, n)| format!("<code>{k}</code> × {n}")).collect();
    for (what, list) in [("Errors", errors), ("Findings", findings)] {
        if !list.is_empty() {
            let _ = writeln!(out, "<p>{what}: {}.</p>", list.join(", "));
        }
    }
    if let Some(p) = &l.server_process {
        let _ = writeln!(out, "<p>{}.</p>", super::markdown::server_process(p));
    }
}

/// Per-request figures, then each prompt and response folded away.
fn requests(out: &mut String, r: &Report) {
    out.push_str("<h2>Requests</h2>\n");
    let count = |n: Option<u64>| n.map_or("-".into(), |n| n.to_string());
    let rows = r.requests.iter().map(|q| {
        let itl = (!q.itl_ms.is_empty()).then(|| q.itl_ms.iter().sum::<f64>() / q.itl_ms.len() as f64);
        vec![
            q.level.to_string(),
            q.prompt.to_string(),
            if q.ok { "yes" } else { "no" }.into(),
            count(q.prompt_tokens),
            count(q.completion_tokens),
            num(q.ttft_ms),
            num(q.tpot_ms),
            num(q.e2e_ms),
            num(itl),
            q.error.as_ref().map_or(String::new(), |e| format!("{}: {}", e.kind, e.message)),
        ]
    });
    let head =
        ["level", "prompt", "ok", "prompt tok", "output tok", "TTFT ms", "TPOT ms", "E2E ms", "mean ITL ms", "error"];
    table(out, &head, rows, &[0, 1, 3, 4, 5, 6, 7, 8]);
    out.push_str("<h2>Prompts and responses</h2>\n");
    for q in &r.requests {
        let _ = writeln!(
            out,
            "<details><summary>level {}, prompt {}</summary><p><b>prompt</b></p><blockquote style=\"white-space:pre-wrap\">{}</blockquote><p><b>response</b></p><blockquote style=\"white-space:pre-wrap\">{}</blockquote></details>",
            q.level,
            q.prompt,
            esc(&q.prompt_text),
            esc(&q.response)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_objects_become_dotted_rows() {
        let mut rows = Vec::new();
        flatten("", &json!({"npu": {"cores": 3, "load": null}, "model": "m", "list": [1, 2]}), &mut rows);
        let rows: Vec<(String, String)> = rows.into_iter().map(|r| (r[0].clone(), r[1].clone())).collect();
        let want = [("npu.cores", "3"), ("npu.load", "null"), ("model", "m"), ("list", "[1,2]")];
        assert_eq!(rows, want.map(|(a, b)| (a.to_owned(), b.to_owned())));
    }
}
