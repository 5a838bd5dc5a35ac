//! Test harness: the real `rkllmd` binary on an ephemeral port, real HTTP.
#![allow(dead_code)] // each test binary uses a different part of the harness

pub mod provision;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Daemon {
    pub url: String,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    /// The thread reading its stderr: joined by `exit`, so that the log it
    /// returns holds every line the daemon wrote.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Daemon {
    /// Starts `rkllmd --port 0 ARGS…` and waits for its "listening on" line.
    pub fn start(args: &[&str]) -> Daemon {
        Self::start_with_env(args, &[])
    }

    /// Starts it on the simulator built as a library and loaded like the
    /// real one (`--backend rkllm --lib librkllm_sim.so`), then ARGS.
    pub fn start_dlopen(args: &[&str]) -> Daemon {
        let lib = sim_cdylib();
        let lib = lib.to_str().expect("a UTF-8 target path");
        Self::start(&[&["--backend", "rkllm", "--lib", lib][..], args].concat())
    }

    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Self::start_in(None, args, env)
    }

    /// As `start_with_env`, in working directory `dir` (if given).
    pub fn start_in(dir: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Self::launch(dir, 0, args, env)
    }

    /// Starts it on `port`: a board restarted at the address a front end
    /// knows it by (tests/front_ends.rs).
    pub fn start_at(port: u16, args: &[&str]) -> Daemon {
        Self::launch(None, port, args, &[])
    }

    fn launch(dir: Option<&Path>, port: u16, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkllmd"));
        if let Some(dir) = dir {
            cmd.current_dir(dir);
        }
        cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(args)
            .env_remove("RKLLM_LIB")
            .env("RKLLMD_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn rkllmd");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on http://") {
                    let url = line[at + "listening on ".len()..].split_whitespace().next().unwrap_or("").to_owned();
                    let _ = tx.send(url);
                }
                sink.lock().unwrap().push(line);
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => Daemon { url, child, log, reader: Some(reader) },
            Err(_) => {
                let _ = child.kill();
                panic!("rkllmd did not become ready; its log:\n{}", log.lock().unwrap().join("\n"));
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Whether a log line containing `needle` arrives within 60 s (stderr is
    /// read by another thread, so a line written before a reply may show up
    /// in `log()` only after the reply). For a moment nothing else marks;
    /// what a test asserts of the log it reads after the exit (`exit`).
    pub fn wait_log(&self, needle: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.log().contains(needle) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// SIGTERM, then the exit status (within 60 s).
    pub fn terminate(self) -> std::process::ExitStatus {
        self.exit().0
    }

    /// SIGTERM, the exit status (within 60 s: a busy machine delays the
    /// shutdown, a hung one never ends it) and the whole log, read to the
    /// end of the daemon's stderr — what an operator reads, with no line
    /// still on its way through the pipe.
    pub fn exit(mut self) -> (std::process::ExitStatus, String) {
        // SAFETY: plain kill(2) on our child's pid.
        unsafe { libc_kill(self.child.id() as i32, 15) };
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "rkllmd did not exit after SIGTERM; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the log reader");
        }
        (status, self.log())
    }

    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::new()
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.client().post(format!("{}{path}", self.url)).json(&body).send().await.unwrap()
    }

    pub async fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        let r = self.client().get(format!("{}{path}", self.url)).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap())
    }

    /// Polls `/health` until `pred` holds on its queue (bounded).
    pub async fn wait_queue(&self, pred: impl Fn(u64, u64) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, h) = self.get_json("/health").await;
            let q = &h["queue"];
            if pred(q["running"].as_u64().unwrap(), q["waiting"].as_u64().unwrap()) {
                return;
            }
            assert!(Instant::now() < deadline, "queue never reached the expected state: {h}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Daemon {
    /// A sample's value on `/metrics`: `name` with its labels as written
    /// there (`rkllmd_x_total{model="m"}`); `None` when there is none.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        let text = self.client().get(format!("{}/metrics", self.url)).send().await.unwrap().text().await.unwrap();
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// Polls `/metrics` until `name`'s value satisfies `pred`, for up to 60 s
    /// (a request is counted when it is recorded, which may come just after
    /// its reply, and a busy machine delays it); whether it did.
    pub async fn wait_metric(&self, name: &str, pred: impl Fn(f64) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.metric(name).await.is_some_and(&pred) {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Polls `/health` until the running request has generated a token.
    pub async fn wait_generating(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.get_json("/health").await.1["queue"]["running_tokens"].as_u64() == Some(0) {
            assert!(Instant::now() < deadline, "no request started generating");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One SSE event and when it arrived.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub data: String,
    pub at: Instant,
}

impl SseEvent {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.data))
    }
}

/// Reads a whole SSE response, stamping each `data:` event on arrival.
/// Comment lines (keep-alives) are counted separately.
pub async fn read_sse(mut response: reqwest::Response) -> (Vec<SseEvent>, usize) {
    let mut buf = String::new();
    let mut events = Vec::new();
    let mut comments = 0;
    while let Some(bytes) = response.chunk().await.unwrap() {
        let at = Instant::now();
        buf.push_str(std::str::from_utf8(&bytes).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            for line in block.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    events.push(SseEvent { data: data.to_owned(), at });
                } else if line.starts_with(':') {
                    comments += 1;
                }
            }
        }
    }
    assert!(buf.trim().is_empty(), "unterminated SSE data: {buf:?}");
    (events, comments)
}

