//! `rkllmd bench`: a streaming benchmark client for any OpenAI-compatible
//! server. Client-side TTFT/TPOT/ITL/E2E by docs/timings.md, checks of the
//! stream against the wire rules, and the server's own timings held against
//! what the client saw. See docs/bench.md.

mod args;
mod chart;
mod client;
mod crosscheck;
mod finding;
mod html;
mod markdown;
mod measure;
mod procstat;
mod report;
mod sse;
mod stats;
mod table;
mod wire;
mod workload;

pub use args::BenchArgs;

use crate::error_text::chain;
use client::{run_one, Target};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use report::{FindingRow, Report};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;
use workload::{Level, Limits, Load, Prompts, Rng};

/// Measured requests per level when neither --requests nor --duration is given.
const DEFAULT_REQUESTS: usize = 16;

pub async fn run(args: BenchArgs) -> Result<(), String> {
    let loads = loads(&args)?;
    let limits = Limits {
        requests: args.requests.or(args.duration.is_none().then_some(DEFAULT_REQUESTS)),
        duration: args.duration.map(Duration::from_secs_f64),
    };
    let prompts = match &args.prompts {
        Some(path) => Prompts::load(path, args.output_tokens)?,
        None => Prompts::Synthetic { tokens: args.prompt_tokens, max_tokens: args.output_tokens, seed: args.seed },
    };
    let prompts = Arc::new(match &args.image {
        Some(path) => {
            use base64::Engine as _;
            let bytes = std::fs::read(path).map_err(|e| format!("--image {}: {e}", path.display()))?;
            let url = format!("data:;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes));
            Prompts::WithImage { prompts: Box::new(prompts), url }
        }
        None => prompts,
    });
    let http = reqwest::Client::builder().tcp_nodelay(true).build().map_err(|e| format!("HTTP client: {e}"))?;
    let base = args.url.trim_end_matches('/').trim_end_matches("/v1").to_owned();
    // TLS would add ~2 MB (rustls) to a binary that runs on boards; benchmarks run over plain HTTP.
    if !base.starts_with("http://") {
        return Err(format!("--url {base}: only http:// URLs are supported"));
    }
    let mut target = Target {
        http,
        base,
        api_key: args.api_key.clone(),
        model: String::new(),
        timeout: Duration::from_secs_f64(args.timeout),
        ignore_eos: args.ignore_eos,
    };
    target.model = match &args.model {
        Some(m) => m.clone(),
        None => first_model(&target).await?,
    };
    let (server_system, server_system_note) = system(&target).await;
    let target = Arc::new(target);

    let mut rng = Rng::new(args.seed);
    let (mut levels, mut findings, mut requests) = (Vec::new(), Vec::new(), Vec::new());
    let mut next_prompt = 0;
    for (index, load) in loads.into_iter().enumerate() {
        for _ in 0..args.warmup {
            run_one(&target, prompts.get(next_prompt)).await;
            next_prompt += 1;
        }
        let progress = progress_bar(limits.requests, &load);
        let sampler = args.server_pid.map(procstat::Sampler::start).transpose()?;
        let level = Level { load, limits, turns: args.turns as usize };
        let run =
            workload::run_level(target.clone(), prompts.clone(), next_prompt, level, &mut rng, progress.clone()).await;
        progress.finish_and_clear();
        next_prompt += run.records.iter().filter(|(_, turn, _)| *turn == 0).count();
        let mut rows = Vec::new();
        let mut level_findings = Vec::new();
        for (prompt, turn, record) in &run.records {
            let (row, found) = report::request_row(index, *prompt, *turn, record);
            level_findings.extend(found.into_iter().map(|finding| FindingRow {
                level: index,
                prompt: *prompt,
                finding,
            }));
            rows.push(row);
        }
        rows.sort_by_key(|r| (r.prompt, r.turn));
        level_findings.sort_by_key(|f| f.prompt);
        let streamed: u64 = rows.iter().filter_map(|r| r.completion_tokens).sum();
        let process = sampler.map(|s| s.finish(streamed)).transpose()?;
        let row_refs: Vec<_> = rows.iter().collect();
        let finding_refs: Vec<_> = level_findings.iter().map(|f| &f.finding).collect();
        levels.push(report::level_report(load, &row_refs, &finding_refs, run.wall_s, process));
        requests.extend(rows);
        findings.extend(level_findings);
    }
    let report = Report {
        tool: "rkllmd bench",
        version: env!("CARGO_PKG_VERSION"),
        url: target.base.clone(),
        model: target.model.clone(),
        settings: args.clone(),
        server_system,
        server_system_note,
        definitions: measure::DEFINITIONS.into_iter().chain([("statistics", stats::FORMULAS)]).collect(),
        levels,
        findings,
        requests,
    };
    write_outputs(&args, &report)?;
    if report.levels.iter().all(|l| l.succeeded == 0) {
        return Err("no request succeeded".into());
    }
    Ok(())
}

fn loads(args: &BenchArgs) -> Result<Vec<Load>, String> {
    if let Some(bad) = args.rate.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(format!("--rate must be positive, got {bad}"));
    }
    if args.concurrency.contains(&0) {
        return Err("--concurrency must be at least 1".into());
    }
    if args.duration.is_some_and(|d| !(d.is_finite() && d > 0.0)) || !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err("--duration and --timeout must be positive".into());
    }
    Ok(match (&args.rate[..], &args.concurrency[..]) {
        ([], []) => vec![Load::Concurrency(1)],
        ([], c) => c.iter().map(|&c| Load::Concurrency(c)).collect(),
        (r, _) => r.iter().map(|&r| Load::Rate(r)).collect(),
    })
}

