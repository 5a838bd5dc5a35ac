//! `rkllmd doctor` on fixture trees of boards (`tests/fixtures/boards/`),
//! through the real binary: the report's lines and the exit status.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn board(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/boards").join(name)
}

struct Run {
    code: i32,
    out: String,
}

impl Run {
    /// The report line for `title` at `level` (e.g. "OK", "NPU driver").
    fn line(&self, level: &str, title: &str) -> &str {
        self.out
            .lines()
            .find(|l| l.starts_with(&format!("{level:<5} {title}")))
            .unwrap_or_else(|| panic!("no `{level} {title}` line in:\n{}", self.out))
    }

    /// The fix printed under the `level title` line.
    fn fix(&self, level: &str, title: &str) -> &str {
        let line = self.line(level, title);
        let mut lines = self.out.lines().skip_while(|l| *l != line).skip(1);
        lines.next().and_then(|l| l.trim().strip_prefix("fix: ")).unwrap_or_else(|| panic!("no fix for {line}"))
    }
}

fn doctor(settings: &[&str], doctor_args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkllmd"));
    cmd.args(settings).arg("doctor").args(doctor_args).env_remove("RKLLM_LIB").env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().unwrap();
    let out = String::from_utf8(output.stdout).unwrap();
    Run { code: output.status.code().unwrap_or(-1), out }
}

fn model_file(dir: &Path, name: &str, bytes: usize) -> String {
    let path = dir.join(name);
    std::fs::write(&path, vec![7u8; bytes]).unwrap();
    path.display().to_string()
}

#[test]
fn a_healthy_rk3588_with_a_loadable_runtime_and_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_file(dir.path(), "qwen.rkllm", 4096);
    let lib = common::sim_cdylib();
    let root = board("rk3588-drm");
    let run = doctor(
        &["--backend", "rkllm", "--lib", lib.to_str().unwrap(), "--model", &model],
        &["--root", root.to_str().unwrap()],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.out);
    assert!(run.line("OK", "runtime library").ends_with("runtime 1.3.0, ABI 1.3"), "{}", run.out);
    assert!(run.line("OK", "NPU driver").contains("rknpu 0.9.8 (/sys/module/rknpu/version)"));
    // renderD129 is the NPU by its uevent; renderD128 (the GPU) is not checked.
    let device = run.line("OK", "NPU device");
    assert!(device.contains("dev/dri/renderD129 (group") && device.contains("this user can open it"), "{device}");
    assert!(!run.out.contains("renderD128"), "{}", run.out);
    assert!(run.line("OK", "CPU cores").contains("8 online"));
    assert!(run.line("OK", "model").contains("qwen.rkllm: 4096 bytes, readable"), "not 0.00 GiB: {}", run.out);
    assert!(run.line("OK", "memory").contains("14.50 GiB available of 15.43 GiB"), "{}", run.out);
    assert!(run.line("OK", "NPU clock").contains("fdab0000.npu: 1000 MHz (max 1000 MHz), governor rknpu_ondemand"));
    assert!(run.line("OK", "DDR clock").contains("dmc: 2112 MHz"));
    let policy4 = "OK    CPU clock        policy4 (cpus 4 5): 2256 MHz (max 2256 MHz), governor schedutil";
    assert!(run.out.lines().any(|l| l == policy4), "{}", run.out);
    assert!(run.out.contains("0 failed"), "{}", run.out);
    assert!(run.out.contains("rkllmd can serve"));
}

#[test]
fn an_old_bsp_board_gets_warnings_with_fixes_and_too_little_memory_fails() {
    let dir = tempfile::tempdir().unwrap();
    // 1.5 GB of model on a board with 1 GB available.
    let model = model_file(dir.path(), "big.rkllm", 0);
    std::fs::File::options().write(true).open(&model).unwrap().set_len(1_500_000_000).unwrap();
    let lib = common::sim_cdylib();
    let root = board("rk3588-bsp510-old");
    let run = doctor(
        &["--backend", "rkllm", "--lib", lib.to_str().unwrap(), "--model", &model],
        &["--root", root.to_str().unwrap()],
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.out);
    let driver = run.line("WARN", "NPU driver");
    assert!(driver.contains("rknpu 0.9.7 (/sys/kernel/debug/rknpu/version)"), "{driver}");
    assert!(driver.contains("Your rknpu driver version is too low"), "{driver}");
    assert!(run.fix("WARN", "NPU driver").contains("0.9.8"));
    assert!(run.line("OK", "NPU device").contains("dev/rknpu"), "{}", run.out);
    assert!(run.out.contains("dev/dma_heap/cma"), "the first DMA heap is checked: {}", run.out);
    assert!(run.line("WARN", "CPU cores").contains("4 online; the runtime warns below 8"));
    assert!(run.line("WARN", "NPU clock").contains("governor powersave: held at the lowest clock"));
    assert!(run.fix("WARN", "NPU clock").contains("rkllmd-pin-freq.service"));
    assert!(run.line("FAIL", "memory").contains("0.95 GiB available of 3.72 GiB; the model alone needs 1.40 GiB"));
    assert!(run.out.contains("1 failed"), "{}", run.out);
    assert!(run.out.contains("serving would fail"));
}

