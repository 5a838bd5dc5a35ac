//! The shipped front ends (docs/examples/) run by tests/front_ends.rs:
//! HAProxy and nginx from Debian's packages (installed by the test itself
//! when missing and run as root, `common::provision`), in front of boards
//! on loopback; only the configs' addresses are changed.

pub mod load;

use crate::common::{provision, Daemon};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The boards' addresses in the shipped configs.
const SHIPPED: [&str; 3] = ["192.168.1.31:8080", "192.168.1.32:8080", "192.168.1.33:8080"];

/// Three boards named board1..board3, serving model `m`.
pub fn boards_of(args: &[&str]) -> Vec<Daemon> {
    (1..=3).map(|n| board(args, n, 0)).collect()
}

/// Board `n` (named `board{n}`, serving model `m`) on `port` (0: any).
pub fn board(args: &[&str], n: usize, port: u16) -> Daemon {
    let name = format!("board{n}");
    Daemon::start_at(port, &[args, &["--model-id", "m", "--instance", &name]].concat())
}

pub fn host_port(d: &Daemon) -> String {
    d.url.trim_start_matches("http://").to_owned()
}

/// A port for a program started at an address the test chose (a proxy; a
/// board restarted where its proxy knows it): below the kernel's ephemeral
/// range (`ip_local_port_range`), which no bind to port 0 and no outgoing
/// connection is given, so no other test takes it between the choice and
/// the program's bind, nor while a killed board is down. Handed out once
/// per test binary from a start that differs between processes, each
/// checked free.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let low: u16 = range.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(32768);
    let (base, span) = (low / 2, low - low / 2);
    let _ =
        NEXT.compare_exchange(0, (std::process::id() % u32::from(span)) as u16 + 1, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..span {
        let port = base + NEXT.fetch_add(1, Ordering::SeqCst) % span;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {base}..{low}");
}

/// A shipped example's text.
pub fn example(file: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/").to_owned() + file;
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `max_conns=N` a shipped nginx config gives every board: what the
/// boards must hold (one running plus `queue_depth`), so the tests start
/// them with `queue_depth` N − 1, as the config's comment says.
pub fn nginx_max_conns(file: &str) -> usize {
    let text = example(file);
    let values: Vec<usize> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("server "))
        .filter_map(|l| l.split_once("max_conns=")?.1.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(values.len() == 3 && values.iter().all(|v| *v == values[0]), "{file}: max_conns per board {values:?}");
    values[0]
}

/// Debian's binary, installed first if it is missing (`common::provision`).
fn debian_binary(package: provision::Package) -> PathBuf {
    provision::require(&[package]);
    Path::new("/usr/sbin").join(package.name)
}

/// A shipped config with the test's addresses in place of the examples'.
fn shipped(file: &str, boards: &[Daemon], replace: &[(&str, String)]) -> String {
    let mut text = example(file);
    let mut all: Vec<(&str, String)> = SHIPPED.iter().copied().zip(boards.iter().map(host_port)).collect();
    all.extend_from_slice(replace);
    for (from, to) in all {
        assert!(text.contains(from), "{file} no longer has {from:?}: update this test");
        text = text.replace(from, &to);
    }
    text
}

/// A proxy process and its output lines.
pub struct Proxy {
    child: Child,
    pub url: String,
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    /// HAProxy's stats socket (its servers' states and counters).
    stats: Option<PathBuf>,
    /// The signal that stops it gracefully: HAProxy's SIGUSR1, nginx's SIGQUIT.
    graceful: i32,
}

impl Proxy {
    fn spawn(mut cmd: Command, port: u16, stats: Option<PathBuf>, graceful: i32) -> Proxy {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the proxy");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let readers = [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ]
        .into_iter()
        .map(|out| {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            })
        })
        .collect();
        let proxy = Proxy { child, url: format!("http://127.0.0.1:{port}"), lines, readers, stats, graceful };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the proxy did not listen:\n{}", proxy.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        proxy
    }

    pub fn log(&self) -> String {
        self.lines().join("\n")
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Stops the proxy gracefully (it finishes what it serves, logs it and
    /// exits) and returns every line it wrote: read to the end of its
    /// output, none still on its way through the pipe.
    pub fn stop(mut self) -> Vec<String> {
        extern "C" {
            fn kill(pid: i32, sig: i32) -> i32;
        }
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { kill(self.child.id() as i32, self.graceful) }, 0);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the proxy did not stop:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        for reader in std::mem::take(&mut self.readers) {
            reader.join().expect("the proxy's output reader");
        }
        self.lines()
    }

    /// HAProxy's `show stat` row of `server` in backend `rkllmd`, by column
    /// name (`status`: UP, DOWN, …; `chkdown`: times it went down).
    pub fn server_stat(&self, server: &str) -> std::collections::HashMap<String, String> {
        use std::io::{Read, Write};
        let path = self.stats.as_ref().expect("HAProxy's stats socket");
        let mut socket = std::os::unix::net::UnixStream::connect(path).expect("HAProxy's stats socket");
        socket.write_all(b"show stat\n").unwrap();
        let mut csv = String::new();
        socket.read_to_string(&mut csv).unwrap();
        let mut rows = csv.lines();
        let header: Vec<&str> = rows.next().unwrap_or_default().trim_start_matches("# ").split(',').collect();
        let row = rows
            .map(|r| r.split(',').collect::<Vec<_>>())
            .find(|r| r.first() == Some(&"rkllmd") && r.get(1) == Some(&server))
            .unwrap_or_else(|| panic!("no {server} in HAProxy's stats:\n{csv}"));
        header.iter().map(|h| h.to_string()).zip(row.iter().map(|v| v.to_string())).collect()
    }

    /// Polls HAProxy's stats until `server`'s status satisfies `pred`
    /// (within `bound`); when it did.
    pub async fn wait_status(&self, server: &str, pred: impl Fn(&str) -> bool, bound: Duration) -> Instant {
        let deadline = Instant::now() + bound;
        loop {
            let stat = self.server_stat(server);
            if pred(&stat["status"]) {
                return Instant::now();
            }
            assert!(Instant::now() < deadline, "{server} still {} after {bound:?}: {stat:?}", stat["status"]);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shipped HAProxy or nginx config `file` in front of `boards`.
pub fn front(file: &str, dir: &Path, boards: &[Daemon]) -> Proxy {
    if file.starts_with("nginx") {
        nginx_with(file, dir, boards)
    } else {
        haproxy_with(file, dir, boards)
    }
}

fn haproxy_with(file: &str, dir: &Path, boards: &[Daemon]) -> Proxy {
    let port = free_port();
    let config = dir.join("haproxy.cfg");
    // A stats socket added for the test: the servers' states, read as HAProxy holds them.
    let stats = dir.join("haproxy.sock");
    let replace = [
        ("bind :8080", format!("bind 127.0.0.1:{port}")),
        ("\nglobal\n", format!("\nglobal\n    stats socket {}\n", stats.display())),
    ];
    std::fs::write(&config, shipped(file, boards, &replace)).unwrap();
    let mut cmd = Command::new(debian_binary(provision::HAPROXY));
    cmd.arg("-db").arg("-f").arg(&config);
    // SIGUSR1: HAProxy's soft stop.
    Proxy::spawn(cmd, port, Some(stats), 10)
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
    // SIGQUIT: nginx's graceful shutdown.
    Proxy::spawn(cmd, port, None, 3)
}

/// HAProxy's own queue wait (`Tw` of its httplog line, ms) for every chat
/// request it logged (`lines`: its whole log, `Proxy::stop`).
pub fn haproxy_queue_waits(lines: &[String]) -> Vec<f64> {
    lines
        .iter()
        .filter(|l| l.contains("POST /v1/chat/completions"))
        // client [date] frontend backend/server TR/Tw/Tc/Tr/Ta status …
        .filter_map(|l| l.split_whitespace().nth(4)?.split('/').nth(1)?.parse::<f64>().ok())
        .filter(|tw| *tw >= 0.0)
        .collect()
}