pub fn chat(model: &str, content: &str) -> serde_json::Value {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": content}]})
}

/// The simulated runtime built as a drop-in librkllmrt.so (a cdylib of the workspace).
/// A `width`×`height` PNG of one colour.
pub fn png(width: u32, height: u32, rgb: [u8; 3]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_pixel(width, height, image::Rgb(rgb)).write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// A PNG's bytes as a `data:` URL, as chat clients send images.
pub fn data_url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

pub fn sim_cdylib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps.join("librkllm_sim.so"), deps.parent().unwrap().join("librkllm_sim.so")]
        .into_iter()
        .find(|p| p.exists())
        .expect("librkllm_sim.so not built: run the tests with `cargo test --workspace`")
}

/// Writes a sim script (prompt substring → reply) to a temp file.
pub fn script(entries: &[(&str, &str)]) -> tempfile::NamedTempFile {
    let json: Vec<_> = entries.iter().map(|(m, r)| serde_json::json!({"match": m, "reply": r})).collect();
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), serde_json::to_string(&json).unwrap()).unwrap();
    f
}

pub fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

/// Reads the timings log until it has `n` lines (the engine writes each line
/// as the request ends, on a thread of its own); gives up after 10 s with
/// what is there.
pub fn timings_log_lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n || Instant::now() > deadline {
            return text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The simulator's call record (`record=` in a `sim:` spec): its calls named `call`, in order.
pub fn sim_records(path: &Path, call: &str) -> Vec<serde_json::Value> {
    let records = without_auto_probe(sim_calls(path));
    records.into_iter().filter(|r| r["call"] == call).collect()
}

/// Every call the simulated runtime recorded, in order.
pub fn sim_calls(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).collect()
}

/// The calls without a load's probing under `batch = "auto"` on a runtime
/// that refuses short batches (tests/batch_auto.rs checks it): a handle
/// opened with several slots, its probe and timing runs (all of the probe's
/// one-character prompt, `engine/short_batch.rs`, `engine/filler_cost.rs`),
/// each handle's destroy before the handle the model is served with, and
/// the timing run on a handle opened again with one slot — what a test of
/// its requests' runs does not ask about. Where the probe is accepted
/// nothing is opened again, and nothing is left out.
fn without_auto_probe(calls: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    let call = |i: usize| calls.get(i).and_then(|r| r["call"].as_str()).unwrap_or_default();
    let probe_prompt = |r: &serde_json::Value| {
        r["prompt"] == " " || r["inputs"].as_array().is_some_and(|inputs| inputs.iter().any(|x| x["prompt"] == " "))
    };
    // A probe's run and what follows it on the runtime: its end, its abort, the clear after it.
    let probing = |i: usize| {
        (call(i) == "run" && probe_prompt(&calls[i])) || ["run_end", "abort", "clear_kv_cache"].contains(&call(i))
    };
    let mut kept = Vec::with_capacity(calls.len());
    let mut i = 0;
    while i < calls.len() {
        let batched_init = call(i) == "init" && calls[i]["extend_param"]["n_batch"].as_u64() > Some(1);
        // From the batched init on: probing, then a destroy and the next init, as often as
        // the load opens the model again; a handle destroyed before any probing (a model
        // opened again for the context it was converted for) is not part of it.
        let (mut j, mut served, mut probed) = (i + 1, None, false);
        while batched_init && j < calls.len() {
            if probing(j) {
                (j, probed) = (j + 1, true);
            } else if probed && call(j) == "destroy" && call(j + 1) == "init" {
                (served, probed) = (Some(j + 1), false);
                j += 2;
            } else {
                break;
            }
        }
        match served {
            Some(init) => {
                kept.push(calls[init].clone());
                i = j;
            }
            None => {
                kept.push(calls[i].clone());
                i += 1;
            }
        }
    }
    kept
}

