//! Capturing what the runtime prints while it initialises.
//!
//! `rkllm_init` reports its version, platform and, on failure, the reason
//! (`invalid rkllm model!`, `failed to malloc npu memory`, …) only on the
//! process's stdout/stderr. To put those lines into the error the daemon
//! reports, file descriptors 1 and 2 are redirected into a pipe for the
//! duration of the call, then restored. The caller hands the text back to
//! the log with [`echo`] when the call succeeded (the operator's terminal or
//! journal still shows it); a failed call's text is in its error, once.
//! Each line becomes a log event (target `rkllm_runtime`), in the log's
//! format; the daemon writes its own log to a duplicate of stderr taken at
//! start, so no other thread's log line ends up in the capture.

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::sync::Mutex;

/// Redirection swaps process-wide descriptors: two at once would restore each
/// other's pipes, so captures are serialised.
static CAPTURE: Mutex<()> = Mutex::new(());

/// Runs `f` with fds 1 and 2 going into a pipe; returns its result and the text.
/// If the pipe cannot be set up, `f` runs uncaptured and the text is empty.
pub fn capture_output<R>(f: impl FnOnce() -> R) -> (R, String) {
    let _guard = CAPTURE.lock().unwrap_or_else(|e| e.into_inner());
    let _ = std::io::stdout().flush();
    let mut fds = [0; 2];
    // SAFETY: plain POSIX calls on descriptors we own; every failure path
    // restores the original descriptors before returning.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return (f(), String::new());
        }
        let [read_fd, write_fd] = fds;
        let saved_out = libc::dup(1);
        let saved_err = libc::dup(2);
        if saved_out < 0 || saved_err < 0 {
            for fd in [read_fd, write_fd, saved_out, saved_err] {
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            return (f(), String::new());
        }
        libc::dup2(write_fd, 1);
        libc::dup2(write_fd, 2);
        libc::close(write_fd);
        // Drain concurrently so a chatty runtime cannot fill the pipe and block.
        let reader = std::thread::spawn(move || {
            let mut file = std::fs::File::from_raw_fd(read_fd);
            let mut bytes = Vec::new();
            let _ = file.read_to_end(&mut bytes);
            bytes
        });
        let result = f();
        // C stdio buffers stdout when it is not a terminal: flush it into the pipe.
        libc::fflush(std::ptr::null_mut());
        let _ = std::io::stdout().flush();
        libc::dup2(saved_out, 1);
        libc::dup2(saved_err, 2);
        libc::close(saved_out);
        libc::close(saved_err);
        let bytes = reader.join().unwrap_or_default();
        (result, String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Hands captured text to the log, a line per event: the runtime's errors
/// (`E rkllm: …`) and warnings as warnings, the rest as info.
pub fn echo(text: &str) {
    for line in text.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
        if line.starts_with("E ") || line.starts_with("W ") {
            tracing::warn!(target: "rkllm_runtime", "{line}");
        } else {
            tracing::info!(target: "rkllm_runtime", "{line}");
        }
    }
}
