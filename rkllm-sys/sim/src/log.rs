//! The runtime's console lines.
//!
//! Written straight to the process's stderr with `write_all` (not
//! `eprintln!`, which the test harness captures per thread), because callers
//! capture file descriptor 2 around `rkllm_init` to read what the runtime
//! said, exactly as with the vendor library.

use std::io::Write;

/// Prints one line, e.g. `E rkllm: invalid rkllm model!`.
pub(crate) fn line(text: &str) {
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(b'\n');
    let _ = std::io::stderr().write_all(&bytes);
}
