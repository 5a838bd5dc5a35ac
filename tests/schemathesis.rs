//! Schemathesis (PyPI) against this build's binary: requests generated from
//! `/openapi.json` (the OpenAI-style and the Ollama routes), bounded to 100
//! examples per operation, every check, zero failures — among them
//! `positive_data_acceptance`: every body the document allows is accepted.
//! Its venv is the Python suite's (.venv, from tests/python/requirements.txt).
//!
//! The document states the served model's own bounds as far as the model
//! has shown them (`api::doc_models`): its embedding width only after an
//! embedding, so one is asked for before schemathesis reads the document.
//! The hooks (`tests/python/st_hooks.py`) read Ollama's NDJSON streams, hold
//! generated valid bodies to the three rules JSON Schema cannot state
//! (each function name once, a Responses namespace's joined to it within
//! 64 characters, `tool_choice` naming one of `tools`, `max_tokens` and
//! `max_completion_tokens` equal: said in the document's words), and leave
//! out structured-output requests: the
//! simulated model never writes JSON, so each ends in a documented 500.

mod common;
use common::Daemon;
use std::process::Command;

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed: {status}");
}

#[tokio::test]
async fn schemathesis_finds_nothing() {
    let st = common::python_venv().join("bin/st");
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant?reply_tokens=8", "--api-key", "k"]);
    let shown = d.client().post(format!("{}/v1/embeddings", d.url)).bearer_auth("k");
    let shown = shown.json(&serde_json::json!({"model": "sim-instant", "input": "hi"})).send().await.unwrap();
    assert!(shown.status().is_success(), "{:?}", shown.text().await);
    let report = tempfile::tempdir().unwrap();
    run(Command::new(st)
        .args(["run", &format!("{}/openapi.json", d.url)])
        .args(["--header", "Authorization: Bearer k", "--max-examples", "100", "--workers", "1"])
        .args(["--seed", "1"])
        .env("PYTHONPATH", concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python"))
        .env("SCHEMATHESIS_HOOKS", "st_hooks")
        .current_dir(report.path()));
}
