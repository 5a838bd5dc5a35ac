//! `batch = "auto"`, the default (`engine/slot_count.rs`): the slots a model
//! is opened with follow the board's free memory (a `telemetry_root` whose
//! `/proc/meminfo` the test writes) and the short-batch probe, and `/health`
//! says what was chosen and why.

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const MODEL: &str = "m";
/// The simulated Qwen2.5-1.5B's KV per slot at its 4096-token context: 4096 × 28 KiB.
const SLOT_MIB: u64 = 112;
/// What `auto` leaves the system on a board of at most 5 GiB.
const MARGIN_MIB: u64 = 512;

/// A board root whose `/proc/meminfo` says this much memory is free (of 4 GiB).
fn board(available_mib: u64) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("proc")).unwrap();
    let meminfo = format!(
        "MemTotal:        {} kB\nMemFree:          1000 kB\nMemAvailable:    {} kB\n",
        4096 * 1024,
        available_mib * 1024
    );
    std::fs::write(root.path().join("proc/meminfo"), meminfo).unwrap();
    root
}

/// A daemon on the simulator with `keys`, the default `batch`, the board's
/// memory, a record of the runtime calls and `extra` arguments.
fn start(keys: &str, root: &Path, record: &Path, extra: &[&str]) -> Daemon {
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0.05&reply_tokens=8&record={}{keys}", record.display());
    let root = root.to_str().unwrap();
    Daemon::start(&[&["--model", &spec, "--model-id", MODEL, "--telemetry-root", root][..], extra].concat())
}

async fn batch_of(d: &Daemon) -> Value {
    let (status, health) = d.get_json("/health").await;
    assert_eq!(status, 200, "{health}");
    health["runtime"]["batch"].clone()
}

/// The `n_batch` of each `rkllm_init`, in order (the probe's handle included).
fn inits(record: &Path) -> Vec<Value> {
    let calls = common::sim_calls(record).into_iter().filter(|r| r["call"] == "init");
    calls.map(|r| r["extend_param"]["n_batch"].clone()).collect()
}

/// The runs, the probe's included.
fn runs(record: &Path) -> usize {
    common::sim_calls(record).iter().filter(|r| r["call"] == "run").count()
}

