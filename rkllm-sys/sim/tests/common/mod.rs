//! Helpers shared by the test binaries: drive the simulator the way the
//! daemon does, through `rkllm_sys::Model`, and read its record file.
#![allow(dead_code)] // each test binary uses a different subset

use rkllm_sys::{Abi, Event, Finish, InitConfig, Model, RunRequest, Runtime, Token};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub fn sim(abi: Abi) -> Arc<Runtime> {
    Arc::new(rkllm_sim::runtime(abi))
}

pub fn load(abi: Abi, model_path: &str) -> Model {
    Model::load(sim(abi), InitConfig::new(model_path)).expect("model loads")
}

/// Everything one run produced.
#[derive(Debug)]
pub struct Outcome {
    pub started: Instant,
    pub tokens: Vec<Token>,
    pub finish: Finish,
}

impl Outcome {
    /// The reply as the daemon would assemble it.
    pub fn text(&self) -> String {
        self.tokens.iter().map(|t| t.text.as_str()).collect::<String>() + &self.finish.tail
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.tokens.iter().flat_map(|t| t.bytes.iter().copied()).collect()
    }

    pub fn perf(&self) -> rkllm_sys::Perf {
        self.finish.perf.expect("FINISH delivered perf")
    }

    /// Time between consecutive token callbacks.
    pub fn gaps(&self) -> Vec<Duration> {
        self.tokens.windows(2).map(|w| w[1].at - w[0].at).collect()
    }
}

/// Collects a run's events up to its `Finished`.
pub fn collect(events: &mut mpsc::UnboundedReceiver<Event>) -> Outcome {
    let mut started = None;
    let mut tokens = Vec::new();
    loop {
        match events.blocking_recv().expect("the run ends with Finished") {
            Event::Started { at, .. } => started = Some(at),
            Event::Token(t) => tokens.push(t),
            Event::Finished(finish) => {
                return Outcome { started: started.unwrap_or(finish.at), tokens, finish };
            }
        }
    }
}

pub fn run(model: &Model, req: RunRequest) -> Outcome {
    let (tx, mut rx) = mpsc::unbounded_channel();
    model.submit(req, tx).expect("run submitted");
    collect(&mut rx)
}

pub fn prompt(model: &Model, text: &str) -> Outcome {
    run(model, RunRequest::prompt(text))
}

/// A fresh path under the target's test scratch directory.
pub fn temp_path(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sim-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The lines of a record file, parsed.
pub fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("record file exists")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each record line is JSON"))
        .collect()
}

/// The record lines of one call kind.
pub fn calls(path: &Path, call: &str) -> Vec<Value> {
    records(path).into_iter().filter(|r| r["call"] == call).collect()
}

/// Tokens the built-in template adds to a first prompt (system + prefix + postfix).
pub fn first_turn_tokens(prompt: &str) -> usize {
    let turn = format!("{}{prompt}{}", rkllm_sim::DEFAULT_PREFIX, rkllm_sim::DEFAULT_POSTFIX);
    rkllm_sim::tokenize(rkllm_sim::DEFAULT_SYSTEM).len() + rkllm_sim::tokenize(&turn).len()
}

pub fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}
