//! Connections shared fairly (127.0.0.x on loopback): one address holds at
//! most `client_connection_share` percent of `max_connections`, another is
//! still served, readiness is 503 `connections_full` while the cap is full
//! and `connections_refused` while an address past its share is being
//! turned away, and a body slower than `body_min_rate_bytes_per_sec` is
//! closed.

mod common;
use common::*;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn daemon_addr(d: &Daemon) -> SocketAddr {
    d.url.trim_start_matches("http://").parse().unwrap()
}

/// A connection to the daemon from `source` (an address of 127.0.0.0/8).
async fn connect_from(d: &Daemon, source: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(daemon_addr(d)).await.unwrap()
}

/// One request on a connection from `source`, read to its end: (status, body).
async fn request_from(d: &Daemon, source: &str, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let mut tcp = connect_from(d, source).await;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        daemon_addr(d),
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tcp.read_to_end(&mut response).await.unwrap();
    parse(&response)
}

/// Opens `n` connections from `source` and sends half a request head on each,
/// so that each is open and held (as a slow client's would be).
async fn hold(d: &Daemon, source: &str, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..n {
        let mut tcp = connect_from(d, source).await;
        tcp.write_all(b"POST /v1/chat/completions HTTP/1.1\r\n").await.unwrap();
        held.push(tcp);
    }
    held
}

