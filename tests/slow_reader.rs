//! A client that stops reading its stream does not hold the model: the
//! reply is read ahead of it, so the model's turn is given back when the
//! runtime finishes, and a client that reads nothing for
//! `write_timeout_secs` is dropped.

mod common;
use common::*;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
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

/// Polls `/health` until no request runs; how long that took.
async fn wait_idle(d: &Daemon, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let (_, h) = d.get_json("/health").await;
        if h["queue"]["running"].as_u64() == Some(0) {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "the model is still held after {within:?}: {h}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A short request's time from sending to its answer.
async fn next_request_takes(d: &Daemon) -> Duration {
    let started = Instant::now();
    let mut body = chat("m", "next");
    body["max_tokens"] = 4.into();
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status().as_u16(), 200);
    started.elapsed()
}

fn daemon(tokens: u32, write_timeout: &str) -> Daemon {
    let model = format!("sim:instant?reply_tokens={tokens}");
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
    let d = daemon(20_000, "30");
    let alone = next_request_takes(&d).await;
    let _reader = stalled_reader(&d, 20_000);
    d.wait_generating().await;
    // The runtime (instant) finishes at once; the client has read nothing.
    wait_idle(&d, Duration::from_secs(5)).await;
    let took = next_request_takes(&d).await;
    assert!(took < alone + Duration::from_secs(1), "the next request took {took:?} (alone: {alone:?})");
}

#[tokio::test]
async fn a_client_that_reads_nothing_is_dropped_after_the_write_timeout() {
    // More than the socket's buffers and the read-ahead (16,384 pieces) take:
    // the run waits for the client until it is dropped.
    let d = daemon(40_000, "1");
    let alone = next_request_takes(&d).await;
    let _reader = stalled_reader(&d, 40_000);
    d.wait_generating().await;
    let held = wait_idle(&d, Duration::from_secs(8)).await;
    assert!(d.wait_log("read nothing for 1 s"), "{}", d.log());
    assert!(held < Duration::from_secs(4), "the model was held {held:?} after the stream began");
    let took = next_request_takes(&d).await;
    assert!(took < alone + Duration::from_secs(1), "the next request took {took:?} (alone: {alone:?})");
}