async fn first_model(target: &Target) -> Result<String, String> {
    let url = format!("{}/v1/models", target.base);
    let fail = |e: String| format!("cannot list models at {url} (give --model): {e}");
    let response = target.get("/v1/models").send().await.map_err(|e| fail(chain(&e)))?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.map_err(|e| fail(chain(&e)))?;
    body["data"][0]["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| fail(format!("HTTP {status}, no data[0].id in {body}")))
}

/// GET /v1/system, embedded verbatim when the server has it.
async fn system(target: &Target) -> (Option<serde_json::Value>, Option<String>) {
    match target.get("/v1/system").send().await {
        Ok(r) if r.status() == 200 => match r.json().await {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(format!("GET /v1/system: not JSON ({})", chain(&e)))),
        },
        Ok(r) => (None, Some(format!("GET /v1/system: HTTP {}", r.status().as_u16()))),
        Err(e) => (None, Some(format!("GET /v1/system: {}", chain(&e)))),
    }
}

/// Drawn only when stderr is a terminal: logs and pipes stay clean.
fn progress_bar(requests: Option<usize>, load: &Load) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let label = match load {
        Load::Concurrency(c) => format!("concurrency {c}"),
        Load::Rate(r) => format!("rate {r}/s"),
    };
    let (bar, template) = match requests {
        Some(n) => (ProgressBar::new(n as u64), "{msg} [{bar:30}] {pos}/{len} requests, {elapsed}"),
        None => (ProgressBar::new_spinner(), "{msg} {spinner} {pos} requests, {elapsed}"),
    };
    bar.set_draw_target(ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn write_outputs(args: &BenchArgs, report: &Report) -> Result<(), String> {
    let write = |path: &std::path::Path, text: String| {
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    if args.json {
        let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", table::render(report));
    }
    if let Some(path) = &args.markdown {
        write(path, markdown::render(report))?;
    }
    if let Some(path) = &args.svg {
        write(path, chart::svg(report))?;
    }
    if let Some(path) = &args.html {
        write(path, html::render(report))?;
    }
    Ok(())
}
