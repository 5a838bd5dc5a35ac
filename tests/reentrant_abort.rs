//! `rkllm_abort` is never called from inside the result callback: the
//! manual allows an abort from another thread and says nothing of a
//! re-entrant one. The simulator's `reentrant_abort=deadlock` hangs on such
//! a call, and `abort_lag` makes the run go on after an abort, so the
//! callback sees the abort and re-issues it, as it does when an abort
//! landed before the runtime began the run.

mod common;
use common::*;
use std::time::Duration;

#[tokio::test]
async fn a_reissued_abort_comes_from_another_thread_and_the_next_request_runs() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let model = format!(
        "sim:qwen2-0.5b?reply_tokens=200&abort_lag=3&reentrant_abort=deadlock&record={}",
        record.path().display()
    );
    let d = Daemon::start(&["--backend", "sim", "--model", &model, "--model-id", "m"]);
    let mut body = chat("m", "a long story");
    body["stream"] = true.into();
    let mut r = d.client().post(format!("{}/v1/chat/completions", d.url)).json(&body).send().await.unwrap();
    while !String::from_utf8_lossy(&r.chunk().await.unwrap().expect("a token")).contains("\"content\"") {}
    // The client goes away: the run is aborted, goes on for 3 tokens, and
    // the callback sees the abort flag on the first of them.
    drop(r);
    let mut next = chat("m", "next");
    next["max_tokens"] = 4.into();
    let r = tokio::time::timeout(Duration::from_secs(15), d.post("/v1/chat/completions", next))
        .await
        .expect("the runtime thread is deadlocked");
    assert_eq!(r.status().as_u16(), 200);
    let aborts = sim_records(record.path(), "abort");
    assert!(aborts.len() >= 2, "the client's abort and the re-issued one: {aborts:?}");
    assert!(aborts.iter().all(|a| a["reentrant"] == false), "{aborts:?}");
}
