//! `systemd/rkllmd-pin-freq` (the opt-in clock-pinning oneshot) on copies of
//! the board fixtures: `pin` holds every clock at its maximum, `unpin` puts
//! the governors back.

use std::path::{Path, PathBuf};
use std::process::Command;

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A writable copy of a fixture's `sys/`.
fn sysfs(board: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/boards").join(board).join("sys");
    copy_tree(&fixture, &dir.path().join("sys"));
    let sys = dir.path().join("sys");
    (dir, sys)
}

fn script(sys: &Path, state: &Path, action: &str) -> String {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/rkllmd-pin-freq"))
        .arg(action)
        .env("SYSFS", sys)
        .env("STATE", state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{action}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_owned()
}

#[test]
fn pin_sets_performance_and_unpin_restores_the_governors() {
    let (dir, sys) = sysfs("rk3588-drm");
    let state = dir.path().join("state");
    let out = script(&sys, &state, "pin");
    assert_eq!(read(sys.join("class/devfreq/fdab0000.npu/governor")), "performance");
    assert_eq!(read(sys.join("class/devfreq/dmc/governor")), "performance");
    for p in ["policy0", "policy4", "policy6"] {
        assert_eq!(read(sys.join(format!("devices/system/cpu/cpufreq/{p}/scaling_governor"))), "performance");
    }
    assert!(out.contains("fdab0000.npu: performance at 1000000000"), "{out}");
    // Pinning twice keeps the first saved governor.
    script(&sys, &state, "pin");
    script(&sys, &state, "unpin");
    assert_eq!(read(sys.join("class/devfreq/fdab0000.npu/governor")), "rknpu_ondemand");
    assert_eq!(read(sys.join("class/devfreq/dmc/governor")), "dmc_ondemand");
    assert_eq!(read(sys.join("devices/system/cpu/cpufreq/policy4/scaling_governor")), "schedutil");
    // The GPU's devfreq is not touched.
    assert_eq!(read(sys.join("class/devfreq/fb000000.gpu/governor")), "simple_ondemand");
}

#[test]
fn without_performance_the_npu_is_set_to_userspace_at_its_maximum() {
    let (dir, sys) = sysfs("rk3588-bsp510-old");
    let state = dir.path().join("state");
    script(&sys, &state, "pin");
    let npu = sys.join("class/devfreq/fdab0000.npu");
    assert_eq!(read(npu.join("governor")), "userspace");
    assert_eq!(read(npu.join("userspace/set_freq")), "1000000000");
    script(&sys, &state, "unpin");
    assert_eq!(read(npu.join("governor")), "powersave");
}
