//! rkllmd: an OpenAI-compatible server for LLMs on Rockchip NPUs.

use clap::{Parser, Subcommand};
use rkllmd::config::{Config, ConfigArgs, LogFormat};
use rkllmd::{bench, doctor, server};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rkllmd",
    version,
    about = "OpenAI-compatible server for LLMs on the NPU of Rockchip RK3588/RK3576 boards"
)]
struct Cli {
    // Without a subcommand rkllmd serves, so the top level takes serve's settings.
    #[command(flatten)]
    config: ConfigArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (the default).
    Serve(ConfigArgs),
    /// Check the board, runtime library and model; each line OK/WARN/FAIL with the fix.
    Doctor {
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        doctor: doctor::DoctorArgs,
    },
    /// Download a converted model (.rkllm, its tokenizer, template and vision encoder) from Hugging Face into --models-dir.
    Pull {
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        pull: rkllmd::pull::cli::PullArgs,
    },
    /// Write the tokenizer.json the model's prompts are counted with to stdout (for AIPerf, GuideLLM).
    Tokenizer(ConfigArgs),
    // Listed for `rkllmd --help`; `main` parses `rkllmd bench …` with `BenchCli`.
    #[command(about = BENCH_ABOUT)]
    Bench(Box<bench::BenchArgs>),
}

/// `rkllmd bench` on its own: a client of any server, it reads none of the
/// daemon's settings (neither its file nor its `RKLLMD_*` variables, which
/// clap would otherwise read and check for the top level's flags).
#[derive(Parser)]
#[command(name = "rkllmd bench", bin_name = "rkllmd bench", version, about = BENCH_ABOUT)]
struct BenchCli {
    #[command(flatten)]
    args: bench::BenchArgs,
}

const BENCH_ABOUT: &str = "Benchmark an OpenAI-compatible server with streamed chat completions (see docs/bench.md).";

fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|first| first == "bench") {
        // The first argument stands in for the program's name.
        let bench = BenchCli::parse_from(std::env::args_os().skip(1));
        init_logging(LogFormat::Text);
        return finish(on_runtime(client_runtime(), |rt| rt.block_on(bench::run(bench.args))));
    }
    let cli = Cli::parse();
    // Settings given after the subcommand come after (and win over) those before it.
    let mut layers = vec![&cli.config];
    if let Some(
        Command::Serve(config)
        | Command::Tokenizer(config)
        | Command::Doctor { config, .. }
        | Command::Pull { config, .. },
    ) = &cli.command
    {
        layers.push(config);
    }
    let config = match Config::assemble(&layers) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rkllmd: {e}");
            return ExitCode::from(2);
        }
    };
    // The registered models (ids given twice, a model named like an adapter)
    // are part of the configuration: `--print-config` fails where `serve`
    // would. `doctor` reports them as one of its checks instead; `pull`
    // may be filling an empty (or not yet made) models_dir.
    if !matches!(cli.command, Some(Command::Doctor { .. } | Command::Pull { .. })) {
        if let Err(e) = rkllmd::app::model_specs(&config, &Default::default()) {
            eprintln!("rkllmd: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    }
    if layers.iter().any(|l| l.print_config) {
        print!("{}", config.to_toml());
        return ExitCode::SUCCESS;
    }
    init_logging(config.log_format);
    let result = match cli.command {
        None | Some(Command::Serve(_)) => on_runtime(serving_runtime(), |rt| {
            let served = rt.block_on(server::serve(config));
            // Not waiting for the blocking pool: a request's preparation
            // still running there (a long prompt being tokenized) was
            // answered 503 at the shutdown's abort; its result is not wanted.
            rt.shutdown_background();
            served
        }),
        Some(Command::Doctor { doctor, .. }) => {
            return on_runtime(serving_runtime(), |rt| doctor::run(&config, &doctor, &rt)).unwrap_or_else(|code| code)
        }
        Some(Command::Tokenizer(_)) => {
            let written = rkllmd::tokenizer::tokenizer_json(&config).and_then(|json| {
                // Not print!: a reader that stops early (`| head`) is no panic.
                std::io::Write::write_all(&mut std::io::stdout(), json.as_bytes()).map_err(|e| e.to_string())
            });
            return match written {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rkllmd: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Pull { pull, .. }) => {
            on_runtime(client_runtime(), |rt| rt.block_on(rkllmd::pull::cli::run(config.models_dir.as_deref(), &pull)))
        }
        Some(Command::Bench(args)) => on_runtime(client_runtime(), |rt| rt.block_on(bench::run(*args))),
    };
    finish(result)
}

/// The exit status of a command's result (its error logged).
fn finish(result: Result<Result<(), String>, ExitCode>) -> ExitCode {
    let result = match result {
        Ok(result) => result,
        Err(code) => return code,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The daemon serves on one async thread. A streamed token then wakes
/// exactly one thread — the runtime thread hands it to the task that writes
/// the socket — where tokio's multi-thread scheduler wakes a second worker
/// per token as well (the woken worker, the last one searching for work,
/// wakes another to keep searching): a third context switch and about a
/// quarter more CPU per token (docs/performance.md, "Per-token cost").
/// Work that grows with a request's size — rendering and tokenizing its
/// prompt, loading a model — runs on the blocking pool instead
/// (`api::request::prepare`, the registry), so it never holds up a stream.
fn serving_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

/// `bench` is a client reading many streams at once: two workers.
fn client_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
}

fn on_runtime<T>(
    runtime: std::io::Result<tokio::runtime::Runtime>,
    run: impl FnOnce(tokio::runtime::Runtime) -> T,
) -> Result<T, ExitCode> {
    runtime.map(run).map_err(|e| {
        eprintln!("rkllmd: cannot start the async runtime: {e}");
        ExitCode::FAILURE
    })
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RKLLMD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let sink = rkllmd::log_sink::LogSink::stderr_duplicate();
    // Colours only on a terminal: journald and log files get plain text.
    let ansi = sink.is_terminal();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(sink).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