async fn answers(d: &Daemon) {
    let r =
        d.post("/v1/chat/completions", json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn auto_keeps_the_slots_memory_holds_where_the_runtime_takes_short_batches() {
    let (root, record) = (board(16 * 1024), tempfile::NamedTempFile::new().unwrap());
    let d = start("&short_batch=accept", root.path(), record.path(), &[]);
    let batch = batch_of(&d).await;
    assert_eq!((&batch["slots"], &batch["chosen_by"]), (&json!(8), &json!("auto")), "{batch}");
    let reason = batch["reason"].as_str().unwrap();
    assert!(reason.contains("8 slot(s)") && reason.contains("takes short batches"), "{reason}");
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["short_batches"], "accepted", "{health}");
    assert_eq!(inits(record.path()), [json!(8)], "opened once, with 8 slots");
    assert!(d.log().contains("batch_chosen_by=\"auto\"") || d.log().contains("batch_chosen_by=auto"), "{}", d.log());
    answers(&d).await;
}

#[tokio::test]
async fn auto_reopens_with_one_slot_where_the_runtime_refuses_short_batches() {
    // The simulator's default refuses a run with slots left without input.
    let (root, record) = (board(16 * 1024), tempfile::NamedTempFile::new().unwrap());
    let d = start("", root.path(), record.path(), &[]);
    let batch = batch_of(&d).await;
    assert_eq!((&batch["slots"], &batch["chosen_by"]), (&json!(1), &json!("auto")), "{batch}");
    assert!(batch["reason"].as_str().unwrap().contains("found `refused`"), "{batch}");
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"].get("short_batches"), None, "one slot: no short batches to speak of: {health}");
    // At 3 ms a step (a twentieth of the model's pace) the timing runs' figures would be the machine's.
    let reason = batch["reason"].as_str().unwrap();
    assert!(reason.contains("too fast to tell what fillers cost"), "{reason}");
    assert_eq!(inits(record.path()), [json!(8), json!(1)], "probed and timed with 8 slots, then opened with 1");
    assert_eq!(d.log().matches("the model again with 1 slot").count(), 1, "one WARN: {}", d.log());
    assert_eq!(d.metric("rkllmd_batch_short_off_total").await, Some(1.0));
    answers(&d).await;
    // What the other tests read of the record leaves the probing out (tests/common `sim_records`).
    assert_eq!(runs(record.path()), 4, "the probe, the two timing runs and the request");
    assert_eq!(common::sim_records(record.path(), "run").len(), 1, "the request's");
    assert_eq!(common::sim_records(record.path(), "init").len(), 1);

    // `--batch 1` stays: opened once, nothing probed.
    let record = tempfile::NamedTempFile::new().unwrap();
    let one = start("&short_batch=accept", root.path(), record.path(), &["--batch", "1"]);
    let config = batch_of(&one).await;
    assert_eq!((&config["slots"], &config["chosen_by"]), (&json!(1), &json!("config")), "{config}");
    assert_eq!(inits(record.path()), [json!(1)]);
    assert_eq!(runs(record.path()), 0, "no probe");
}

#[tokio::test]
async fn auto_keeps_the_slots_with_fillers_where_the_runtime_says_they_cost_little() {
    // Half the model's pace: 30 ms a step, measurable. With the simulator's default cost of a
    // batch step, a lone request beside 7 fillers decodes at 1 / 2.05 of one slot's speed.
    let root = board(16 * 1024);
    let costly = Daemon::start(&[
        "--model",
        "sim:qwen2.5-1.5b?time_scale=0.5&reply_tokens=12",
        "--model-id",
        MODEL,
        "--telemetry-root",
        root.path().to_str().unwrap(),
    ]);
    let batch = batch_of(&costly).await;
    let reason = batch["reason"].as_str().unwrap();
    assert_eq!(batch["slots"], 1, "{batch}");
    assert!(reason.contains("decodes at 0.") && reason.contains("below 0.9×"), "{reason}");
    drop(costly);

    // A runtime that refuses short batches, but whose batch step costs what a single one does.
    let record = tempfile::NamedTempFile::new().unwrap();
    let spec =
        format!("sim:qwen2.5-1.5b?time_scale=0.5&reply_tokens=12&slot_cost=0&record={}", record.path().display());
    let d = Daemon::start(&["--model", &spec, "--model-id", MODEL, "--telemetry-root", root.path().to_str().unwrap()]);
    let batch = batch_of(&d).await;
    assert_eq!((&batch["slots"], &batch["chosen_by"]), (&json!(8), &json!("auto")), "{batch}");
    let reason = batch["reason"].as_str().unwrap();
    assert!(reason.contains("found `refused`") && reason.contains("the slots are kept, with fillers"), "{reason}");
    let (_, health) = d.get_json("/health").await;
    assert_eq!(health["runtime"]["short_batches"], "refused", "{health}");
    assert_eq!(inits(record.path()), [json!(8), json!(1), json!(8)], "probed and timed, timed alone, opened again");
    // The two timing runs, each read for 6 tokens: every slot given input beside fillers, then one slot.
    let timing: Vec<_> = common::sim_calls(record.path())
        .into_iter()
        .filter(|r| r["call"] == "run" && r["max_new_tokens"] == 6)
        .map(|r| r["inputs"].as_array().map_or(1, Vec::len))
        .collect();
    assert_eq!(timing, [8, 1]);
    // A lone request is served beside 7 one-id fillers; what tests read of the record is the served handle's.
    answers(&d).await;
    assert_eq!(common::sim_records(record.path(), "init").len(), 1);
    let runs = common::sim_records(record.path(), "run");
    let ids = |input: &Value| input["token_ids"].as_array().map_or(0, Vec::len);
    let request: Vec<usize> = runs.last().unwrap()["inputs"].as_array().unwrap().iter().map(ids).collect();
    assert_eq!((request.len(), request[0] > 1, &request[1..]), (8, true, &[1; 7][..]), "{runs:?}");
}

#[tokio::test]
async fn less_free_memory_opens_fewer_slots() {
    // Room for three slots' KV after the margin.
    let (root, record) = (board(MARGIN_MIB + 3 * SLOT_MIB + 10), tempfile::NamedTempFile::new().unwrap());
    let d = start("&short_batch=accept", root.path(), record.path(), &[]);
    let three = batch_of(&d).await;
    assert_eq!(three["slots"], 3, "{three}");
    assert!(three["reason"].as_str().unwrap().starts_with("3 slot(s): 346 MiB free"), "{three}");
    assert_eq!(inits(record.path()), [json!(3)]);
    drop(d);

    // Room for less than two: one slot, opened once, no probe.
    let (root, record) = (board(MARGIN_MIB + SLOT_MIB + 10), tempfile::NamedTempFile::new().unwrap());
    let d = start("&short_batch=accept", root.path(), record.path(), &[]);
    let one = batch_of(&d).await;
    assert_eq!((&one["slots"], &one["chosen_by"]), (&json!(1), &json!("auto")), "{one}");
    assert!(one["reason"].as_str().unwrap().starts_with("1 slot(s)"), "{one}");
    assert_eq!(inits(record.path()), [json!(1)]);
    assert_eq!(runs(record.path()), 0, "no probe");

    // A longer context takes more memory a slot: the same board holds one of 8192 tokens.
    let (root, record) = (board(MARGIN_MIB + 3 * SLOT_MIB + 10), tempfile::NamedTempFile::new().unwrap());
    let d = start("&short_batch=accept&context_limit=8192", root.path(), record.path(), &[]);
    assert_eq!(batch_of(&d).await["slots"], 1);
    assert_eq!(inits(record.path()), [json!(3), json!(1)], "loaded again for its own context, with one slot");
    answers(&d).await;
}

#[tokio::test]
async fn a_probe_that_hangs_is_aborted_after_its_bound_and_the_model_serves_with_one_slot() {
    // The probe's run hangs after its prefill for 1.5 s, aborts ignored
    // meanwhile; its bound is the first-token allowance (1 s here), then
    // the abort has 1 s to be honoured.
    let (root, record) = (board(16 * 1024), tempfile::NamedTempFile::new().unwrap());
    let keys = "&short_batch=accept&hang_after=0&hang_ms=1500&hang_runs=1";
    let d = start(keys, root.path(), record.path(), &["--first-token-timeout-secs", "1"]);
    let batch = batch_of(&d).await;
    assert_eq!(batch["slots"], 1, "{batch}");
    assert!(batch["reason"].as_str().unwrap().contains("found `timed_out`"), "{batch}");
    assert_eq!(d.metric("rkllmd_batch_short_off_total").await, Some(1.0));
    assert!(common::sim_calls(record.path()).iter().any(|r| r["call"] == "abort"), "the probe was aborted");
    assert_eq!(inits(record.path()), [json!(8), json!(1)]);
    // (The new handle's first run would hang too: `hang_runs` counts per handle.)
    assert_eq!(d.get_json("/health").await.1["status"], "ok");
}

#[test]
fn a_runtime_that_does_not_come_back_from_the_probe_fails_the_start_loudly() {
    let (root, record) = (board(16 * 1024), tempfile::NamedTempFile::new().unwrap());
    let spec =
        format!("sim:qwen2.5-1.5b?time_scale=0.05&short_batch=accept&hang_after=0&record={}", record.path().display());
    let out = common::run_to_exit(
        Command::new(env!("CARGO_BIN_EXE_rkllmd"))
            .args(["--port", "0", "--model", &spec, "--first-token-timeout-secs", "1"])
            .args(["--telemetry-root", root.path().to_str().unwrap()])
            .env_remove("RKLLM_LIB"),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("did not come back from the short-batch probe"), "{stderr}");
}

#[tokio::test]
async fn a_model_whose_load_wedged_in_the_probe_is_refused_until_a_restart_and_counted() {
    // Loaded on demand (a `[[models]]` table); the probe's run hangs for
    // good, so the load fails 1 s past the 1 s bound, its handle lost.
    let (root, record) = (board(16 * 1024), tempfile::NamedTempFile::new().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rkllmd.toml");
    let spec = format!(
        "sim:qwen2.5-1.5b?time_scale=0.05&reply_tokens=8&short_batch=accept&hang_after=0&record={}",
        record.path().display()
    );
    std::fs::write(&config, format!("[[models]]\nid = \"{MODEL}\"\npath = \"{spec}\"\n")).unwrap();
    let (config, root) = (config.to_str().unwrap(), root.path().to_str().unwrap());
    let d = Daemon::start(&["--config", config, "--telemetry-root", root, "--first-token-timeout-secs", "1"]);
    for turn in 0..3 {
        let r = d
            .post("/v1/chat/completions", json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}))
            .await;
        assert_eq!(r.status(), 503, "turn {turn}");
        assert_eq!(r.headers().get("retry-after"), None, "no retry helps until a restart");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "model_wedged", "turn {turn}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("until rkllmd restarts") && message.contains("short-batch probe"), "{message}");
    }
    assert_eq!(inits(record.path()), [json!(8)], "loaded once: the later requests were refused, not loaded again");
    assert_eq!(d.metric(&format!("rkllmd_model_loads_wedged_total{{model=\"{MODEL}\"}}")).await, Some(1.0));
    assert_eq!(d.get_json("/health").await.0, 200, "the daemon serves on");
}