/// Asserts that the daemon refuses each of these settings as a configuration error (exit 2).
pub fn assert_config_errors(cases: &[&[&str]]) {
    for bad in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_rkllmd"))
            .args(*bad)
            .arg("--print-config")
            .env_remove("RKLLM_LIB")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Sends raw bytes to `addr` (`host:port`), reads until the server closes
/// (at most `wait`); returns what came back.
pub fn raw_at(addr: &str, bytes: &[u8], wait: Duration) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// The status and JSON body of a raw HTTP/1.1 response.
pub fn parse(response: &[u8]) -> (u16, serde_json::Value) {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no response head: {text:?}"));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    (status, serde_json::from_str(body).unwrap_or_else(|e| panic!("body not JSON ({e}): {body:?}")))
}

/// The Python suite's virtualenv (`.venv`, git-ignored), created on first
/// use and brought up to date when tests/python/requirements.txt changes (a
/// copy of the one installed is kept in the venv). Installing needs PyPI:
/// offline, this fails and says so (README, "Tests") — it never skips.
pub fn python_venv() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join(".venv");
    let wanted = root.join("tests/python/requirements.txt");
    let installed = venv.join("requirements.installed.txt");
    let run = |cmd: &mut Command, what: &str| {
        let status = cmd.status().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        assert!(status.success(), "{what} failed ({status}): {cmd:?}");
    };
    if !venv.join("bin/pip").exists() {
        provision::require(&[provision::PYTHON3_VENV]);
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv), "creating .venv (python3 -m venv)");
    }
    if std::fs::read(&wanted).ok() != std::fs::read(&installed).ok() {
        run(
            Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "--disable-pip-version-check", "-r"])
                .arg(&wanted),
            "installing tests/python/requirements.txt from PyPI (offline? see README, \"Tests\": \
             install them once while online, or into .venv from a local index)",
        );
        std::fs::copy(&wanted, &installed).unwrap_or_else(|e| panic!("cannot copy {}: {e}", wanted.display()));
    }
    venv
}

/// Runs `rkllmd ARGS…` that must exit on its own (a start that fails), and
/// returns its output; one still running after `within` is killed and the
/// test fails — a start that was meant to fail and serves instead would
/// otherwise hang the test.
pub fn run_to_exit(command: &mut Command, within: Duration) -> std::process::Output {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn rkllmd");
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!("still running after {within:?}: {}", String::from_utf8_lossy(&output.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// What a conversation's client task needs of a daemon: its turns are
/// non-streamed chat completions of `model`, up to 64 tokens each.
#[derive(Clone)]
pub struct Chats {
    pub client: reqwest::Client,
    pub url: String,
    pub model: &'static str,
}

impl Chats {
    pub fn of(d: &Daemon, model: &'static str) -> Chats {
        Chats { client: d.client(), url: d.url.clone(), model }
    }

    /// One turn of `messages`, answered 200.
    pub async fn turn(&self, messages: &[serde_json::Value]) -> Turn {
        let body = serde_json::json!({"model": self.model, "messages": messages, "max_tokens": 64});
        let r = self.client.post(format!("{}/v1/chat/completions", self.url)).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        Turn::of(&r.json().await.unwrap())
    }
}

/// One chat completion's reply text, usage and timings.
#[derive(Debug, Clone)]
pub struct Turn {
    pub content: String,
    pub usage: serde_json::Value,
    pub timings: serde_json::Value,
}

impl Turn {
    /// From a non-streamed chat completion's body.
    pub fn of(body: &serde_json::Value) -> Turn {
        let content = body["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_owned();
        Turn { content, usage: body["usage"].clone(), timings: body["timings"].clone() }
    }
    pub fn cached(&self) -> i64 {
        self.usage["prompt_tokens_details"]["cached_tokens"].as_i64().unwrap()
    }
    pub fn prompt(&self) -> i64 {
        self.usage["prompt_tokens"].as_i64().unwrap()
    }
    pub fn completion(&self) -> i64 {
        self.usage["completion_tokens"].as_i64().unwrap()
    }
}
