//! The shipped front-end configs (docs/examples/haproxy.cfg, nginx.conf)
//! in front of three daemons on loopback, with HAProxy and nginx from
//! Debian's packages (installed by the test itself when missing and run as
//! root, `common::provision`; otherwise it fails saying what to install,
//! never skips). One board is killed (SIGKILL) under load; then: no
//! request sent after the kill fails, a stream cut by the kill ends in an
//! error the client sees, HAProxy takes the dead board out within its
//! health-check window, and a board's 429 is retried on another. Each
//! shipped example's DNS name reaches the boards: refused without the
//! `allowed_hosts` the example names, served with it (or with the key).

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// ~1 s per reply on the simulator's paced profile. Two may wait: more than
/// HAProxy's maxconn 2 sends, so HAProxy never sees a board not ready
/// because it is full (docs/deploy.md).
const BOARD: [&str; 4] = ["--model", "sim:qwen2.5-1.5b?reply_tokens=16", "--queue-depth", "2"];
/// The boards' addresses in the shipped configs.
const SHIPPED: [&str; 3] = ["192.168.1.31:8080", "192.168.1.32:8080", "192.168.1.33:8080"];

fn boards() -> Vec<Daemon> {
    boards_of(&BOARD)
}

fn boards_of(args: &[&str]) -> Vec<Daemon> {
    (1..=3).map(|n| Daemon::start(&[args, &["--model-id", "m", "--instance", &format!("board{n}")]].concat())).collect()
}

fn host_port(d: &Daemon) -> String {
    d.url.trim_start_matches("http://").to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Debian's binary, installed first if it is missing (`common::provision`).
fn debian_binary(package: provision::Package) -> PathBuf {
    provision::require(&[package]);
    Path::new("/usr/sbin").join(package.name)
}

/// A shipped config with the test's addresses in place of the examples'.
fn shipped(file: &str, boards: &[Daemon], replace: &[(&str, String)]) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/").to_owned() + file;
    let mut text = std::fs::read_to_string(&path).unwrap();
    let mut all: Vec<(&str, String)> = SHIPPED.iter().copied().zip(boards.iter().map(host_port)).collect();
    all.extend_from_slice(replace);
    for (from, to) in all {
        assert!(text.contains(from), "{file} no longer has {from:?}: update this test");
        text = text.replace(from, &to);
    }
    text
}

/// A proxy process, its output lines stamped as they arrive.
struct Proxy {
    child: Child,
    url: String,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Proxy {
    fn spawn(mut cmd: Command, port: u16) -> Proxy {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the proxy");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push((Instant::now(), line));
                }
            });
        }
        let proxy = Proxy { child, url: format!("http://127.0.0.1:{port}"), lines };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the proxy did not listen:\n{}", proxy.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        proxy
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>().join("\n")
    }

    /// When a line containing `needle` was printed, waiting up to `within`.
    fn line_at(&self, needle: &str, within: Duration) -> Option<Instant> {
        let deadline = Instant::now() + within;
        loop {
            if let Some((at, _)) = self.lines.lock().unwrap().iter().find(|(_, l)| l.contains(needle)) {
                return Some(*at);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn haproxy(dir: &Path, boards: &[Daemon]) -> Proxy {
    haproxy_with("haproxy.cfg", dir, boards)
}

fn haproxy_with(file: &str, dir: &Path, boards: &[Daemon]) -> Proxy {
    let port = free_port();
    let config = dir.join("haproxy.cfg");
    std::fs::write(&config, shipped(file, boards, &[("bind :8080", format!("bind 127.0.0.1:{port}"))])).unwrap();
    let mut cmd = Command::new(debian_binary(provision::HAPROXY));
    cmd.arg("-db").arg("-f").arg(&config);
    Proxy::spawn(cmd, port)
}

fn nginx(dir: &Path, boards: &[Daemon]) -> Proxy {
    nginx_with("nginx.conf", dir, boards)
}

fn nginx_with(file: &str, dir: &Path, boards: &[Daemon]) -> Proxy {
    let port = free_port();
    let site = shipped(file, boards, &[("listen 80;", format!("listen 127.0.0.1:{port};"))]);
    std::fs::write(dir.join("rkllmd.conf"), site).unwrap();
    // The http {} around the shipped server block, everything in `dir`, one
    // process in the foreground.
    let d = dir.display();
    let main = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log stderr notice;\nevents {{ worker_connections 256; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
         uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  include {d}/rkllmd.conf;\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), main).unwrap();
    let mut cmd = Command::new(debian_binary(provision::NGINX));
    cmd.arg("-e").arg("stderr").arg("-p").arg(dir).arg("-c").arg(dir.join("nginx.conf"));
    Proxy::spawn(cmd, port)
}

/// How one streamed request went.
#[derive(Debug, Clone)]
struct Outcome {
    sent: Instant,
    /// When the head came, its status and which board sent it.
    head: Option<(Instant, u16, String)>,
    /// `Ok` with `[DONE]` seen; `Err`: what the client saw instead.
    end: Result<(), String>,
    /// Whether any of the reply (a `data:` event) arrived.
    replied: bool,
}

async fn stream_once(client: &reqwest::Client, url: &str) -> Outcome {
    let sent = Instant::now();
    let body = serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "Hello"}]});
    let mut r = match client.post(format!("{url}/v1/chat/completions")).json(&body).send().await {
        Ok(r) => r,
        Err(e) => return Outcome { sent, head: None, end: Err(format!("no response: {e}")), replied: false },
    };
    let instance = r.headers().get("x-rkllmd-instance").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let status = r.status().as_u16();
    let head = Some((Instant::now(), status, instance));
    if status != 200 {
        return Outcome { sent, head, end: Err(format!("status {status}")), replied: false };
    }
    let mut text = String::new();
    let end = loop {
        match r.chunk().await {
            Ok(Some(bytes)) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Ok(None) if text.contains("data: [DONE]") && !text.contains("\"error\"") => break Ok(()),
            Ok(None) => break Err(format!("ended without [DONE]: {text}")),
            Err(e) => break Err(format!("transport error: {e:?}")),
        }
    };
    Outcome { sent, head, end, replied: text.contains("data: ") }
}

