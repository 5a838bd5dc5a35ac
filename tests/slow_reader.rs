//! A client that stops reading its stream does not hold the model: the
//! reply is read ahead of it, so the model's turn is given back when the
//! runtime finishes, and a client that reads nothing for
//! `write_timeout_secs` is dropped.

mod common;
use common::*;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// A connection with a 4 KiB receive buffer that sends a streamed request
/// and never reads: the kernel's buffers fill after a few KiB of the reply.
fn stalled_reader(d: &Daemon, max_tokens: u32) -> TcpStream {
    let SocketAddr::V4(addr) = d.url.trim_start_matches("http://").parse().unwrap() else { panic!("IPv4") };
    // SAFETY: plain socket calls on a descriptor we own, handed to TcpStream once connected.
    let mut tcp = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let size: libc::c_int = 4096;
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        assert_eq!(
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, (&size as *const libc::c_int).cast(), len),
            0
        );
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*addr.ip()).to_be() },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(libc::connect(fd, (&sin as *const libc::sockaddr_in).cast(), len), 0);
        TcpStream::from_raw_fd(fd)
    };
    let body = serde_json::json!({
        "model": "m", "stream": true, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "a long story"}],
    })
    .to_string();
    write!(
        tcp,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    tcp
}

/// Waits (up to 60 s: a busy machine makes tens of thousands of tokens
/// slowly) until the simulated runtime has returned from its first run.
async fn wait_run_end(record: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while sim_records(record, "run_end").is_empty() {
        assert!(Instant::now() < deadline, "the runtime never returned from the run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `/health` until no request runs (bounded by `within`).
async fn wait_idle(d: &Daemon, within: Duration) {
    let started = Instant::now();
    loop {
        let (_, h) = d.get_json("/health").await;
        if h["queue"]["running"].as_u64() == Some(0) {
            return;
        }
        assert!(started.elapsed() < within, "the model is still held after {within:?}: {h}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A short request's time in the queue, by its own `timings.queue_ms`: 0
/// unless something held the model when it came.
async fn next_request_waits(d: &Daemon) -> f64 {
    let mut body = chat("m", "next");
    body["max_tokens"] = 4.into();
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status().as_u16(), 200);
    let reply: serde_json::Value = r.json().await.unwrap();
    reply["timings"]["queue_ms"].as_f64().unwrap_or_else(|| panic!("no timings.queue_ms: {reply}"))
}

/// A daemon whose simulated runtime records its calls in `record`.
fn daemon(tokens: u32, write_timeout: &str, record: &Path) -> Daemon {
    let model = format!("sim:instant?reply_tokens={tokens}&record={}", record.display());
    let max = tokens.to_string();
    Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        &model,
        "--model-id",
        "m",
        "--max-new-tokens",
        &max,
        "--max-context-len",
        "65536",
        "--write-timeout-secs",
        write_timeout,
    ])
}

#[tokio::test]
async fn the_model_is_free_as_soon_as_the_runtime_finishes_a_stalled_clients_reply() {
    // 20,000 tokens (~4.6 MB of events): more than the stalled socket's
    // buffers take (at most tcp_wmem's 4 MiB), less than those and the read-ahead.
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = daemon(20_000, "120", &record);
    let _reader = stalled_reader(&d, 20_000);
    // The runtime (instant) finishes as fast as the machine makes 20,000
    // tokens; the client has read nothing. Held for the client, the model
    // would be free only when the write time-out (120 s) dropped it: half
    // of that is a generous bound.
    wait_run_end(&record).await;
    wait_idle(&d, Duration::from_secs(60)).await;
    let waited = next_request_waits(&d).await;
    assert!(waited < 60_000.0, "the next request waited {waited} ms in the queue");
}

#[tokio::test]
async fn a_client_that_reads_nothing_is_dropped_after_the_write_timeout() {
    // More than the socket's buffers and the read-ahead (16,384 pieces) take:
    // the model is held for the client until it is dropped.
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(40_000, "1", &dir.path().join("record.jsonl"));
    let _reader = stalled_reader(&d, 40_000);
    // The client is still connected, so a disconnect is the daemon dropping
    // it: once the reply filled the read-ahead and the socket (a busy
    // machine takes seconds to make those tokens) and 1 s passed. Not
    // dropped, it would hold the model for good.
    assert!(d.wait_metric("rkllmd_client_disconnects_total", |n| n == 1.0).await, "the client was never dropped");
    wait_idle(&d, Duration::from_secs(60)).await;
    let waited = next_request_waits(&d).await;
    assert!(waited < 60_000.0, "the next request waited {waited} ms in the queue");
}
