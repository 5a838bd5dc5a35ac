//! A new agent session starts warm (issue 33, item 5): the system prompt
//! and tools an agent starts every session with are kept as a prompt-cache
//! file of their own, made in the first session's turn, and a second
//! session with another task prefills only that task — by the runtime's own
//! count (the simulator's record) — with the cache-off daemon's reply. A
//! runtime whose loaded file spares nothing switches the files off loudly.

mod common;

use common::{sim_records, Daemon, Turn};
use serde_json::{json, Value};
use std::path::Path;

const MODEL: &str = "m";

/// An agent's long, fixed instructions (about 1,100 tokens: over the default
/// `shared_prefix_min_tokens` of 512).
fn system() -> String {
    let rules = [
        "You are a coding agent working in the user's repository.",
        "Read the files you need before you change them, and keep every change small.",
        "Run the tests that cover what you touched, and report what they printed.",
        "Never delete a file you did not create in this session.",
        "Explain each command before you run it, in one short sentence.",
    ];
    (1..=30).map(|i| format!("Rule {i}: {}", rules[i % rules.len()])).collect::<Vec<_>>().join("\n")
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "shell",
            "description": "Runs a shell command in the repository and returns its output.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
        }},
        {"type": "function", "function": {
            "name": "read_file",
            "description": "Returns the text of a file in the repository.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
        }}
    ])
}

/// A session's first turn: the agent's start, then its task.
async fn first_turn(d: &Daemon, task: &str) -> Turn {
    let messages = json!([{"role": "system", "content": system()}, {"role": "user", "content": task}]);
    let body = json!({"model": MODEL, "messages": messages, "tools": tools(), "max_tokens": 12});
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status(), 200);
    Turn::of(&r.json().await.unwrap())
}

fn start(record: &Path, sim: &str, extra: &[&str]) -> Daemon {
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0&reply_tokens=12{sim}&record={}", record.display());
    Daemon::start(&[&["--model", &spec, "--model-id", MODEL][..], extra].concat())
}

async fn metrics(d: &Daemon) -> String {
    d.client().get(format!("{}/metrics", d.url)).send().await.unwrap().text().await.unwrap()
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

const TASKS: [&str; 2] = ["List the files in this directory.", "Why does the build fail? Read the log first."];

#[tokio::test]
async fn a_second_session_of_the_same_agent_prefills_only_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("on.jsonl");
    let on = start(&record, "", &[]);
    let off = start(&dir.path().join("off.jsonl"), "", &["--conversation-cache", "off"]);

    let first = first_turn(&on, TASKS[0]).await;
    assert_eq!(first.content, first_turn(&off, TASKS[0]).await.content, "the cache-off reply");
    // The first session made the file in its own turn: it prefilled everything.
    assert_eq!((first.timings["cache"].as_str(), first.cached()), (Some("miss"), 0), "{:?}", first.timings);
    assert_eq!(first.timings["prompt_n"].as_i64(), Some(first.prompt()), "both runs' prefill: {:?}", first.timings);

    let saving: Vec<Value> = sim_records(&record, "run")
        .into_iter()
        .filter(|r| r["prompt_cache"]["save_prompt_cache"] == 1 && r["keep_history"] == false)
        .collect();
    assert_eq!(saving.len(), 1, "one run of the agent's start alone saved its file");
    let prefix: Vec<i64> = saving[0]["token_ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let system_tokens = rkllm_sim::tokenize(&system()).len();
    assert!(prefix.len() > system_tokens, "the start holds the system prompt and the tools: {}", prefix.len());

    let second = first_turn(&on, TASKS[1]).await;
    assert_eq!(second.content, first_turn(&off, TASKS[1]).await.content, "the cache-off reply");
    assert_eq!(second.timings["cache"], "prefix", "{:?}", second.timings);
    assert_eq!(second.cached(), prefix.len() as i64, "{:?}", second.usage);
    let rest = second.prompt() - second.cached();
    assert_eq!(second.timings["prompt_n"].as_i64(), Some(rest), "{:?}", second.timings);
    // What the runtime itself did: the second session's run was sent its
    // whole prompt, starting with the file's ids, and prefilled only the rest.
    let runs = sim_records(&record, "run");
    let sent: Vec<i64> =
        runs.last().unwrap()["token_ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    assert!(sent.starts_with(&prefix) && sent.len() as i64 == second.prompt());
    let end = sim_records(&record, "run_end").pop().unwrap();
    assert_eq!(
        (end["prompt_cache_tokens"].as_i64(), end["prefill_tokens"].as_i64()),
        (Some(second.cached()), Some(rest))
    );

    let m = metrics(&on).await;
    assert_eq!(metric(&m, "rkllmd_conversation_cache_total{found=\"prefix\",reason=\"\"}"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "rkllmd_shared_prefixes_made_total"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "rkllmd_shared_prefix_off_total"), Some(0.0), "{m}");
}

#[tokio::test]
async fn the_file_lies_beside_the_saved_conversations_and_goes_with_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("shm");
    let on = start(&dir.path().join("on.jsonl"), "", &["--conversation-cache-dir", shm.to_str().unwrap()]);
    first_turn(&on, TASKS[0]).await;
    let files = |name: &str| -> usize {
        let dirs = std::fs::read_dir(&shm).unwrap().map(|d| d.unwrap().path()).collect::<Vec<_>>();
        dirs.iter()
            .flat_map(|d| std::fs::read_dir(d).unwrap())
            .filter(|f| f.as_ref().unwrap().file_name().to_string_lossy().starts_with(name))
            .count()
    };
    assert_eq!((files("prefix-"), files("conversation-")), (1, 1));
    let r = on.post("/v1/models/m/unload", json!({})).await;
    assert_eq!(r.status(), 200);
    let unloaded = "rkllmd_model_unloads_total{model=\"m\",reason=\"request\"}";
    assert!(on.wait_metric(unloaded, |n| n == 1.0).await, "the model was unloaded");
    assert_eq!(std::fs::read_dir(&shm).unwrap().count(), 0, "the model's directory is gone with its files");
}

#[tokio::test]
async fn a_loaded_file_that_spares_nothing_switches_the_files_off_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let on = start(&dir.path().join("on.jsonl"), "&cache_lies=1", &[]);
    let off = start(&dir.path().join("off.jsonl"), "", &["--conversation-cache", "off"]);
    for task in TASKS {
        let turn = first_turn(&on, task).await;
        assert_eq!(turn.content, first_turn(&off, task).await.content, "the cache-off reply");
        assert_eq!((turn.timings["cache"].as_str(), turn.cached()), (Some("miss"), 0), "{:?}", turn.timings);
    }
    assert!(on.wait_metric("rkllmd_shared_prefix_off_total", |n| n == 1.0).await, "switched off");
    let m = metrics(&on).await;
    assert_eq!(metric(&m, "rkllmd_shared_prefix_off_total"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "rkllmd_shared_prefixes_made_total"), Some(1.0), "made once, then off: {m}");
}