#[tokio::test]
async fn with_no_first_token_base_the_probe_keeps_a_bound_of_its_own() {
    // A probe's run of 100 ms (2 s of extra prefill at time_scale 0.05):
    // the first-token allowance with its base at 0 is 4 ms (4 s per KiB of
    // its one byte), which would time it out; the probe takes 120 s instead.
    let (root, record) = (board(16 * 1024), tempfile::NamedTempFile::new().unwrap());
    let d = start(
        "&short_batch=accept&prefill_extra_ms=2000",
        root.path(),
        record.path(),
        &["--first-token-timeout-secs", "0"],
    );
    let batch = batch_of(&d).await;
    assert_eq!(batch["slots"], 8, "{batch}");
    assert!(batch["reason"].as_str().unwrap().contains("takes short batches"), "{batch}");
    assert_eq!(d.metric("rkllmd_batch_short_off_total").await.unwrap_or(0.0), 0.0);
}

/// `rkllmd doctor`'s `batch` line on the board of `root`.
fn doctor_batch(spec: &str, root: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--model", spec, "--model-id", MODEL, "doctor", "--root", root.to_str().unwrap()])
        .env_remove("RKLLM_LIB")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = report.lines().find(|l| l.starts_with("OK    batch"));
    line.unwrap_or_else(|| panic!("no `OK batch` line in:\n{report}")).to_owned()
}

