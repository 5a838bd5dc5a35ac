//! Runs the Python suite (tests/python) with the official `openai` SDK
//! against this build's binary, so `cargo test --workspace` runs every test.
//! The suite's virtualenv (.venv, git-ignored) is created on first use from
//! tests/python/requirements.txt, and brought up to date when that file
//! changes (a copy of the one installed is kept in the venv).

use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed: {status}");
}

#[test]
fn openai_python_sdk_suite() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join(".venv");
    let pytest = venv.join("bin/pytest");
    let wanted = root.join("tests/python/requirements.txt");
    let installed = venv.join("requirements.installed.txt");
    if !pytest.exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    }
    if std::fs::read(&wanted).ok() != std::fs::read(&installed).ok() {
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check", "-r"])
            .arg(&wanted));
        std::fs::copy(&wanted, &installed).unwrap_or_else(|e| panic!("cannot copy {}: {e}", wanted.display()));
    }
    run(Command::new(pytest)
        .current_dir(root)
        .args(["-q", "tests/python"])
        .env("RKLLMD_BIN", env!("CARGO_BIN_EXE_rkllmd")));
}
