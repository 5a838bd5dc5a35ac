//! The shipped front ends (docs/examples/) run by tests/front_ends.rs:
//! HAProxy and nginx from Debian's packages (installed by the test itself
//! when missing and run as root, `common::provision`), in front of boards
//! on loopback; only the configs' addresses are changed.

pub mod load;

use crate::common::{provision, Daemon};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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

/// A proxy process, its output lines stamped as they arrive.
pub struct Proxy {
    child: Child,
    pub url: String,
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

    pub fn log(&self) -> String {
        self.lines().join("\n")
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().iter().map(|(_, l)| l.clone()).collect()
    }

    /// When a line containing `needle` was printed after `since`, waiting up
    /// to `within`.
    pub fn line_at(&self, needle: &str, since: Instant, within: Duration) -> Option<Instant> {
        let deadline = Instant::now() + within;
        loop {
            let found =
                self.lines.lock().unwrap().iter().find(|(at, l)| *at >= since && l.contains(needle)).map(|l| l.0);
            if found.is_some() || Instant::now() > deadline {
                return found;
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
    std::fs::write(&config, shipped(file, boards, &[("bind :8080", format!("bind 127.0.0.1:{port}"))])).unwrap();
    let mut cmd = Command::new(debian_binary(provision::HAPROXY));
    cmd.arg("-db").arg("-f").arg(&config);
    Proxy::spawn(cmd, port)
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

/// HAProxy's own queue wait (`Tw` of its httplog line, ms) for every chat
/// request it logged.
pub fn haproxy_queue_waits(proxy: &Proxy) -> Vec<f64> {
    proxy
        .lines()
        .iter()
        .filter(|l| l.contains("POST /v1/chat/completions"))
        // client [date] frontend backend/server TR/Tw/Tc/Tr/Ta status …
        .filter_map(|l| l.split_whitespace().nth(4)?.split('/').nth(1)?.parse::<f64>().ok())
        .filter(|tw| *tw >= 0.0)
        .collect()
}