#[tokio::test]
async fn below_the_minimum_or_switched_off_no_file_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("on.jsonl");
    let on = start(&record, "", &["--shared-prefix-min-tokens", "0"]);
    for task in TASKS {
        let turn = first_turn(&on, task).await;
        assert_eq!(turn.timings["cache"], "miss", "{:?}", turn.timings);
    }
    let saving = sim_records(&record, "run").into_iter().filter(|r| r["keep_history"] == false).count();
    assert_eq!(saving, 0, "every run kept its history: no run of a start alone");
    let record = dir.path().join("big.jsonl");
    let on = start(&record, "", &["--shared-prefix-min-tokens", "100000"]);
    for task in TASKS {
        assert_eq!(first_turn(&on, task).await.timings["cache"], "miss");
    }
    assert_eq!(sim_records(&record, "run").into_iter().filter(|r| r["keep_history"] == false).count(), 0);
}

#[tokio::test]
async fn claude_codes_next_session_under_another_billing_header_starts_warm() {
    let dir = tempfile::tempdir().unwrap();
    let on = start(&dir.path().join("on.jsonl"), "", &[]);
    // Claude Code's first system block differs per session; the Messages API
    // keeps it out of the prompt, so the start is the same.
    let session = |hash: &str, task: &str| {
        json!({"model": MODEL, "max_tokens": 8, "system": [
            {"type": "text", "text": format!("x-anthropic-billing-header: cc_version=2.0.31; cc_entrypoint=cli; cch={hash}")},
            {"type": "text", "text": system()},
        ], "tools": [{"name": "Bash", "description": "Runs a shell command.", "input_schema":
            {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}],
        "messages": [{"role": "user", "content": task}]})
    };
    let mut usage = Vec::new();
    for (hash, task) in [("7a3f1", TASKS[0]), ("c0d9e", TASKS[1])] {
        let r = on.post("/v1/messages", session(hash, task)).await;
        assert_eq!(r.status(), 200);
        usage.push(r.json::<Value>().await.unwrap()["usage"].clone());
    }
    assert_eq!(usage[0]["cache_read_input_tokens"], 0, "{usage:?}");
    let cached = usage[1]["cache_read_input_tokens"].as_i64().unwrap();
    assert!(cached > rkllm_sim::tokenize(&system()).len() as i64, "{usage:?}");
    assert!(usage[1]["input_tokens"].as_i64().unwrap() < 40, "only the task was read anew: {usage:?}");
}