async fn ready_from(d: &Daemon, source: &str) -> (u16, Option<String>) {
    let (code, body) = request_from(d, source, "GET", "/health/ready", "").await;
    (code, body["status"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn one_address_gets_its_share_another_is_served_and_a_full_cap_is_not_ready() {
    // 8 connections, 50 % (the default share): 4 per address.
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--model-id", "m", "--max-connections", "8"]);
    let greedy = hold(&d, "127.0.0.2", 4).await;
    assert_eq!(ready_from(&d, "127.0.0.4").await, (200, Some("ready".into())), "an address at its share");
    // Connections are accepted in order: the four are counted before the next one.
    let chat = chat("m", "hi").to_string();
    let (code, body) = request_from(&d, "127.0.0.2", "POST", "/v1/chat/completions", &chat).await;
    assert_eq!((code, body["error"]["code"].as_str()), (503, Some("too_many_connections")), "{body}");
    let (code, body) = request_from(&d, "127.0.0.3", "POST", "/v1/chat/completions", &chat).await;
    assert_eq!(code, 200, "another address is served: {body}");

    // The other half from two more addresses: the cap is full.
    let others = [hold(&d, "127.0.0.3", 2).await, hold(&d, "127.0.0.4", 2).await];
    // A probe over the cap is still served (from any address), and says so.
    assert_eq!(ready_from(&d, "127.0.0.5").await, (503, Some("connections_full".into())));
    let (code, body) = request_from(&d, "127.0.0.5", "POST", "/v1/chat/completions", &chat).await;
    assert_eq!((code, body["error"]["code"].as_str()), (503, Some("too_many_connections")), "{body}");

    drop(greedy);
    drop(others);
    // The places come back as the daemon sees the connections close.
    wait_ready(&d).await;
}

/// Polls readiness (from an address of its own) until it is 200: the
/// refusals' hold-down has passed and no place is missing.
async fn wait_ready(d: &Daemon) {
    // A generous multiple of the 2 s hold-down (`conn_cap::REFUSED_HOLD`).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while ready_from(d, "127.0.0.5").await.0 != 200 {
        assert!(std::time::Instant::now() < deadline, "never ready again");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// One address trickling request bodies on as many connections as it can
/// get, each one answered (503 past its share, 408 too slow) opened again.
struct Trickler {
    refused: tokio::sync::watch::Receiver<usize>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Trickler {
    fn start(d: &Daemon, source: &'static str, connections: usize) -> Trickler {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (refusals, refused) = tokio::sync::watch::channel(0);
        let refusals = std::sync::Arc::new(refusals);
        let addr = daemon_addr(d);
        let tasks = (0..connections)
            .map(|_| tokio::spawn(Self::one(addr, source, stopped.clone(), refusals.clone())))
            .collect();
        Trickler { refused, stop, tasks }
    }

    /// One connection at a time, a body byte every 100 ms, until stopped.
    async fn one(
        addr: SocketAddr,
        source: &str,
        mut stopped: tokio::sync::watch::Receiver<bool>,
        refusals: std::sync::Arc<tokio::sync::watch::Sender<usize>>,
    ) {
        let every = std::time::Duration::from_millis(100);
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        );
        while !*stopped.borrow() {
            let socket = TcpSocket::new_v4().unwrap();
            socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
            let Ok(tcp) = socket.connect(addr).await else { continue };
            let (mut rx, mut tx) = tcp.into_split();
            let _ = tx.write_all(head.as_bytes()).await;
            let mut answer = Vec::new();
            let answered = async {
                let _ = rx.read_to_end(&mut answer).await;
            };
            let trickle = async {
                while tx.write_all(b" ").await.is_ok() {
                    tokio::time::sleep(every).await;
                }
                std::future::pending::<()>().await;
            };
            tokio::select! {
                () = answered => {}
                () = trickle => {}
                _ = stopped.changed() => return,
            }
            // A 503 over its share (a 408 for a body too slow is not one).
            if String::from_utf8_lossy(&answer).contains("\"too_many_connections\"") {
                refusals.send_modify(|n| *n += 1);
                // Pacing the next attempt, not waiting for anything.
                tokio::time::sleep(every).await;
            }
        }
    }

    async fn stop(self) {
        self.stop.send_replace(true);
        for task in self.tasks {
            task.await.unwrap();
        }
    }
}

/// The case: one address trickles bodies on more connections than
/// its share; readiness is 503 `connections_refused` while it is being
/// turned away (it never fills the cap), a second address is served, and
/// readiness is 200 again once the trickler is gone.
#[tokio::test]
async fn readiness_is_503_while_an_address_past_its_share_is_refused_and_another_is_served() {
    // 8 connections, 50 %: the trickler gets 4 of its 6.
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--model-id", "m", "--max-connections", "8"]);
    let mut trickler = Trickler::start(&d, "127.0.0.2", 6);
    trickler.refused.wait_for(|&n| n >= 1).await.unwrap();
    assert_eq!(ready_from(&d, "127.0.0.4").await, (503, Some("connections_refused".into())));
    let (code, body) =
        request_from(&d, "127.0.0.3", "POST", "/v1/chat/completions", &chat("m", "hi").to_string()).await;
    assert_eq!(code, 200, "another address is served: {body}");
    // Still refused (the trickler's count moves on), still not ready.
    let seen = *trickler.refused.borrow();
    trickler.refused.wait_for(|&n| n > seen).await.unwrap();
    assert_eq!(ready_from(&d, "127.0.0.4").await, (503, Some("connections_refused".into())));

    trickler.stop().await;
    wait_ready(&d).await;
}

/// A body trickling in (a byte every 200 ms, 5 bytes/s: the idle time-out
/// never fires) is answered 408 once it has been read for 5 s below the
/// minimum rate, not after `body_timeout_secs` (60 s by default).
#[tokio::test]
async fn a_body_slower_than_the_minimum_rate_is_closed() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant", "--model-id", "m"]);
    let tcp = connect_from(&d, "127.0.0.2").await;
    let (mut rx, mut tx) = tcp.into_split();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
        daemon_addr(&d)
    );
    tx.write_all(head.as_bytes()).await.unwrap();
    let trickle = tokio::spawn(async move {
        // Until the daemon closes the connection (a failed write) or the test ends.
        while tx.write_all(b" ").await.is_ok() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    });
    let mut response = Vec::new();
    let read = rx.read_to_end(&mut response);
    // Far less than the 60 s body time-out: a generous multiple of the 5 s window.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .expect("answered before body_timeout_secs");
    trickle.abort();
    let (code, body) = parse(&response);
    assert_eq!((code, body["error"]["code"].as_str()), (408, Some("body_timeout")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("body_min_rate_bytes_per_sec"), "{body}");
}
