//! Prompt-cache files through the binary: made once at the first load,
//! loaded again after a restart (no second saving run), a prompt that starts
//! with the prefix skipping its prefill from the first request on (timings,
//! usage and the request log say so), a changed prefix making the file again,
//! and a runtime that does not skip what it should caught loudly.

mod common;

use common::{assert_config_errors, sim_records, Daemon};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const SYSTEM: &str = "You are a patient teacher. You answer every question in short, clear sentences, \
    you give one example for each idea, and you never use words a child would not know.";

/// The ChatML system turn the daemon renders for `system` (the sim model's template).
fn prefix(system: &str) -> String {
    format!("<|im_start|>system\n{system}<|im_end|>\n")
}

fn tokens(text: &str) -> u64 {
    rkllm_sim::tokenize(text).len() as u64
}

/// The runs that saved a prompt cache.
fn saving_runs(record: &Path) -> Vec<Value> {
    sim_records(record, "run").into_iter().filter(|r| r["prompt_cache"]["save_prompt_cache"] == 1).collect()
}

struct Setup {
    _dir: tempfile::TempDir,
    record: PathBuf,
    cache: PathBuf,
    prefix_file: PathBuf,
}

impl Setup {
    fn new(prefix_text: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let prefix_file = dir.path().join("prefix.txt");
        std::fs::write(&prefix_file, prefix_text).unwrap();
        Setup {
            record: dir.path().join("record.jsonl"),
            cache: dir.path().join("system.cache"),
            prefix_file,
            _dir: dir,
        }
    }

    fn start(&self) -> Daemon {
        let model = format!("sim:qwen2.5-1.5b?time_scale=0.1&reply_tokens=4&record={}", self.record.display());
        Daemon::start(&[
            "--model",
            &model,
            "--model-id",
            "m",
            "--prompt-cache",
            self.cache.to_str().unwrap(),
            "--prompt-cache-prefix-file",
            self.prefix_file.to_str().unwrap(),
        ])
    }
}

/// (usage, timings) of one chat request with this system prompt.
async fn ask(d: &Daemon, system: &str, question: &str) -> (Value, Value) {
    let body = json!({"model": "m", "max_tokens": 4, "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": question}]});
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    (body["usage"].clone(), body["timings"].clone())
}

#[tokio::test]
async fn the_cache_is_made_once_and_spares_the_prefix_also_right_after_a_restart() {
    let setup = Setup::new(&prefix(SYSTEM));
    let prefix_tokens = tokens(&prefix(SYSTEM));
    let d = setup.start();
    let saves = saving_runs(&setup.record);
    assert_eq!(sim_records(&setup.record, "run").len(), 1, "one run at load makes the file");
    assert_eq!(saves.len(), 1);
    assert_eq!(saves[0]["prompt"].as_str(), Some(prefix(SYSTEM).as_str()));
    assert!(setup.cache.is_file() && Path::new(&format!("{}.json", setup.cache.display())).is_file());
    assert_eq!(sim_records(&setup.record, "load_prompt_cache").len(), 1);
    assert!(d.log().contains("there is no file yet"), "{}", d.log());
    let _ = d.terminate();

    // After a restart: the file is loaded, not made again, and the very first
    // request does not prefill the prefix.
    let d = setup.start();
    assert_eq!(sim_records(&setup.record, "run").len(), 1, "no second saving run");
    assert_eq!(sim_records(&setup.record, "load_prompt_cache").len(), 2);
    assert!(d.log().contains("prompt cache file reused"), "{}", d.log());
    let (usage, timings) = ask(&d, SYSTEM, "Why is the sky blue?").await;
    let prompt_tokens = usage["prompt_tokens"].as_u64().unwrap();
    assert_eq!(timings["prompt_cache_n"].as_u64(), Some(prefix_tokens), "{timings}");
    assert_eq!(timings["prompt_n"].as_u64(), Some(prompt_tokens - prefix_tokens), "only the rest is prefilled");
    assert_eq!(timings["runtime"]["prefill_tokens"].as_u64(), Some(prompt_tokens - prefix_tokens));
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"].as_u64(), Some(prefix_tokens));
    assert_eq!(timings["cache_n"].as_u64(), Some(prefix_tokens));

    // Another system prompt does not start with the prefix: a full prefill.
    let (usage, timings) = ask(&d, "Be brief.", "Why is the sky blue?").await;
    assert_eq!(timings["prompt_cache_n"].as_u64(), Some(0));
    assert_eq!(timings["prompt_n"], usage["prompt_tokens"]);
    assert_eq!(d.metric("rkllmd_prompt_cache_mismatch_total").await, Some(0.0), "as the prompt cache expects");
    let _ = d.terminate();

    // A changed prefix: the old file is not reused but made again.
    std::fs::write(&setup.prefix_file, prefix("Be brief.")).unwrap();
    let d = setup.start();
    assert!(d.log().contains("the prefix changed since it was made"), "{}", d.log());
    let saves = saving_runs(&setup.record);
    assert_eq!(saves.len(), 2);
    assert_eq!(saves[1]["prompt"].as_str(), Some(prefix("Be brief.").as_str()));
    let (_, timings) = ask(&d, "Be brief.", "Why is the sky blue?").await;
    assert_eq!(timings["prompt_cache_n"].as_u64(), Some(tokens(&prefix("Be brief."))));
}

#[tokio::test]
async fn a_prefix_the_runtime_does_not_skip_is_a_warning_and_counted() {
    // The prompt starts with this text, but "teach" is tokenized otherwise
    // inside "teacher": the runtime finds no match and prefills everything.
    let cut = &prefix(SYSTEM)[..prefix(SYSTEM).find("teacher").unwrap() + "teach".len()];
    let setup = Setup::new(cut);
    let d = setup.start();
    let (usage, timings) = ask(&d, SYSTEM, "Why is the sky blue?").await;
    assert_eq!(timings["prompt_cache_n"].as_u64(), Some(0), "the runtime's count, not the expected one");
    assert_eq!(timings["prompt_n"], usage["prompt_tokens"]);
    assert!(d.wait_metric("rkllmd_prompt_cache_mismatch_total", |n| n == 1.0).await, "the mismatch is counted");
}

#[test]
fn a_prompt_cache_without_a_prefix_or_with_batching_is_refused() {
    assert_config_errors(&[
        &["--prompt-cache", "/tmp/x"][..],
        &["--prompt-cache-prefix", "p"],
        &["--prompt-cache", "/tmp/x", "--prompt-cache-prefix", "p", "--batch", "2"],
        &["--prompt-cache", "/tmp/x", "--prompt-cache-prefix", "p", "--lora", "a=/x"],
    ]);
}

/// Without a tokenizer the daemon could neither tell whether a run used the
/// file nor count the prompt honestly: the model does not load.
#[test]
fn a_prompt_cache_without_a_tokenizer_fails_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let lib = common::sim_cdylib();
    let cache = dir.path().join("system.cache");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--host", "127.0.0.1", "--port", "0", "--backend", "rkllm", "--lib", lib.to_str().unwrap()])
        .args(["--model", "sim:instant", "--template", "chatml", "--prompt-cache", cache.to_str().unwrap()])
        .args(["--prompt-cache-prefix", "You are terse."])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("a prompt cache needs the model's chat template rendered by the daemon and its tokenizer.json"),
        "{stderr}"
    );
    assert!(!cache.exists(), "no file was made");
}
