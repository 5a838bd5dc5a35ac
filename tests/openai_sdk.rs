//! Runs the Python suite (tests/python) with the official `openai` SDK
//! against this build's binary, so `cargo test --workspace` runs every test.
//! The suite's virtualenv comes from `common::python_venv`.

mod common;
use std::process::Command;

#[test]
fn openai_python_sdk_suite() {
    let venv = common::python_venv();
    let status = Command::new(venv.join("bin/pytest"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["-q", "tests/python"])
        .env("RKLLMD_BIN", env!("CARGO_BIN_EXE_rkllmd"))
        .status()
        .expect("run pytest");
    assert!(status.success(), "the Python suite failed: {status}");
}
