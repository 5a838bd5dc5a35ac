//! `rkllmd doctor`: what a person on a fresh board wants to know before
//! serving — the runtime library, the NPU driver and device nodes, CPU cores,
//! memory against the models, every registered model's file and chat template, clocks
//! and governors, and with `--smoke` one real token. Each line is OK, WARN or
//! FAIL with the fix; the exit status is 1 when serving would fail.
//!
//! Every system path (/sys, /proc, /dev, /etc/group, the default library
//! directories) is read under `--root`, so the checks are tested on fixture
//! trees of real boards' files (`tests/fixtures/boards/`).

mod batch;
mod checks;
mod smoke;
mod vision;

use crate::config::Config;
use crate::metrics::board::Board;
use checks::Plan;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Read /sys, /proc, /dev and the system library directories under DIR.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Also load the model and generate one token (takes as long as a start).
    #[arg(long)]
    pub smoke: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Check {
    level: Level,
    title: &'static str,
    detail: String,
    fix: Option<String>,
}

impl Check {
    pub fn ok(title: &'static str, detail: String) -> Check {
        Check { level: Level::Ok, title, detail, fix: None }
    }
    pub fn warn(title: &'static str, detail: String, fix: &str) -> Check {
        Check { level: Level::Warn, title, detail, fix: Some(fix.to_owned()) }
    }
    pub fn fail(title: &'static str, detail: String, fix: &str) -> Check {
        Check { level: Level::Fail, title, detail, fix: Some(fix.to_owned()) }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    checks: Vec<Check>,
}

impl Report {
    pub fn push(&mut self, check: Check) {
        self.checks.push(check);
    }

    fn count(&self, level: Level) -> usize {
        self.checks.iter().filter(|c| c.level == level).count()
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let level = match c.level {
                Level::Ok => "OK",
                Level::Warn => "WARN",
                Level::Fail => "FAIL",
            };
            // The runtime's captured lines stay on the report's one line.
            let detail = c.detail.trim().replace('\n', " | ");
            out.push_str(&format!("{level:<5} {:<16} {detail}\n", c.title));
            if let Some(fix) = &c.fix {
                out.push_str(&format!("{:<22} fix: {fix}\n", ""));
            }
        }
        let (fails, warns) = (self.count(Level::Fail), self.count(Level::Warn));
        out.push_str(&format!(
            "\n{fails} failed, {warns} warnings: {}\n",
            if fails > 0 { "serving would fail" } else { "rkllmd can serve" }
        ));
        out
    }
}

/// Runs every check, prints the report to stdout; 1 when serving would fail.
pub fn run(config: &Config, args: &DoctorArgs, runtime: &tokio::runtime::Runtime) -> ExitCode {
    let report = runtime.block_on(examine(config, args));
    print!(
        "rkllmd doctor {} (system files under {})\n\n{}",
        env!("CARGO_PKG_VERSION"),
        args.root.display(),
        report.render()
    );
    if report.count(Level::Fail) > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn examine(config: &Config, args: &DoctorArgs) -> Report {
    let board = Board::new(&args.root);
    let plan = Plan::new(config);
    let mut report = Report::default();
    let library = checks::library(&board, &plan, &mut report);
    checks::driver(&board, &plan, &mut report);
    checks::devices(&board, &plan, &mut report);
    checks::cpus(&board, &mut report);
    // Every registered model; memory is checked against the largest that may be loaded together.
    let mut sizes = Vec::new();
    match crate::app::model_specs(config, &Default::default()) {
        Ok(specs) => {
            for spec in &specs {
                sizes.extend(checks::model(&plan, spec, &mut report));
                checks::chat_template(&plan, spec, &args.root, &mut report);
                vision::encoder(&plan, spec, &mut report);
            }
        }
        Err(e) => report.push(Check::fail("models", e.to_string(), "give every model its own id")),
    }
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let together: u64 = sizes.iter().take(config.max_loaded_models).sum();
    checks::memory(&board, (!sizes.is_empty()).then_some(together), &mut report);
    checks::frequencies(&board, &mut report);
    // The smoke run loads the library itself, as `serve` does.
    drop(library);
    if args.smoke {
        smoke::run(config, &mut report).await;
    }
    report
}