/// `clients` loops of streamed requests through `url` until `stop` is set.
fn load(
    url: &str,
    clients: usize,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Outcome>>> {
    (0..clients)
        .map(|_| {
            let (url, stop) = (url.to_owned(), stop.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut done = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    done.push(stream_once(&client, &url).await);
                }
                done
            })
        })
        .collect()
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Runs the load, SIGKILLs board1 while it streams, goes on for `after`;
/// checks what every request saw and gives (the kill's instant, outcomes).
async fn kill_under_load(proxy: &Proxy, boards: &[Daemon], clients: usize, after: Duration) -> (Instant, Vec<Outcome>) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks = load(&proxy.url, clients, stop.clone());
    // Board1 streaming a reply, which the kill cuts, and one request waiting
    // behind it, which a proxy must send elsewhere.
    boards[0].wait_queue(|running, waiting| running == 1 && waiting == 1).await;
    boards[0].wait_generating().await;
    // SAFETY: kill(2) on our child's pid.
    assert_eq!(unsafe { kill(boards[0].pid() as i32, 9) }, 0);
    let killed = Instant::now();
    tokio::time::sleep(after).await; // the load's length, not a synchronisation
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let failed: Vec<&Outcome> = all.iter().filter(|o| o.end.is_err()).collect();
    let after_kill = all.iter().filter(|o| o.sent > killed).count();
    assert!(after_kill >= 2, "the load went on after the kill: {after_kill} requests");
    for o in &failed {
        // Only a stream board1 had started replying to before it died may
        // fail; the one waiting there (its head held) goes elsewhere.
        let head = o.head.as_ref();
        assert!(
            o.replied && head.is_some_and(|(at, status, board)| *at < killed && *status == 200 && board == "board1"),
            "a request failed that was not a stream board1 had started: {o:?}\nproxy log:\n{}",
            proxy.log()
        );
        assert!(o.end.as_ref().unwrap_err().contains("transport error"), "the cut is visible to the client: {o:?}");
    }
    assert!(!failed.is_empty(), "the kill cut no stream: {all:?}");
    let board1_after = all
        .iter()
        .filter(|o| o.sent > killed + Duration::from_secs(2))
        .filter(|o| o.head.as_ref().is_some_and(|h| h.2 == "board1"))
        .count();
    assert_eq!(board1_after, 0, "a dead board answered?");
    (killed, all)
}

