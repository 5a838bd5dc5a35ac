//! `rkllmd bench` command-line arguments.

use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Clone, Args, serde::Serialize)]
pub struct BenchArgs {
    /// Base URL of the server (without /v1).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Model id to request (default: the first id from GET /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// Bearer key sent as `Authorization: Bearer KEY`.
    #[arg(long, env = "RKLLMD_BENCH_API_KEY", hide_env_values = true)]
    #[serde(skip)]
    pub api_key: Option<String>,
    /// Approximate length of each synthetic prompt, in tokens (the server's count is reported).
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// `max_tokens` asked of the server per request.
    #[arg(long, default_value_t = 128)]
    pub output_tokens: u32,
    /// Prompts from a JSONL file: one `{"prompt": "…"}` or `{"messages": […]}` per line,
    /// optionally with `"max_tokens"`. Used in turn instead of synthetic prompts.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Turns per conversation: each turn resends the history with the server's own earlier
    /// replies plus a new user message (a conversation counts as one request of --requests);
    /// TTFT and the cached tokens the server reports are summarised by turn.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub turns: u32,
    /// Send this image (JPEG, PNG, WebP, GIF) with each request's first user message, as a base64
    /// data URL; the report adds the server's image figures (preprocessing, encoder, prefill).
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// Send `ignore_eos: true` (vLLM, llama.cpp) so replies run to `max_tokens`.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Fixed concurrency levels, run one after the other (comma-separated). With --turns each
    /// client plays whole conversations: `--conversations` is the same flag.
    #[arg(long, visible_alias = "conversations", value_delimiter = ',', conflicts_with = "rate")]
    pub concurrency: Vec<usize>,
    /// Poisson arrival rates in requests per second, run one after the other (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Measured requests per level (default 16 without --duration; with it, no count limit).
    #[arg(long)]
    pub requests: Option<usize>,
    /// Stop issuing requests after this many seconds per level (in-flight ones finish).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Warm-up requests before each level, not measured.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Seconds allowed for one request, from sending to the end of its stream.
    #[arg(long, default_value_t = 600.0)]
    pub timeout: f64,
    /// Seed for synthetic prompts and Poisson arrivals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Sample this local server process (/proc/PID): CPU time per streamed token and memory.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Print the report as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write a Markdown report (prompts, responses, per-request figures, averages) to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Write the charts (TTFT and ITL distributions, throughput by level) as one SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Write an HTML page with the charts and the summary table.
    #[arg(long)]
    pub html: Option<PathBuf>,
}
