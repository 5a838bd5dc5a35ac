//! The first requests opencode and aider sent, captured on loopback
//! (tests/fixtures/opencode, tests/fixtures/aider; docs/clients.md says
//! how), replayed over HTTP to a model converted for 16k: opencode's
//! `max_tokens: 32000` is a ceiling, its ten tools fit, the model's call of
//! its `bash` tool comes back as a tool call and the turn with the tool's
//! output continues the cached conversation; aider's whole-file edit comes
//! back as written.

mod common;
use common::*;
use serde_json::{json, Value};

const CALL_BASH: &str =
    "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -S | head -3\"}}\n</tool_call>";
const LISTING: &str = "big.bin\nsmall.txt\n";
const LARGEST: &str = "The largest file here is big.bin.";
const EDIT: &str = "hello.py\n```python\ndef greet():\n    print(\"hello world\")\n```\n";
/// What opencode sends as `x-session-id` (and `x-session-affinity`) with every request of a session.
const SESSION: &str = "ses_de06e9e00ffepsYoTtsi9aUvzD";

fn fixture(path: &str) -> Value {
    let path = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let mut body: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    body["model"] = json!("m");
    body
}

fn daemon(script: &tempfile::NamedTempFile) -> Daemon {
    let spec = format!("sim:instant?context_limit=16384&script={}", script.path().display());
    Daemon::start(&["--model", &spec, "--model-id", "m"])
}

/// A streamed chat completion put together: content, tool calls, finish reason, usage.
struct Streamed {
    content: String,
    calls: Vec<Value>,
    finish: String,
    usage: Value,
}

async fn streamed(d: &Daemon, body: &Value) -> (reqwest::header::HeaderMap, Streamed) {
    let r = d.client().post(format!("{}/v1/chat/completions", d.url)).header("x-session-id", SESSION).json(body);
    let r = r.send().await.unwrap();
    let headers = r.headers().clone();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let (events, _) = read_sse(r).await;
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    let chunks: Vec<Value> = events.iter().filter(|e| e.data != "[DONE]").map(SseEvent::json).collect();
    let delta = |c: &Value, field: &str| c["choices"][0]["delta"][field].clone();
    let content = chunks.iter().filter_map(|c| delta(c, "content").as_str().map(str::to_owned)).collect();
    // A call's first delta names it; the rest carry pieces of its arguments.
    let mut calls: Vec<Value> = Vec::new();
    for piece in chunks.iter().filter_map(|c| delta(c, "tool_calls").as_array().cloned()).flatten() {
        let index = piece["index"].as_u64().unwrap() as usize;
        if index == calls.len() {
            calls.push(piece);
        } else {
            let args = format!(
                "{}{}",
                calls[index]["function"]["arguments"].as_str().unwrap(),
                piece["function"]["arguments"].as_str().unwrap()
            );
            calls[index]["function"]["arguments"] = json!(args);
        }
    }
    let finish = chunks.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str().map(str::to_owned));
    let usage = chunks.iter().rev().find(|c| c["usage"].is_object()).map(|c| c["usage"].clone());
    let streamed = Streamed { content, calls, finish: finish.unwrap(), usage: usage.expect("a usage chunk") };
    (headers, streamed)
}

fn tokens(usage: &Value) -> (u64, u64) {
    (usage["prompt_tokens"].as_u64().unwrap(), usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap())
}

/// opencode 1.18.33's `opencode run "which file here is the largest?"`:
/// 200 (not 400 on `max_tokens: 32000`), every tool kept, the call of
/// `bash` as a tool call; then the turn opencode sends with the command's
/// output reads the first turn from the cache.
#[tokio::test]
async fn opencode_first_turn_and_its_bash_loop() {
    let replies = script(&[("<tool_response>", LARGEST), ("which file here is the largest", CALL_BASH)]);
    let d = daemon(&replies);
    let first = fixture("opencode/run_1.18.33_first_turn.json");
    assert_eq!(first["max_tokens"], 32000);
    let (h, turn) = streamed(&d, &first).await;
    assert_eq!(h["x-rkllmd-max-tokens-clamped"], "32000->2048");
    assert!(h.get("x-rkllmd-tools-dropped").is_none(), "opencode's 10 tools fit 16k");
    assert_eq!(turn.finish, "tool_calls");
    assert_eq!(turn.content, "");
    assert_eq!(turn.calls.len(), 1, "{:?}", turn.calls);
    let call = &turn.calls[0];
    assert_eq!(call["function"]["name"], "bash");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"command": "ls -S | head -3"}));
    let (prompt1, cached1) = tokens(&turn.usage);
    assert!((12_000..16_384 - 2_048).contains(&prompt1), "system prompt and 10 tools: {prompt1} tokens");
    assert_eq!(cached1, 0);

    // Turn two as opencode sends it: the call (arguments re-serialised) and its output appended.
    let mut second = first;
    let messages = second["messages"].as_array_mut().unwrap();
    let id = call["id"].as_str().unwrap();
    messages.push(json!({"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": "bash", "arguments": "{\"command\":\"ls -S | head -3\"}"}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": LISTING}));
    let (_, turn) = streamed(&d, &second).await;
    assert_eq!((turn.finish.as_str(), turn.content.as_str()), ("stop", LARGEST));
    let (prompt2, cached2) = tokens(&turn.usage);
    assert!(prompt2 > prompt1);
    assert!(cached2 * 100 >= prompt1 * 95, "{cached2} of the first turn's {prompt1} tokens cached");
    // Both recorded as 200s, so nothing else was (an error event in a 200
    // stream would be a 5xx there).
    let done = |reason: &str| {
        format!("rkllmd_requests_total{{model=\"m\",status=\"200\",finish_reason=\"{reason}\",kind=\"completion\"}}")
    };
    for reason in ["tool_calls", "stop"] {
        assert!(d.wait_metric(&done(reason), |n| n == 1.0).await, "the {reason} turn recorded as a 200");
    }
    let metrics = d.client().get(format!("{}/metrics", d.url)).send().await.unwrap().text().await.unwrap();
    let counted = metrics.lines().filter(|l| l.starts_with("rkllmd_requests_total{")).count();
    assert_eq!(counted, 2, "{metrics}");
}

/// aider 0.86.2's first turn with `hello.py` added to the chat (its `whole`
/// edit format, `temperature: 0`, no `max_tokens`): the model's edit comes
/// back intact, the fence and the file's name included, for aider to apply.
#[tokio::test]
async fn aider_first_turn_gets_its_whole_file_edit() {
    let replies = script(&[("greet the world in hello.py", EDIT)]);
    let d = daemon(&replies);
    let body = fixture("aider/whole_0.86.2_first_turn.json");
    assert!(body.get("max_tokens").is_none() && body.get("tools").is_none());
    let (h, turn) = streamed(&d, &body).await;
    assert!(h.get("x-rkllmd-max-tokens-clamped").is_none());
    assert_eq!((turn.finish.as_str(), turn.content.as_str(), turn.calls.len()), ("stop", EDIT, 0));
    let (prompt, _) = tokens(&turn.usage);
    assert!((1_000..4_096).contains(&prompt), "examples, file and reminder: {prompt} tokens");
}
