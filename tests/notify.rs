//! sd_notify and the systemd watchdog, for real: the test owns the
//! `NOTIFY_SOCKET` datagram socket, starts the real binary with it (and
//! `WATCHDOG_USEC`), and reads what the daemon tells systemd.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One datagram as received, with the HTTP status of `/health/ready` at
/// that moment when the datagram was `READY=1`.
#[derive(Debug)]
struct Message {
    at: Instant,
    text: String,
    ready_status: Option<u16>,
}

struct Service {
    child: Child,
    port: u16,
    messages: mpsc::Receiver<Message>,
    _dir: tempfile::TempDir,
}

impl Service {
    /// Starts `rkllmd` on a free port with `NOTIFY_SOCKET` pointing at our socket.
    fn start(args: &[&str], watchdog_usec: u64) -> Service {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                let at = Instant::now();
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                // Checked here, before the test sees the message: what a
                // client would get the moment systemd considers us started.
                let ready_status = text.lines().any(|l| l == "READY=1").then(|| http_status(port, "/health/ready"));
                if tx.send(Message { at, text, ready_status }).is_err() {
                    break;
                }
            }
        });
        let child = Command::new(env!("CARGO_BIN_EXE_rkllmd"))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(args)
            .env_remove("RKLLM_LIB")
            .env("NOTIFY_SOCKET", &path)
            .env("WATCHDOG_USEC", watchdog_usec.to_string())
            .env_remove("WATCHDOG_PID")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Service { child, port, messages, _dir: dir }
    }

    /// Messages until one satisfies `pred` (included), bounded by `within`.
    fn until(&self, within: Duration, pred: impl Fn(&Message) -> bool) -> Vec<Message> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(m) => {
                    let done = pred(&m);
                    seen.push(m);
                    if done {
                        return seen;
                    }
                }
                Err(_) => panic!("no matching notification within {within:?}; got {seen:#?}"),
            }
        }
    }

    /// Every message that arrives during `window`.
    fn during(&self, window: Duration) -> Vec<Message> {
        let deadline = Instant::now() + window;
        let mut seen = Vec::new();
        while let Ok(m) = self.messages.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            seen.push(m);
        }
        seen
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking `GET` that returns the status code (0 if the connection failed).
fn http_status(port: u16, path: &str) -> u16 {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return 0 };
    let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let mut response = String::new();
    let _ = s.read_to_string(&mut response);
    response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0)
}

fn is(m: &Message, line: &str) -> bool {
    m.text.lines().any(|l| l == line)
}

fn status(m: &Message) -> Option<&str> {
    m.text.lines().find_map(|l| l.strip_prefix("STATUS="))
}

fn pings(messages: &[Message]) -> Vec<Instant> {
    messages.iter().filter(|m| is(m, "WATCHDOG=1")).map(|m| m.at).collect()
}

#[test]
fn ready_only_once_loaded_and_listening_then_pings_and_stopping() {
    let service = Service::start(&["--backend", "sim", "--model", "sim:instant"], 1_000_000);
    let start = service.until(Duration::from_secs(30), |m| is(m, "READY=1"));
    let ready = start.last().unwrap();
    assert_eq!(ready.ready_status, Some(200), "/health/ready must answer 200 when READY=1 arrives");
    assert_eq!(status(ready), Some(format!("serving sim-instant on {}", service.url()).as_str()));
    let before = &start[..start.len() - 1];
    assert!(before.iter().any(|m| is(m, "EXTEND_TIMEOUT_USEC=30000000")), "{before:#?}");
    assert!(before.iter().any(|m| status(m).is_some_and(|s| s == "loading sim:instant")), "{before:#?}");
    assert!(pings(before).is_empty(), "no watchdog pings before READY");

    // WatchdogSec=1s: pings every 0.5 s while idle.
    let idle = service.during(Duration::from_millis(2600));
    let times = pings(&idle);
    assert!(times.len() >= 3, "pings while idle: {idle:#?}");
    assert!(times.windows(2).all(|w| w[1] - w[0] < Duration::from_secs(1)), "a gap reached WatchdogSec: {idle:#?}");

    // SIGTERM: STOPPING=1 with a status, exit 0.
    // SAFETY: kill(2) on our own child.
    unsafe { kill(service.child.id() as i32, 15) };
    let stop = service.until(Duration::from_secs(20), |m| is(m, "STOPPING=1"));
    assert!(status(stop.last().unwrap()).is_some_and(|s| s.starts_with("shutting down")));
    let mut service = service;
    let code = service.child.wait().unwrap();
    assert!(code.success(), "{code}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_runtime_stops_the_pings_and_says_why() {
    // The run hangs after 2 tokens; a decode gap of first_token_timeout_secs (1 s) is a hang.
    let service = Service::start(
        // One slot: the subject is a request's run that hangs, not `batch = auto`'s timing runs at load.
        &[
            "--backend",
            "sim",
            "--model",
            "sim:instant?hang_after=2&reply_tokens=10",
            "--first-token-timeout-secs",
            "1",
            "--batch",
            "1",
        ],
        600_000,
    );
    service.until(Duration::from_secs(30), |m| is(m, "READY=1"));
    let idle = service.during(Duration::from_millis(700));
    assert!(!pings(&idle).is_empty(), "pings before the hang: {idle:#?}");

    let sent = Instant::now();
    let url = service.url();
    let request = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .json(&common::chat("sim-instant", "hang please"))
            .send()
            .await
    });
    let until_stall = tokio::task::spawn_blocking(move || {
        let seen =
            service.until(Duration::from_secs(15), |m| status(m).is_some_and(|s| s.starts_with("runtime stalled")));
        (service, seen)
    });
    let (service, seen) = until_stall.await.unwrap();
    let stalled = seen.last().unwrap();
    assert!(
        status(stalled).is_some_and(|s| s.contains("during decoding")),
        "the status says what stalled: {stalled:?}"
    );
    assert!(stalled.at - sent >= Duration::from_secs(1), "declared a hang before the allowance ran out");
    // From now on no pings, however long we wait (systemd restarts us after WatchdogSec).
    let after = tokio::task::spawn_blocking(move || {
        let after = service.during(Duration::from_millis(1500));
        drop(service);
        after
    })
    .await
    .unwrap();
    assert!(pings(&after).is_empty(), "pings after the stall: {after:#?}");
    request.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_prefill_is_not_a_hang() {
    // 2.5 s of prefill without callbacks; the prefill allowance here is the 5 s first-token
    // time-out (the bound the engine aborts the prefill at) and the abort's 1 s.
    let service = Service::start(
        &[
            "--backend",
            "sim",
            "--model",
            "sim:instant?prefill_extra_ms=2500&reply_tokens=3",
            "--first-token-timeout-secs",
            "5",
        ],
        600_000,
    );
    service.until(Duration::from_secs(30), |m| is(m, "READY=1"));
    let url = service.url();
    let collector = tokio::task::spawn_blocking(move || {
        let seen = service.during(Duration::from_millis(3500));
        (service, seen)
    });
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&common::chat("sim-instant", "a long prompt"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(body["timings"]["prompt_ms"].as_f64().unwrap() >= 2500.0, "{body}");
    let (_service, seen) = collector.await.unwrap();
    assert!(seen.iter().all(|m| !status(m).is_some_and(|s| s.starts_with("runtime stalled"))), "{seen:#?}");
    let times = pings(&seen);
    assert!(times.len() >= 6, "pings kept coming during the prefill: {seen:#?}");
    assert!(times.windows(2).all(|w| w[1] - w[0] < Duration::from_millis(600)), "{seen:#?}");
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
