//! Where the daemon's own log goes: a duplicate of stderr taken at start.
//!
//! While the runtime loads a model, rkllm-sys redirects the process's fds 1
//! and 2 into a pipe to capture the runtime's lines (`rkllm-sys`
//! `capture.rs`), and re-emits them as log events. Writing the daemon's log
//! to its own descriptor keeps other threads' log lines out of that capture
//! (and out of the "runtime said" text of a load error) and keeps the log
//! flowing while a load hangs. A failed write (a closed pipe: EPIPE) is
//! dropped: the daemon must outlive its log reader, and tracing's own
//! report of a failed write would panic on the same closed stderr.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::FromRawFd;
use std::sync::Arc;
use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone)]
pub struct LogSink(Option<Arc<File>>);

impl LogSink {
    /// A duplicate of fd 2 now; `None` (the log is dropped) if there is no stderr to duplicate.
    pub fn stderr_duplicate() -> LogSink {
        // SAFETY: dup(2) returns a new descriptor that only this File owns.
        let fd = unsafe { libc::dup(2) };
        LogSink((fd >= 0).then(|| Arc::new(unsafe { File::from_raw_fd(fd) })))
    }

    /// Whether the log goes to a terminal (for colours).
    pub fn is_terminal(&self) -> bool {
        self.0.as_deref().is_some_and(io::IsTerminal::is_terminal)
    }
}

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(file) = &self.0 {
            // One write_all per event (tracing formats an event into one buffer).
            let _ = (&**file).write_all(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogSink {
    type Writer = LogSink;
    fn make_writer(&'a self) -> LogSink {
        self.clone()
    }
}