#[tokio::test]
async fn haproxy_takes_a_killed_board_out_and_no_new_request_fails() {
    let dir = tempfile::tempdir().unwrap();
    let boards = boards();
    let proxy = haproxy(dir.path(), &boards);
    // More clients than the boards' places behind maxconn: HAProxy queues
    // the rest, no board answers 429.
    let (killed, all) = kill_under_load(&proxy, &boards, 8, Duration::from_secs(3)).await;
    let down = proxy.line_at("rkllmd/board1 is DOWN", Duration::from_secs(5)).expect("HAProxy marks board1 down");
    let out = down.saturating_duration_since(killed);
    assert!(out <= Duration::from_secs(2), "board1 out {out:?} after the kill (target ≤ 2 s)");
    let refused = all.iter().filter(|o| o.head.as_ref().is_some_and(|h| h.1 == 429)).count();
    assert_eq!(refused, 0, "no client sees 429 while HAProxy can queue");
    eprintln!(
        "haproxy: {} requests, {} cut by the kill, board1 out after {out:?}",
        all.len(),
        all.iter().filter(|o| o.end.is_err()).count()
    );
}

#[tokio::test]
async fn nginx_retries_a_full_boards_429_and_no_new_request_fails() {
    let dir = tempfile::tempdir().unwrap();
    let boards = boards();
    let proxy = nginx(dir.path(), &boards);

    // board2 full from clients of its own (one running, two waiting):
    // nginx does not know, sends it requests, gets 429 and tries another.
    let direct: Vec<_> = (0..3)
        .map(|_| {
            let url = boards[1].url.clone();
            tokio::spawn(async move { stream_once(&reqwest::Client::new(), &url).await })
        })
        .collect();
    boards[1].wait_queue(|running, waiting| running == 1 && waiting == 2).await;
    // As many as board1 and board3 can take: none may see 429.
    let through: Vec<_> = (0..6)
        .map(|_| {
            let url = proxy.url.clone();
            tokio::spawn(async move { stream_once(&reqwest::Client::new(), &url).await })
        })
        .collect();
    for o in through {
        let o = o.await.unwrap();
        assert!(o.end.is_ok(), "a client saw {o:?}");
        assert_ne!(o.head.as_ref().unwrap().2, "board2", "board2 was full");
    }
    let metrics = reqwest::get(format!("{}/metrics", boards[1].url)).await.unwrap().text().await.unwrap();
    let retried = metrics.lines().any(|l| l.starts_with("rkllmd_requests_total") && l.contains("status=\"429\""));
    assert!(retried, "nginx never met board2's 429:\n{metrics}");
    for d in direct {
        assert!(d.await.unwrap().end.is_ok());
    }

    // Fewer clients than the two boards left can take. A fresh nginx: the
    // one above still skips board2 for its 429s (failed tries, nginx.conf),
    // and two boards skipped leave one, whose max_conns 5 clients exceed.
    drop(proxy);
    let proxy = nginx(dir.path(), &boards);
    let (_, all) = kill_under_load(&proxy, &boards, 5, Duration::from_secs(3)).await;
    eprintln!("nginx: {} requests, {} cut by the kill", all.len(), all.iter().filter(|o| o.end.is_err()).count());
}

