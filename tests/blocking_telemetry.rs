//! A telemetry read that blocks (a debugfs file waiting on the NPU driver;
//! here a FIFO with no writer) stalls only the `/metrics` scrape that made
//! it, not the one async thread every stream's tokens share.

mod common;
use common::*;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

#[tokio::test]
async fn a_stalled_telemetry_read_does_not_stall_streams() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("sys/kernel/debug/rknpu");
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = CString::new(dir.join("load").as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:qwen2-0.5b?reply_tokens=60",
        "--model-id",
        "m",
        "--telemetry-root",
        root.path().to_str().unwrap(),
    ]);
    let mut body = chat("m", "a story");
    body["stream"] = true.into();
    let mut stream = d.client().post(format!("{}/v1/chat/completions", d.url)).json(&body).send().await.unwrap();
    while !String::from_utf8_lossy(&stream.chunk().await.unwrap().expect("a token")).contains("\"content\"") {}
    // Opening the FIFO blocks until a writer comes: never.
    let scrape = tokio::spawn(d.client().get(format!("{}/metrics", d.url)).send());
    let mut text = String::new();
    while let Some(chunk) =
        tokio::time::timeout(Duration::from_secs(5), stream.chunk()).await.expect("the stream stalled").unwrap()
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    // The whole reply came while the scrape still waits: no token waited for it.
    assert!(text.contains("[DONE]"), "{text}");
    assert_eq!(d.get_json("/health").await.0, 200);
    assert!(!scrape.is_finished(), "the scrape is still waiting on the FIFO");
    scrape.abort();
}