#[tokio::test]
async fn doctor_says_what_auto_chooses_as_health_says_it() {
    let (root, record) = (board(MARGIN_MIB + 3 * SLOT_MIB + 10), tempfile::NamedTempFile::new().unwrap());
    let spec = "sim:qwen2.5-1.5b?time_scale=0.05&short_batch=accept";
    let line = doctor_batch(spec, root.path());
    assert!(line.contains(&format!("{MODEL}: auto: 3 slot(s): 346 MiB free")), "{line}");
    assert!(line.contains("only where the runtime takes short batches"), "{line}");
    // Served on the same board: the reason /health gives starts with the doctor's.
    let d = start("&short_batch=accept", root.path(), record.path(), &[]);
    let batch = batch_of(&d).await;
    assert_eq!(batch["slots"], 3, "{batch}");
    let memory = line.split(": auto: ").nth(1).unwrap().split("; the 3 are kept").next().unwrap();
    assert!(batch["reason"].as_str().unwrap().starts_with(memory), "doctor: {memory}\n/health: {batch}");
    // Too little memory: 1 slot, and why.
    let small = board(MARGIN_MIB + SLOT_MIB);
    let line = doctor_batch(spec, small.path());
    assert!(line.contains("auto: 1 slot(s)") && !line.contains("short batches"), "{line}");
}
