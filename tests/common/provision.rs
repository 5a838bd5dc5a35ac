//! What some tests need from the machine beyond Rust: Debian's haproxy and
//! nginx (tests/front_ends.rs), openssl (tests/images.rs), python3's venv
//! (the Python suite's `.venv`). The README's one test command provisions
//! them itself: a missing package is installed with `apt-get` when the tests
//! run as root (CI, a container, a fresh board), once per test process; a
//! test that cannot get it fails saying what to install. It never skips.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// A Debian package a test needs, and how to tell it is there.
#[derive(Clone, Copy)]
pub struct Package {
    pub name: &'static str,
    /// True when the package's part the tests use is installed.
    pub present: fn() -> bool,
}

pub const HAPROXY: Package = Package { name: "haproxy", present: || Path::new("/usr/sbin/haproxy").exists() };
pub const NGINX: Package = Package { name: "nginx", present: || Path::new("/usr/sbin/nginx").exists() };
pub const OPENSSL: Package = Package { name: "openssl", present: || runs("openssl", &["version"]) };
/// Debian's python3 makes venvs only with python3-venv (its ensurepip).
pub const PYTHON3_VENV: Package =
    Package { name: "python3-venv", present: || runs("python3", &["-c", "import ensurepip, venv"]) };

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program).args(args).output().is_ok_and(|out| out.status.success())
}

extern "C" {
    fn geteuid() -> u32;
}

/// Tests of one binary run on several threads: one installs at a time
/// (and apt waits for a dpkg lock another process holds, below).
static INSTALLING: Mutex<()> = Mutex::new(());

/// Makes sure every package in `packages` is installed: the missing ones
/// with `apt-get install` when running as root, else the test fails
/// naming the command to run.
pub fn require(packages: &[Package]) {
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let missing: Vec<&str> = packages.iter().filter(|p| !(p.present)()).map(|p| p.name).collect();
    if missing.is_empty() {
        return;
    }
    let command = format!("apt-get install -y {}", missing.join(" "));
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { geteuid() } == 0;
    assert!(root, "the tests need Debian's {missing:?}, which are missing: run `sudo {command}` once (as root the tests install them themselves)");
    assert!(
        Path::new("/usr/bin/apt-get").exists(),
        "the tests need {missing:?}, and this machine has no apt-get: install them"
    );
    eprintln!("installing {missing:?} for the tests: {command}");
    let apt = |args: &[&str]| {
        let status = Command::new("apt-get")
            .args(["-q", "-y", "-o", "DPkg::Lock::Timeout=600"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .unwrap_or_else(|e| panic!("cannot run apt-get: {e}"));
        assert!(status.success(), "`apt-get {}` failed ({status}); the tests need {missing:?}", args.join(" "));
    };
    apt(&["update"]);
    apt(&[&["install", "--no-install-recommends"][..], &missing].concat());
    let still: Vec<&str> = packages.iter().filter(|p| !(p.present)()).map(|p| p.name).collect();
    assert!(still.is_empty(), "{still:?} still missing after `{command}`");
}