/// The board a conversation's request reached (non-stream, `X-Session-Id`).
async fn board_of(client: &reqwest::Client, url: &str, session: &str) -> String {
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Hello"}]});
    let r = client
        .post(format!("{url}/v1/chat/completions"))
        .header("x-session-id", session)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.headers()["x-rkllmd-instance"].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_affinity_configs_keep_each_conversation_on_one_board() {
    let boards = boards_of(&["--model", "sim:instant?reply_tokens=4", "--queue-depth", "2"]);
    for file in ["haproxy-affinity.cfg", "nginx-affinity.conf"] {
        let dir = tempfile::tempdir().unwrap();
        let proxy = if file.starts_with("haproxy") {
            haproxy_with(file, dir.path(), &boards)
        } else {
            nginx_with(file, dir.path(), &boards)
        };
        let client = reqwest::Client::new();
        let sessions: Vec<String> = (0..8).map(|i| format!("conversation-{i}")).collect();
        let mut first = Vec::new();
        for s in &sessions {
            first.push(board_of(&client, &proxy.url, s).await);
        }
        for (s, board) in sessions.iter().zip(&first) {
            for _ in 0..2 {
                assert_eq!(&board_of(&client, &proxy.url, s).await, board, "{file}: {s} moved");
            }
        }
        let used: std::collections::BTreeSet<&String> = first.iter().collect();
        assert!(used.len() >= 2, "{file}: 8 conversations all on {used:?}");
    }
}

/// The names a shipped example tells the boards to answer to: its
/// `allowed_hosts = [...]` line.
fn allowed_hosts(file: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/").to_owned() + file;
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text.lines().find_map(|l| l.split_once("allowed_hosts = ")).map(|(_, list)| list);
    let list = line.and_then(|l| l.get(..=l.find(']')?)).unwrap_or_else(|| panic!("{file} sets no allowed_hosts"));
    let value: toml::Table = toml::from_str(&format!("hosts = {list}")).unwrap();
    let hosts: Vec<&str> = value["hosts"].as_array().unwrap().iter().filter_map(|h| h.as_str()).collect();
    assert!(!hosts.is_empty(), "{file}: {list}");
    hosts.join(",")
}

/// A chat sent through `url` under the Host name `host` (with `key`, if
/// any): the status and the error code, if any.
async fn chat_as(url: &str, host: &str, key: Option<&str>) -> (u16, String) {
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "Hello"}]});
    let mut request =
        reqwest::Client::new().post(format!("{url}/v1/chat/completions")).header("host", host).json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    (status, body["error"]["code"].as_str().unwrap_or("").to_owned())
}

const NAMED: [&str; 4] = ["--model", "sim:instant?reply_tokens=4", "--queue-depth", "2"];

#[tokio::test]
async fn every_shipped_example_serves_the_dns_name_it_is_reached_by() {
    // Each proxy config, and the Host its clients send: nginx's server_name,
    // and HAProxy under the name litellm.yaml's api_base gives it.
    let litellm = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/litellm.yaml")).unwrap();
    let api_base = litellm.lines().find_map(|l| l.trim().strip_prefix("api_base: http://")).unwrap();
    let through_haproxy = api_base.split('/').next().unwrap().to_owned();
    let cases = [
        ("nginx.conf", "nginx.conf", "llm.example.lan"),
        ("nginx-affinity.conf", "nginx-affinity.conf", "llm.example.lan"),
        ("haproxy.cfg", "haproxy.cfg", through_haproxy.as_str()),
        ("haproxy-affinity.cfg", "haproxy-affinity.cfg", through_haproxy.as_str()),
        ("litellm.yaml", "haproxy.cfg", through_haproxy.as_str()),
    ];
    for (example, proxy_config, host) in cases {
        let dir = tempfile::tempdir().unwrap();
        let start = |boards: &[Daemon]| {
            if proxy_config.starts_with("nginx") {
                nginx_with(proxy_config, dir.path(), boards)
            } else {
                haproxy_with(proxy_config, dir.path(), boards)
            }
        };
        // The name reaches the boards: without the example's setting they refuse it.
        let plain = boards_of(&NAMED);
        let proxy = start(&plain);
        assert_eq!(chat_as(&proxy.url, host, None).await, (403, "host_not_allowed".into()), "{example}");
        drop(proxy);
        let boards = boards_of(&[&NAMED[..], &["--allowed-hosts", &allowed_hosts(example)]].concat());
        let proxy = start(&boards);
        for _ in 0..3 {
            assert_eq!(chat_as(&proxy.url, host, None).await.0, 200, "{example} under {host}:\n{}", proxy.log());
        }
    }
}

#[tokio::test]
async fn the_kubernetes_service_name_is_served_with_the_configmaps_setting_or_the_key() {
    // service.yaml: Service `rkllmd` in namespace `llm`, port 8080.
    let host = "rkllmd.llm:8080";
    let named = Daemon::start(
        &[&NAMED[..], &["--model-id", "m", "--allowed-hosts", &allowed_hosts("k8s/configmap.yaml")]].concat(),
    );
    assert_eq!(chat_as(&named.url, host, None).await.0, 200);
    // daemonset.yaml gives the boards a key: a request with it passes under any name.
    let keyed = Daemon::start(&[&NAMED[..], &["--model-id", "m", "--api-key", "change-me"]].concat());
    assert_eq!(chat_as(&keyed.url, host, Some("change-me")).await.0, 200);
    assert_eq!(chat_as(&keyed.url, host, None).await, (403, "host_not_allowed".into()));
}
