//! `/v1/responses` as Codex CLI speaks it: its first request
//! (tests/fixtures/codex/first_turn.json: a namespace tool, a custom
//! `apply_patch` tool, `web_search`, `reasoning.summary`, `include`,
//! `store: false`, streamed) replayed over HTTP, then the tool loop it runs
//! — the whole input resent each turn, tool outputs as items — with the
//! names of namespaced and custom tools mapped both ways; and a request
//! Codex CLI 0.171.0 sent (exec_0.171.0_say_hi.json), replayed as captured.

mod common;
use common::*;
use serde_json::{json, Value};

const CALL_LS: &str = "<tool_call>\n{\"name\": \"exec_command\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>";
const LISTING: &str = "README.md\nsrc\ntests";
const ANSWER: &str = "Hi! The repository holds README.md, src and tests.";
const CALL_SPAWN: &str = "<tool_call>\n{\"name\": \"multi_agent_v1__spawn_agent\", \"arguments\": {\"message\": \"count the lines\"}}\n</tool_call>";
const SPAWNED: &str = "agent-42 started";
const PATCH: &str = "*** Begin Patch\n*** Update File: README.md\n@@\n-helo\n+hello\n*** End Patch\n";
const PATCHED: &str = "Success. Updated the following files: M README.md";

fn load(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/codex/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut body: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    body["model"] = json!("m");
    body
}

fn fixture() -> Value {
    load("first_turn.json")
}

/// The fixture with its last user message replaced.
fn asking(text: &str) -> Value {
    let mut body = fixture();
    let input = body["input"].as_array_mut().unwrap();
    *input.last_mut().unwrap() =
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]});
    body
}

fn codex_daemon(script: &tempfile::NamedTempFile) -> Daemon {
    let spec = format!("sim:instant?script={}", script.path().display());
    Daemon::start(&["--backend", "sim", "--model", &spec, "--model-id", "m", "--max-context-len", "16384"])
}

fn the_script() -> tempfile::NamedTempFile {
    // The whole prompt is matched, earlier turns too: the entries for the turns after a tool ran come first.
    let patch_call =
        format!("<tool_call>\n{}\n</tool_call>", json!({"name": "apply_patch", "arguments": {"input": PATCH}}));
    script(&[
        (LISTING, ANSWER),
        (SPAWNED, "The helper is counting."),
        (PATCHED, "Fixed the typo."),
        ("List the files", CALL_LS),
        ("Start a helper", CALL_SPAWN),
        ("Fix the typo", &patch_call),
    ])
}

/// The events' JSON, each checked to carry its `type` and the next `sequence_number`.
async fn events(r: reqwest::Response) -> Vec<Value> {
    assert_eq!(r.status(), 200);
    let (events, _) = read_sse(r).await;
    let events: Vec<Value> = events.iter().map(SseEvent::json).collect();
    for (n, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], n, "{e}");
        assert!(e["type"].as_str().is_some_and(|t| t.starts_with("response.")), "{e}");
    }
    events
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

fn completed(events: &[Value]) -> &Value {
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed", "{last}");
    &last["response"]
}

