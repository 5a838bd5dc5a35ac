//! `rkllm_abort` from another thread, through `Model` as the daemon uses it.

mod common;

use common::{collect, load, run};
use rkllm_sys::{Abi, Event, RunRequest};
use std::time::{Duration, Instant};

/// Stated tolerance for a shared 2-core machine on top of one interval.
const SLACK: Duration = Duration::from_millis(150);

#[test]
fn abort_mid_decode_returns_within_one_token_interval_and_the_model_goes_on() {
    let scale = 0.5;
    let model = load(Abi::V1_3, &format!("sim:qwen2.5-1.5b?time_scale={scale}&reply_tokens=40"));
    let decode = Duration::from_secs_f64(rkllm_sim::profile("qwen2.5-1.5b").unwrap().decode_ms * scale / 1000.0);

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let control = model.submit(RunRequest::prompt("count slowly"), tx).expect("submitted");
    let mut tokens = 0;
    while tokens < 3 {
        match rx.blocking_recv().expect("events") {
            Event::Token(_) => tokens += 1,
            Event::Started { .. } => {}
            Event::Finished(f) => panic!("finished early: {f:?}"),
        }
    }
    // The abort comes from this thread; the run is on the model's thread.
    let aborted_at = Instant::now();
    control.abort();
    let rest = collect(&mut rx);
    let finish = &rest.finish;
    assert!(finish.aborted && finish.started);
    assert_eq!(finish.code, 0, "an aborted run returns 0");
    assert!(!finish.runtime_error);
    let perf = finish.perf.expect("FINISH with perf after an abort");
    let delivered = 3 + rest.tokens.len();
    assert_eq!(perf.generate_tokens as usize, delivered);
    assert!(delivered < 40, "the abort cut the reply short");
    let took = finish.at - aborted_at;
    assert!(took <= decode + SLACK, "rkllm_run returned {took:?} after the abort (interval {decode:?})");

    // The handle is fine: the next run on the same model finishes normally.
    let next = run(&model, RunRequest { max_new_tokens: Some(4), ..RunRequest::prompt("again") });
    assert!(!next.finish.aborted && !next.finish.is_error(), "{:?}", next.finish);
    assert_eq!(next.tokens.len(), 4);
    assert_eq!(next.perf().generate_tokens, 4);
}