#[test]
fn a_driver_the_runtime_refuses_fails_with_its_words() {
    let root = board("rk3576-driver-too-old");
    let run =
        doctor(&["--backend", "rkllm", "--model", "/nonexistent/m.rkllm"], &["--root", root.to_str().unwrap()], &[]);
    assert_eq!(run.code, 1);
    let driver = run.line("FAIL", "NPU driver");
    assert!(driver.contains("rknpu 0.9.6") && driver.contains("please upgrade to 0.9.7"), "{driver}");
    assert!(run.line("OK", "NPU clock").contains("27700000.npu: 950 MHz"));
    // Library search happens under the root too: nothing there.
    let library = run.line("FAIL", "runtime library");
    assert!(library.contains(&format!("{}/usr/lib/librkllmrt.so", root.display())), "{library}");
    assert!(run.line("FAIL", "model").contains("/nonexistent/m.rkllm: no such file"), "{}", run.out);
    // A wrong path is a wrong path, not a model to convert.
    assert!(run.out.contains("correct the path") && !run.out.contains("convert the model"), "{}", run.out);
}

#[test]
fn the_library_is_found_under_the_root_and_an_unsupported_version_is_named() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("usr/lib");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("librkllmrt.so"), b"\x7fELF....RKLLM SDK (version: 1.2.0) ...").unwrap();
    let run =
        doctor(&["--backend", "rkllm", "--model", "sim:instant"], &["--root", root.path().to_str().unwrap()], &[]);
    assert_eq!(run.code, 1, "{}", run.out);
    let library = run.line("FAIL", "runtime library");
    assert!(library.contains("is version 1.2.0, which rkllmd cannot drive"), "{library}");
}

#[test]
fn off_a_board_the_simulator_serves_with_warnings_only() {
    let root = tempfile::tempdir().unwrap();
    let run = doctor(&[], &["--root", root.path().to_str().unwrap()], &[]);
    assert_eq!(run.code, 0, "{}", run.out);
    assert!(run.line("WARN", "runtime library").contains("rkllmd would serve the simulated runtime"));
    assert!(run.line("WARN", "NPU device").contains("neither"));
    assert!(run.line("OK", "model").contains("sim:qwen2.5-1.5b"));
    // The same empty board with a real model file: serving would fail.
    let dir = tempfile::tempdir().unwrap();
    let model = model_file(dir.path(), "m.rkllm", 16);
    let run = doctor(&["--model", &model], &["--root", root.path().to_str().unwrap()], &[]);
    assert_eq!(run.code, 1, "{}", run.out);
    assert!(run.line("FAIL", "NPU device").contains("neither"));
}