/// The first request as Codex sends it is served (not 400 `tools[4].type`):
/// the built-in `web_search` is left out and reported, the fields that mean
/// nothing here are named, and the stream is every event Codex reads. The
/// second turn resends everything (`store: false`) with the call's output,
/// and the first turn's prompt and reply come from the cache.
#[tokio::test]
async fn codex_first_request_and_its_tool_loop() {
    let script = the_script();
    let d = codex_daemon(&script);
    let first = fixture();
    let r = d.post("/v1/responses", first.clone()).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let h = r.headers().clone();
    assert_eq!(h["x-rkllmd-tools-unsupported"], "web_search");
    let ignored: Vec<&str> = h["x-rkllmd-ignored-params"].to_str().unwrap().split(',').collect();
    for field in ["include", "parallel_tool_calls", "reasoning.summary", "text.verbosity"] {
        assert!(ignored.contains(&field), "{field} not in {ignored:?}");
    }
    assert!(!ignored.contains(&"store") && !ignored.contains(&"prompt_cache_key"), "{ignored:?}");
    assert!(h.get("x-rkllmd-tools-dropped").is_none(), "every function fits 16k");
    let ev = events(r).await;
    let k = kinds(&ev);
    assert_eq!(&k[..3], ["response.created", "response.in_progress", "response.output_item.added"], "{k:?}");
    assert!(k[3..k.len() - 3].iter().all(|t| *t == "response.function_call_arguments.delta"), "{k:?}");
    assert_eq!(
        &k[k.len() - 3..],
        ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    );
    let done = completed(&ev);
    let call = &done["output"][0];
    assert_eq!(
        (&call["type"], &call["name"], &call["status"]),
        (&json!("function_call"), &json!("exec_command"), &json!("completed"))
    );
    assert!(call.get("namespace").is_none(), "{call}");
    assert_eq!(serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(), json!({"cmd": "ls"}));
    assert_eq!(ev[2]["item"]["call_id"], call["call_id"]);
    assert_eq!(done["timings"]["tools_unsupported"], 1);
    assert_eq!(done["timings"]["tools_dropped"], 0);
    let prompt1 = done["usage"]["input_tokens"].as_u64().unwrap();
    let reply1 = done["usage"]["output_tokens"].as_u64().unwrap();
    assert!(prompt1 > 2_000, "instructions, tools and input: {prompt1} tokens");
    assert_eq!(done["usage"]["input_tokens_details"]["cached_tokens"], 0);

    // Turn two, as Codex sends it: the same body, the call and its output appended.
    let mut second = first;
    let input = second["input"].as_array_mut().unwrap();
    input.push(call.clone());
    input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": LISTING}));
    let ev = events(d.post("/v1/responses", second).await).await;
    let k = kinds(&ev);
    let message =
        ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
    assert_eq!(&k[..4], message, "{k:?}");
    assert!(k[4..k.len() - 4].iter().all(|t| *t == "response.output_text.delta"), "{k:?}");
    let closing =
        ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"];
    assert_eq!(&k[k.len() - 4..], closing);
    let text: String = ev.iter().filter_map(|e| e["delta"].as_str()).collect();
    assert_eq!(text, ANSWER);
    assert_eq!(ev[ev.len() - 4]["text"], ANSWER);
    let done = completed(&ev);
    assert_eq!(done["output"][0]["content"][0]["text"], ANSWER);
    assert_eq!(done["usage"]["input_tokens_details"]["cached_tokens"], prompt1 + reply1, "the whole first turn reused");
    // Both turns sent `web_search`: one WARN line each (read after the exit).
    let (_, log) = d.exit();
    let warn = log.lines().filter(|l| l.contains("WARN") && l.contains("tools=web_search")).count();
    assert_eq!(warn, 2, "one WARN line per request: {log}");
}

/// What Codex CLI 0.171.0 sent for `codex exec "say hi"` (captured on
/// loopback): served, `web_search` left out, its namespace's tools in the
/// prompt under their joined names (the script answers only if the prompt
/// holds one), `client_metadata` and `reasoning.summary` named as ignored.
#[tokio::test]
async fn a_captured_codex_request_is_served_as_sent() {
    let script = script(&[("multi_agent_v1__spawn_agent", "hi"), ("", "the namespace was not in the prompt")]);
    let spec = format!("sim:instant?script={}", script.path().display());
    // Every tool of it fits 32k (at 16k the tool selection leaves some out).
    let d = Daemon::start(&["--backend", "sim", "--model", &spec, "--model-id", "m", "--max-context-len", "32768"]);
    let r = d.post("/v1/responses", load("exec_0.171.0_say_hi.json")).await;
    assert_eq!(r.headers()["x-rkllmd-tools-unsupported"], "web_search");
    let ignored = r.headers()["x-rkllmd-ignored-params"].to_str().unwrap().to_owned();
    assert!(ignored.contains("client_metadata") && ignored.contains("reasoning.summary"), "{ignored}");
    let ev = events(r).await;
    let done = completed(&ev);
    assert_eq!(done["output"][0]["content"][0]["text"], "hi");
    assert_eq!(done["timings"]["tools_dropped"], 0);
}

