//! rkllmd: an OpenAI-compatible server for LLMs on Rockchip NPUs.

use clap::{Parser, Subcommand};
use rkllmd::config::{Config, LogFormat, Overrides};
use rkllmd::{bench, doctor, server};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rkllmd",
    version,
    about = "OpenAI-compatible server for LLMs on the NPU of Rockchip RK3588/RK3576 boards"
)]
struct Cli {
    /// TOML config file (its settings are overridden by RKLLMD_* variables and flags).
    #[arg(long, global = true, env = "RKLLMD_CONFIG")]
    config: Option<PathBuf>,
    /// Print the effective configuration and exit.
    #[arg(long, global = true)]
    print_config: bool,
    #[command(flatten)]
    settings: Overrides,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (the default).
    Serve,
    /// Check the board, runtime library and model; each line OK/WARN/FAIL with the fix.
    Doctor(doctor::DoctorArgs),
    /// Benchmark an OpenAI-compatible server with streamed chat completions (see docs/bench.md).
    Bench(Box<bench::BenchArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::assemble(cli.config.as_deref(), cli.settings) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rkllmd: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.print_config {
        print!("{}", config.to_toml());
        return ExitCode::SUCCESS;
    }
    init_logging(config.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rkllmd: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => runtime.block_on(server::serve(config)),
        Command::Doctor(args) => return doctor::run(&config, &args, &runtime),
        Command::Bench(args) => runtime.block_on(bench::run(*args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RKLLMD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: journald and log files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
