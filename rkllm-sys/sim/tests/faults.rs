//! Failures a board produces, injected: they must reach the daemon the way
//! the vendor runtime reports them.

mod common;

use common::{calls, load, prompt, temp_path};
use rkllm_sys::{Abi, InitConfig, Model, ModelError};

fn init_error(model_path: &str) -> (i32, String) {
    match Model::load(common::sim(Abi::V1_3), InitConfig::new(model_path)) {
        Err(ModelError::Init { code, log }) => (code, log),
        Err(other) => panic!("expected an init error, got {other}"),
        Ok(_) => panic!("{model_path} initialised"),
    }
}

#[test]
fn fail_init_prints_a_realistic_line() {
    let (code, log) = init_error("sim:instant?fail_init=1");
    assert_eq!(code, -1);
    assert!(log.contains("I rkllm: rkllm-runtime version: 1.3.0 (simulated)"), "{log}");
    assert!(log.contains("E rkllm: failed to malloc npu memory!"), "{log}");
    let (_, log) = init_error("sim:instant?fail_init=driver");
    assert!(log.contains("Your rknpu driver version is too low, please upgrade to 0.9.7"), "{log}");
}

#[test]
fn a_missing_model_file_is_an_invalid_model() {
    let (code, log) = init_error("/nonexistent/qwen.rkllm");
    assert_eq!(code, -1);
    assert!(log.contains("E rkllm: failed to open model file: /nonexistent/qwen.rkllm"), "{log}");
    assert!(log.contains("E rkllm: invalid rkllm model!"), "{log}");
}

#[test]
fn unknown_keys_profiles_and_bad_values_are_named() {
    assert!(init_error("sim:instant?colour=red").1.contains("unknown key \"colour\""));
    assert!(init_error("sim:gpt-9").1.contains("unknown profile \"gpt-9\""));
    assert!(init_error("sim:instant?reply_tokens=many").1.contains("reply_tokens"));
    let missing = temp_path("missing-script.json");
    assert!(init_error(&format!("sim:instant?script={}", missing.display())).1.contains("cannot read script"));
}

#[test]
fn error_after_gives_n_tokens_then_a_runtime_error() {
    let model = load(Abi::V1_3, "sim:instant?error_after=3&reply_tokens=10");
    let out = prompt(&model, "fail soon");
    assert_eq!(out.tokens.len(), 3);
    assert!(out.finish.runtime_error, "ERROR callback seen");
    assert_ne!(out.finish.code, 0, "rkllm_run failed");
    assert!(out.finish.is_error());
    assert!(out.finish.perf.is_none(), "no FINISH after ERROR");
}

#[test]
fn a_prompt_beyond_max_context_is_an_error() {
    let record = temp_path("record.jsonl");
    let cfg = InitConfig { max_context_len: 64, ..InitConfig::new(format!("sim:instant?record={}", record.display())) };
    let model = Model::load(common::sim(Abi::V1_3), cfg).expect("init");
    let long = "this prompt is long enough to overflow ".repeat(8);
    assert!(common::first_turn_tokens(&long) > 64);
    let out = prompt(&model, &long);
    assert!(out.tokens.is_empty());
    assert!(out.finish.runtime_error && out.finish.code == -1, "{:?}", out.finish);
    assert_eq!(calls(&record, "run_end")[0]["end"], "error");
    // Fits: the reply is cut where the context is full.
    let out = prompt(&model, "ok");
    assert!(!out.finish.is_error());
    assert_eq!(out.perf().prefill_tokens as usize + out.tokens.len(), 64);
}

#[test]
fn an_idle_runtime_thread_answers_pings_and_reports_its_last_run() {
    let model = load(Abi::V1_3, "sim:instant?reply_tokens=5");
    assert!(matches!(model.ping().blocking_recv(), Ok(Ok(()))));
    let out = prompt(&model, "count me");
    let activity = model.activity();
    assert!(!activity.running());
    assert_eq!(activity.tokens, out.tokens.len() as u64);
    assert_eq!(activity.prompt_bytes, "count me".len());
    assert!(matches!(model.ping().blocking_recv(), Ok(Ok(()))));
}

#[test]
fn hang_after_wedges_the_run_the_thread_stops_answering() {
    let model = load(Abi::V1_3, "sim:instant?hang_after=2&reply_tokens=10");
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let control = model.submit(rkllm_sys::RunRequest::prompt("hang"), tx).expect("submitted");
    let mut tokens = 0;
    while tokens < 2 {
        match events.blocking_recv().expect("events until the hang") {
            rkllm_sys::Event::Token(_) => tokens += 1,
            rkllm_sys::Event::Started { .. } => {}
            rkllm_sys::Event::Finished(f) => panic!("the run finished: {f:?}"),
        }
    }
    control.abort();
    let mut ping = model.ping();
    // The hang shows as time without progress; wait (bounded) until it is visible.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while model.activity().since_progress < std::time::Duration::from_millis(300) {
        assert!(std::time::Instant::now() < deadline, "progress kept being stamped");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let activity = model.activity();
    assert!(activity.running(), "still inside rkllm_run");
    assert_eq!(activity.tokens, 2);
    assert!(events.try_recv().is_err(), "no callbacks or Finished after the hang, even after an abort");
    assert!(ping.try_recv().is_err(), "the stuck thread does not answer");
    // Dropping the model would join the wedged thread forever.
    std::mem::forget(model);
}