/// A namespaced tool's call comes back as `{namespace, name}` and a custom
/// tool's as a `custom_tool_call` with its text; sent back in `input`, each
/// becomes the very call the model wrote (the cache reuses all of it).
#[tokio::test]
async fn namespaced_and_custom_calls_keep_the_clients_names_both_ways() {
    let script = the_script();
    let d = codex_daemon(&script);
    let mut body = asking("Start a helper to count the lines.");
    body["stream"] = json!(false);
    let r: Value = d.post("/v1/responses", body.clone()).await.json().await.unwrap();
    let call = &r["output"][0];
    assert_eq!(
        (&call["type"], &call["namespace"], &call["name"]),
        (&json!("function_call"), &json!("multi_agent_v1"), &json!("spawn_agent")),
        "{r}"
    );
    let first = r["usage"]["input_tokens"].as_u64().unwrap() + r["usage"]["output_tokens"].as_u64().unwrap();
    let input = body["input"].as_array_mut().unwrap();
    input.push(call.clone());
    input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": SPAWNED}));
    let r: Value = d.post("/v1/responses", body).await.json().await.unwrap();
    assert_eq!(r["output"][0]["content"][0]["text"], "The helper is counting.", "{r}");
    assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], first, "the call resent as the model wrote it");

    let mut body = asking("Fix the typo in README.md.");
    let ev = events(d.post("/v1/responses", body.clone()).await).await;
    let k = kinds(&ev);
    assert!(!k.contains(&"response.function_call_arguments.delta"), "{k:?}");
    let delta = ev.iter().find(|e| e["type"] == "response.custom_tool_call_input.delta").unwrap();
    let whole = ev.iter().find(|e| e["type"] == "response.custom_tool_call_input.done").unwrap();
    assert_eq!((&delta["delta"], &whole["input"]), (&json!(PATCH), &json!(PATCH)));
    assert_eq!(ev[2]["item"]["type"], "custom_tool_call");
    let done = completed(&ev);
    let call = &done["output"][0];
    assert_eq!(
        (&call["type"], &call["name"], &call["input"]),
        (&json!("custom_tool_call"), &json!("apply_patch"), &json!(PATCH))
    );
    let first = done["usage"]["input_tokens"].as_u64().unwrap() + done["usage"]["output_tokens"].as_u64().unwrap();
    let input = body["input"].as_array_mut().unwrap();
    input.push(call.clone());
    input.push(json!({"type": "custom_tool_call_output", "call_id": call["call_id"], "output": PATCHED}));
    let ev = events(d.post("/v1/responses", body).await).await;
    let done = completed(&ev);
    assert_eq!(done["output"][0]["content"][0]["text"], "Fixed the typo.");
    assert_eq!(done["usage"]["input_tokens_details"]["cached_tokens"], first);
}

/// Tools of types nothing here runs are left out and said so, whatever
/// they hold; only a tool that is not an object, or a function without a
/// valid name, is refused — named as the client sent it.
#[tokio::test]
async fn built_in_and_unknown_tools_are_left_out_and_reported() {
    let d = Daemon::start(&["--backend", "sim", "--model", "sim:instant?reply_tokens=4", "--model-id", "m"]);
    let tools = json!([{"type": "web_search_preview"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "code_interpreter", "container": {"type": "auto"}}, {"type": 42, "junk": [1, 2]}]);
    let body = json!({"model": "m", "input": "Hello", "tools": tools});
    let r = d.post("/v1/responses", body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-rkllmd-tools-unsupported"], "web_search_preview,file_search,code_interpreter,unknown");
    let b: Value = r.json().await.unwrap();
    assert_eq!((&b["status"], &b["timings"]["tools_unsupported"]), (&json!("completed"), &json!(4)));
    assert_eq!(b["tools"], tools, "the request's tools are echoed as sent");

    let refused = [
        (json!(["web_search"]), "tools[0]"),
        (
            json!([{"type": "web_search"}, {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "b c"}]}]),
            "tools[1].tools[0].name",
        ),
        (json!([{"type": "namespace", "name": "ns", "tools": {}}]), "tools[0].tools"),
    ];
    for (tools, param) in refused {
        let r = d.post("/v1/responses", json!({"model": "m", "input": "Hello", "tools": tools})).await;
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["param"], param, "{e}");
    }
    assert_eq!(d.get_json("/health").await.0, 200, "still serving");
}

/// `max_output_tokens` above what the server produces is a ceiling, as on
/// OpenAI: lowered to the server's `max_new_tokens` and said so, not a 400.
#[tokio::test]
async fn max_output_tokens_above_the_servers_limit_is_a_ceiling() {
    let d = Daemon::start(&[
        "--backend",
        "sim",
        "--model",
        "sim:instant?reply_tokens=40",
        "--model-id",
        "m",
        "--max-new-tokens",
        "16",
    ]);
    let r = d.post("/v1/responses", json!({"model": "m", "input": "Hello", "max_output_tokens": 128000})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-rkllmd-max-tokens-clamped"], "128000->16");
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["usage"]["output_tokens"], 16);
    assert_eq!(b["incomplete_details"]["reason"], "max_output_tokens");
    let r = d.post("/v1/responses", json!({"model": "m", "input": "Hello", "max_output_tokens": 8})).await;
    assert!(r.headers().get("x-rkllmd-max-tokens-clamped").is_none());
    let r = d.post("/v1/responses", json!({"model": "m", "input": "Hello", "max_output_tokens": 0})).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["param"], "max_output_tokens");
}