#[test]
fn the_chat_template_is_resolved_as_serve_does_and_a_bare_model_file_warns() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model = model_file(dir.path(), "model.rkllm", 16);
    // A bare .rkllm: the runtime's template, conversations folded into it.
    let run = doctor(&["--backend", "sim", "--model", &model], &["--root", root], &[]);
    let line = run.line("WARN", "chat template");
    assert!(line.contains("[runtime-folded]: nothing recognised") && line.contains("folded transcript"), "{line}");
    let fix = run.fix("WARN", "chat template");
    assert!(fix.contains("tokenizer_config.json") && fix.contains("template = ") && fix.contains("qwen3"), "{fix}");
    assert_eq!(run.code, 0, "a warning, not a failure: {}", run.out);
    // A family detected from the file name, and the reason.
    let named = model_file(dir.path(), "Qwen2.5-0.5B-Instruct.rkllm", 16);
    let run = doctor(&["--backend", "sim", "--model", &named], &["--root", root], &[]);
    let line = run.line("OK", "chat template");
    assert!(line.contains("[detected-family]: detected chatml from the file name"), "{line}");
    // A built-in chosen in the config.
    let run = doctor(&["--backend", "sim", "--model", &model, "--template", "qwen3"], &["--root", root], &[]);
    assert!(run.line("OK", "chat template").contains("qwen3"), "{}", run.out);
    // The model's tokenizer_config.json beside it is found, as serve finds it.
    let config = dir.path().join("tokenizer_config.json");
    std::fs::write(&config, r#"{"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}"#).unwrap();
    let run = doctor(&["--backend", "sim", "--model", &model], &["--root", root], &[]);
    assert!(run.line("OK", "chat template").contains(&config.display().to_string()), "{}", run.out);
    // A template serve would refuse to load fails.
    std::fs::write(&config, r#"{"chat_template": "{% for m in messages %}"}"#).unwrap();
    let run = doctor(&["--backend", "sim", "--model", &model], &["--root", root], &[]);
    assert!(run.line("FAIL", "chat template").contains("tokenizer_config.json"), "{}", run.out);
    assert_eq!(run.code, 1, "{}", run.out);
}

/// serve refuses `batch` > 1 without a tokenizer (each request's usage
/// counts its own prompt): doctor says so before a start fails.
#[test]
fn batched_runs_without_a_tokenizer_fail() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_file(dir.path(), "qwen.rkllm", 4096);
    let lib = common::sim_cdylib();
    let root = board("rk3588-drm");
    let settings = ["--backend", "rkllm", "--lib", lib.to_str().unwrap(), "--model", &model, "--batch", "2"];
    let run = doctor(&settings, &["--root", root.to_str().unwrap()], &[]);
    assert!(run.line("FAIL", "batch").contains("batch = 2 without a tokenizer.json"), "{}", run.out);
    assert!(run.fix("FAIL", "batch").contains("tokenizer.json"), "{}", run.out);
    assert_eq!(run.code, 1, "{}", run.out);
}

#[test]
fn smoke_generates_a_token_through_the_loaded_library() {
    let dir = tempfile::tempdir().unwrap();
    let model = model_file(dir.path(), "qwen.rkllm", 64);
    let lib = common::sim_cdylib();
    let root = board("rk3588-drm");
    let run = doctor(
        &["--backend", "rkllm", "--lib", lib.to_str().unwrap(), "--model", &model],
        &["--root", root.to_str().unwrap(), "--smoke"],
        &[("RKLLM_SIM_PROFILE", "instant")],
    );
    assert_eq!(run.code, 0, "{}", run.out);
    assert!(run.out.contains("rkllm runtime 1.3.0, ABI 1.3)"), "{}", run.out);
    assert!(
        run.out.lines().any(|l| l.starts_with("OK    smoke run") && l.contains("first token after")),
        "{}",
        run.out
    );
    // What the runtime printed at init: the simulator's toolkit line.
    assert!(run.line("OK", "model toolkit").ends_with("rkllm-toolkit simulated"), "{}", run.out);
}

#[test]
fn smoke_surfaces_the_runtimes_init_failure_and_its_fix() {
    let lib = common::sim_cdylib();
    let root = board("rk3588-drm");
    let run = doctor(
        &["--backend", "rkllm", "--lib", lib.to_str().unwrap(), "--model", "sim:instant?fail_init=npu_memory"],
        &["--root", root.to_str().unwrap(), "--smoke"],
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.out);
    let smoke = run.line("FAIL", "smoke run");
    assert!(smoke.contains("runtime said: I rkllm: rkllm-runtime version: 1.3.0 (simulated)"), "{smoke}");
    assert!(smoke.contains(" | E rkllm: failed to malloc npu memory!"), "the runtime's lines, on one line: {smoke}");
    assert_eq!(run.fix("FAIL", "smoke run"), "set base_domain_id = 1 in the config");
}

#[test]
fn a_vision_model_reports_its_encoder_and_a_missing_one_fails() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_str().unwrap();
    let run = doctor(&["--model", "sim:qwen2.5-vl-3b?time_scale=0"], &["--root", root], &[]);
    assert_eq!(run.code, 0, "{}", run.out);
    let line = run.line("OK", "vision encoder");
    assert!(line.contains("input 392×392 (NHWC), 198 tokens per image (196 + start/end tags"), "{line}");
    assert!(line.contains("embedding 256 floats per token") && line.contains("rknn api 2.3.2"), "{line}");
    let run = doctor(
        &["--model", "sim:qwen2.5-vl-3b?time_scale=0", "--vision-encoder", "/nonexistent/vision.rknn"],
        &["--root", root],
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.out);
    assert!(run.line("FAIL", "vision encoder").contains("rknn_init failed on /nonexistent/vision.rknn"), "{}", run.out);
}
