//! Tools that do not fit the context are packed, not cut at a prefix of
//! their ranking: a tool too big for what is left is skipped and the next
//! one considered, so one huge description cannot cost a chat its small
//! core tools; and a call the model writes to any tool the client offered,
//! sent or dropped, comes back as a tool call, never as markup text.

mod common;

use common::{script, Daemon};
use serde_json::{json, Value};

fn function(name: &str, description: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "description": description,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
}

/// The case: a ~20 KB `weather_report` that ranks first and cannot
/// fit a 4,096 context, and a small `get_weather`.
fn weather_tools() -> Vec<Value> {
    let huge = "Weather report for a city: temperature, wind, rain and more. ".repeat(330);
    vec![function("weather_report", &huge), function("get_weather", "Get the current weather in a city.")]
}

const CALL: &str = "<tool_call>\n{\"name\": \"weather_report\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

fn start(record: &std::path::Path, script: &std::path::Path) -> Daemon {
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0&record={}&script={}", record.display(), script.display());
    Daemon::start(&["--model", &spec, "--model-id", "m", "--template", "chatml", "--conversation-cache", "off"])
}

fn last_prompt(record: &std::path::Path) -> String {
    common::sim_records(record, "run").last().unwrap()["prompt"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_tool_that_does_not_fit_is_skipped_and_the_next_one_kept() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let replies = script(&[("", "It is sunny.")]);
    let d = start(&record, replies.path());
    let body = json!({"model": "m", "tools": weather_tools(),
                      "messages": [{"role": "user", "content": "What is the weather report in Paris?"}]});
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-rkllmd-tools-dropped"], "1");
    let reply: Value = r.json().await.unwrap();
    assert_eq!(reply["timings"]["tools_dropped"], 1, "{reply}");
    let prompt = last_prompt(&record);
    assert!(prompt.contains("\"get_weather\""), "the small tool is sent: {prompt}");
    assert!(!prompt.contains("\"weather_report\""), "the huge one is not");
}

/// Every tool dropped (a context too small for either), or the call made to
/// the dropped one: the model's call is the client's tool call.
#[tokio::test]
async fn a_call_to_a_dropped_tool_is_a_tool_call() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let replies = script(&[("", CALL)]);
    let d = start(&record, replies.path());
    for stream in [false, true] {
        let body = json!({"model": "m", "tools": weather_tools(), "stream": stream,
                          "messages": [{"role": "user", "content": "What is the weather report in Paris?"}]});
        let r = d.post("/v1/chat/completions", body).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-rkllmd-tools-dropped"], "1");
        let (finish, calls, content) = if stream {
            let (events, _) = common::read_sse(r).await;
            let chunks: Vec<Value> = events.iter().filter(|e| e.data != "[DONE]").map(|e| e.json()).collect();
            let finish = chunks.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str().map(str::to_owned));
            let calls: Vec<Value> = chunks
                .iter()
                .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned())
                .flatten()
                .collect();
            let content: String =
                chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned)).collect();
            let named =
                calls.iter().filter_map(|c| c["function"]["name"].as_str()).map(str::to_owned).collect::<Vec<_>>();
            (finish.unwrap(), named, content)
        } else {
            let reply: Value = r.json().await.unwrap();
            let message = &reply["choices"][0]["message"];
            let named = message["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["function"]["name"].as_str().unwrap().to_owned())
                .collect();
            let content = message["content"].as_str().unwrap_or_default().to_owned();
            (reply["choices"][0]["finish_reason"].as_str().unwrap().to_owned(), named, content)
        };
        assert_eq!(finish, "tool_calls", "stream {stream}");
        assert_eq!(calls, ["weather_report"], "stream {stream}");
        assert!(!content.contains("<tool_call>"), "stream {stream}: markup as text: {content}");
    }
}

/// A tool the conversation names — even in a system message after the first
/// user turn, where Claude Code names Bash, Read and Edit — goes before one
/// the client merely listed first.
#[tokio::test]
async fn a_tool_named_by_the_instructions_is_kept_first() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let replies = script(&[("", "Hello.")]);
    let d = start(&record, replies.path());
    let padding = "It takes a city and answers with many details about it. ".repeat(120);
    let tools = [function("alpha_tool", &padding), function("get_weather", &padding)];
    let body = json!({"model": "m", "tools": tools, "messages": [
        {"role": "user", "content": "Hello there"},
        {"role": "system", "content": "When asked about the sky, call get_weather."}
    ]});
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-rkllmd-tools-dropped"], "1", "only one of the two fits");
    let prompt = last_prompt(&record);
    assert!(prompt.contains("\"get_weather\""), "the named tool is sent: {prompt}");
    assert!(!prompt.contains("\"alpha_tool\""), "the merely listed one is not");
}

/// A later turn keeps its first turn's tools while its prompt still fits
/// (borrowing up to half the reply's room), so a tool call and its output
/// that push the conversation past a budget step do not cost it its cache.
#[tokio::test]
async fn a_tool_loops_next_turn_keeps_the_same_tools_and_its_cache() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let call = "<tool_call>\n{\"name\": \"tool_0\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let replies = script(&[("<tool_response>", "Done."), ("", call)]);
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0&record={}&script={}", record.display(), replies.path().display());
    let d = Daemon::start(&["--model", &spec, "--model-id", "m", "--template", "chatml"]);
    let padding = "It takes a city and answers with details about it. ".repeat(20);
    let tools: Vec<Value> = (0..12).map(|i| function(&format!("tool_{i}"), &padding)).collect();
    let mut messages = vec![json!({"role": "user", "content": "Hello"})];
    let body = |messages: &Vec<Value>| json!({"model": "m", "tools": tools, "messages": messages});
    let r = d.post("/v1/chat/completions", body(&messages)).await;
    assert_eq!(r.status(), 200);
    let first_dropped = r.headers()["x-rkllmd-tools-dropped"].to_str().unwrap().to_owned();
    let reply: Value = r.json().await.unwrap();
    let first = reply["usage"].clone();
    let message = &reply["choices"][0]["message"];
    assert_eq!(message["tool_calls"][0]["function"]["name"], "tool_0", "{reply}");
    messages.push(message.clone());
    // An output long enough to cross a budget step (an eighth of the context).
    let output = "The weather in Paris is mild and the sky is clear today. ".repeat(60);
    messages.push(json!({"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": output}));
    let r = d.post("/v1/chat/completions", body(&messages)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-rkllmd-tools-dropped"].to_str().unwrap(), first_dropped, "the same tools");
    let second: Value = r.json().await.unwrap();
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    let before = first["prompt_tokens"].as_u64().unwrap() + first["completion_tokens"].as_u64().unwrap();
    assert_eq!(cached, before, "the first turn is reused whole: {second}");
}
