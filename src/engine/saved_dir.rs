//! The saved conversations' directories and files on disk: a model's
//! directory made at its load, after sweeping what daemons that are gone
//! left beside it, and files removed with a WARN when they cannot be
//! (`saved.rs`, `shared_prefix.rs`).

use std::path::Path;

/// Makes a model's directory, after sweeping what gone daemons left beside it.
pub(super) fn make_dir(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent() {
        sweep(parent);
    }
    std::fs::create_dir_all(dir)
}

/// Removes what daemons that are gone left in `parent` (`rkllmd-PID-N-MODEL`
/// directories): a daemon killed without its shutdown leaves its files.
fn sweep(parent: &Path) {
    let Ok(dir) = std::fs::read_dir(parent) else { return };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix("rkllmd-")).and_then(|n| n.split('-').next());
        let gone = pid.and_then(|p| p.parse::<u32>().ok()).is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists());
        if gone {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::debug!(dir = %entry.path().display(), error = %e, "cannot remove a gone daemon's saved conversations");
            }
        }
    }
}

/// Removes `file` (`what` it holds, for the WARN when it cannot be); one
/// already gone is no error.
pub(super) fn remove(file: &Path, what: &str) {
    if let Err(e) = std::fs::remove_file(file) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(file = %file.display(), error = %e, "cannot remove {what}");
        }
    }
}
