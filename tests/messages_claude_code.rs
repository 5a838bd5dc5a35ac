//! The Messages API as Claude Code speaks it, through the real binary:
//! system messages inside `messages`, `thinking: adaptive` with
//! `output_config.effort`, `max_tokens` as a ceiling, its billing-header
//! system block kept out of the prompt and the cache, and a recorded
//! first-turn body (tests/fixtures/claude_code) counted and run.

mod common;

use common::{read_sse, script, Daemon};
use serde_json::{json, Value};
use std::path::Path;

/// The prompts the simulated runtime ran, as text (a run sent as token ids,
/// with the conversation cache, decoded by the simulator's tokenizer).
fn prompts(record: &Path) -> Vec<String> {
    common::sim_records(record, "run")
        .into_iter()
        .map(|run| match run["token_ids"].as_array() {
            Some(ids) => {
                let bytes: Vec<u8> = ids
                    .iter()
                    .flat_map(|id| rkllm_sim::token_bytes(id.as_u64().unwrap() as u32).unwrap().to_vec())
                    .collect();
                String::from_utf8(bytes).unwrap()
            }
            None => run["prompt"].as_str().unwrap().to_owned(),
        })
        .collect()
}

async fn post(d: &Daemon, path: &str, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = d.post(path, body).await;
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.json().await.unwrap())
}

fn start(record: &Path, args: &[&str]) -> Daemon {
    let model = format!("sim:instant?reply_tokens=3&record={}", record.display());
    Daemon::start(&[&["--model", &model, "--model-id", "m"][..], args].concat())
}

/// A conversation with a system message after its first turns.
fn with_a_late_system_message() -> Value {
    json!({"model": "m", "max_tokens": 8, "system": "Be brief.", "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": "Again"},
    ]})
}

#[tokio::test]
async fn a_system_message_stays_in_place_where_the_template_renders_it_there() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = start(&record, &[]);
    let (status, _, body) = post(&d, "/v1/messages", with_a_late_system_message()).await;
    assert_eq!(status, 200, "{body}");
    let expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
        <|im_start|>assistant\nHello<|im_end|>\n<|im_start|>system\nAnswer in French.<|im_end|>\n\
        <|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(prompts(&record)[0], expected, "ChatML renders a system turn where it stands");
    let (_, _, counted) = post(&d, "/v1/messages/count_tokens", with_a_late_system_message()).await;
    assert_eq!(counted["input_tokens"], body["usage"]["input_tokens"], "count_tokens places it alike");
}

#[tokio::test]
async fn a_system_message_joins_the_system_prompt_where_the_template_would_not_keep_it_in_place() {
    // Gemma's template folds a leading system message into the first user
    // turn and refuses turns that do not alternate; DeepSeek-R1's keeps only
    // the last system message. The others render it where it stands.
    for (family, in_place) in
        [("gemma", false), ("deepseek-r1", false), ("qwen3", true), ("llama3", true), ("phi3", true)]
    {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("record.jsonl");
        let d = start(&record, &["--template", family]);
        let (status, _, body) = post(&d, "/v1/messages", with_a_late_system_message()).await;
        assert_eq!(status, 200, "{family}: {body}");
        let prompt = &prompts(&record)[0];
        let at = |text: &str| prompt.find(text).unwrap_or_else(|| panic!("{family}: no {text:?} in {prompt}"));
        assert_eq!(at("Answer in French.") > at("Hello"), in_place, "{family}: {prompt}");
        assert_eq!(prompt.matches("Answer in French.").count(), 1, "{family}: {prompt}");
        if !in_place {
            assert!(prompt.contains("Be brief.\n\nAnswer in French."), "{family}: {prompt}");
        }
    }
}

#[tokio::test]
async fn a_template_that_refuses_the_system_messages_says_unexpected_role() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let template = dir.path().join("no-system.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}\
         [{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
    )
    .unwrap();
    let d = start(&record, &["--chat-template", template.to_str().unwrap()]);
    let user = json!({"role": "user", "content": "Hi"});
    let refused =
        json!({"model": "m", "max_tokens": 8, "messages": [{"role": "system", "content": "Be brief."}, user]});
    let (status, _, body) = post(&d, "/v1/messages", refused).await;
    assert_eq!((status, &body["error"]["type"]), (400, &json!("invalid_request_error")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("Unexpected role") && message.contains("System role not supported"), "{message}");
    // The same template's refusal of the top-level `system` is not about `messages`.
    let (status, _, body) =
        post(&d, "/v1/messages", json!({"model": "m", "max_tokens": 8, "system": "Be brief.", "messages": [user]}))
            .await;
    assert_eq!(status, 400, "{body}");
    assert!(!body["error"]["message"].as_str().unwrap().contains("Unexpected role"), "{body}");
    let (status, _, body) = post(&d, "/v1/messages", json!({"model": "m", "max_tokens": 8, "messages": [user]})).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn adaptive_thinking_and_effort_set_the_thinking_switch() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = start(&record, &["--template", "qwen3"]);
    let ask = |thinking: Value, effort: Value| {
        let mut body = json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]});
        if !thinking.is_null() {
            body["thinking"] = thinking;
        }
        if !effort.is_null() {
            body["output_config"] = json!({"effort": effort});
        }
        body
    };
    let adaptive = json!({"type": "adaptive"});
    // Qwen 3's template pre-fills an empty think block when thinking is off.
    let cases = [
        (adaptive.clone(), Value::Null, true),
        (adaptive.clone(), json!("high"), true),
        (adaptive.clone(), json!("low"), false),
        (Value::Null, json!("low"), false),
        (Value::Null, json!("max"), true),
        (json!({"type": "disabled"}), json!("high"), false),
        (json!({"type": "enabled", "budget_tokens": 1024}), json!("low"), true),
    ];
    for (i, (thinking, effort, on)) in cases.iter().enumerate() {
        let (status, _, body) = post(&d, "/v1/messages", ask(thinking.clone(), effort.clone())).await;
        assert_eq!(status, 200, "{thinking} {effort}: {body}");
        let prompt = &prompts(&record)[i];
        assert_eq!(!prompt.ends_with("<think>\n\n</think>\n\n"), *on, "{thinking} {effort}: {prompt}");
    }
    for (thinking, effort, param) in [
        (adaptive, json!("extreme"), "output_config.effort"),
        (Value::Null, json!(3), "output_config.effort"),
        (json!({"type": "sometimes"}), Value::Null, "thinking.type"),
    ] {
        let (status, _, body) = post(&d, "/v1/messages", ask(thinking.clone(), effort.clone())).await;
        assert_eq!(status, 400, "{thinking} {effort}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{param}` must be")), "{message}");
    }
}

#[tokio::test]
async fn max_tokens_above_the_limit_is_a_ceiling_said_in_a_header_and_timings() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let model = format!("sim:instant?reply_tokens=40&record={}", record.display());
    let d = Daemon::start(&["--model", &model, "--model-id", "m", "--max-new-tokens", "16"]);
    let ask = |max_tokens: Value, stream: bool| json!({"model": "m", "max_tokens": max_tokens, "stream": stream, "messages": [{"role": "user", "content": "Hi"}]});
    let (status, headers, body) = post(&d, "/v1/messages", ask(json!(32000), false)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-rkllmd-max-tokens-clamped"], "32000->16");
    assert_eq!(body["timings"]["max_tokens_clamped"], json!({"requested": 32000, "limit": 16}));
    assert_eq!((&body["stop_reason"], &body["usage"]["output_tokens"]), (&json!("max_tokens"), &json!(16)), "{body}");

    let r = d.post("/v1/messages", ask(json!(32000), true)).await;
    assert_eq!(
        (r.status().as_u16(), &r.headers()["x-rkllmd-max-tokens-clamped"]),
        (200, &"32000->16".parse().unwrap())
    );
    let (events, _) = read_sse(r).await;
    let delta = events.iter().map(|e| e.json()).find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(delta["timings"]["max_tokens_clamped"]["requested"], 32000, "{delta}");
    assert_eq!(delta["usage"]["output_tokens"], 16, "{delta}");

    let (status, headers, body) = post(&d, "/v1/messages", ask(json!(16), false)).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.get("x-rkllmd-max-tokens-clamped").is_none());
    assert!(body["timings"].get("max_tokens_clamped").is_none(), "{body}");
    for refused in [json!(0), json!(-1)] {
        let (status, _, body) = post(&d, "/v1/messages", ask(refused.clone(), false)).await;
        assert_eq!((status, &body["type"]), (400, &json!("error")), "{refused}: {body}");
    }
}

/// A turn whose first system block is Claude Code's billing header, which
/// differs from request to request of the same agent.
fn billed(hash: &str, messages: Value) -> Value {
    let prompt =
        "You are a careful coding agent. Read before you edit, run the tests after, and say what you changed. "
            .repeat(8);
    json!({"model": "m", "max_tokens": 8, "system": [
        {"type": "text", "text": format!("x-anthropic-billing-header: cc_version=2.0.31; cc_entrypoint=cli; cch={hash}")},
        {"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}},
    ], "messages": messages})
}

#[tokio::test]
async fn a_billing_header_block_is_kept_out_of_the_prompt_and_the_cache_key() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = start(&record, &[]);
    let question = json!({"role": "user", "content": "List the files."});
    let (_, _, first) = post(&d, "/v1/messages", billed("7a3f1", json!([question]))).await;
    let (_, _, counted) = post(&d, "/v1/messages/count_tokens", billed("c0d9e", json!([question]))).await;
    let first_prompt = first["usage"]["input_tokens"].as_i64().unwrap();
    assert!(first_prompt > 150, "{first}");
    assert_eq!(counted["input_tokens"], first_prompt, "the header is not counted: {counted}");
    // The next turn, under another header: the first turn is read from the cache.
    let reply = first["content"][0]["text"].as_str().unwrap();
    let history =
        json!([question, {"role": "assistant", "content": reply}, {"role": "user", "content": "And the largest?"}]);
    let (status, _, second) = post(&d, "/v1/messages", billed("c0d9e", history)).await;
    assert_eq!(status, 200, "{second}");
    let cached = second["usage"]["cache_read_input_tokens"].as_i64().unwrap();
    assert!(cached >= first_prompt, "{cached} cached of the first turn's {first_prompt}: {second}");
    assert!(prompts(&record).iter().all(|p| !p.contains("x-anthropic-billing-header")));
}

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude_code/first_turn.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn a_recorded_claude_code_turn_is_counted_as_run_and_streams_its_tool_call() {
    let call = "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"du -a . | sort -n | tail -5\", \"description\": \"List the largest files\"}}\n</tool_call>";
    let script = script(&[("Which files in this directory are the largest?", call)]);
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let model = format!("sim:qwen2.5-1.5b?time_scale=0&script={}&record={}", script.path().display(), record.display());
    let d = Daemon::start(&["--model", &model, "--model-id", "test-model", "--max-context-len", "16384"]);
    let body = fixture();
    let (status, _, counted) = post(&d, "/v1/messages/count_tokens", body.clone()).await;
    assert_eq!(status, 200, "{counted}");
    let counted = counted["input_tokens"].as_i64().unwrap();
    assert!(counted > 3000, "a realistic first turn: {counted} tokens");

    // Claude Code posts to `/v1/messages?beta=true`.
    let r = d.post("/v1/messages?beta=true", body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-rkllmd-max-tokens-clamped"], "32000->2048");
    let (events, _) = read_sse(r).await;
    let events: Vec<Value> = events.iter().map(|e| e.json()).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let start = events.iter().find(|e| e["type"] == "content_block_start").unwrap();
    assert_eq!(
        (&start["content_block"]["type"], &start["content_block"]["name"]),
        (&json!("tool_use"), &json!("Bash"))
    );
    let input: String = events
        .iter()
        .filter(|e| e["delta"]["type"] == "input_json_delta")
        .map(|e| e["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&input).unwrap()["description"], "List the largest files");
    let stop = kinds.iter().position(|&k| k == "content_block_stop").unwrap();
    let delta = &events[kinds.iter().position(|&k| k == "message_delta").unwrap()];
    assert!(stop < kinds.len() - 2 && kinds.last() == Some(&"message_stop"), "{kinds:?}");
    assert_eq!(delta["delta"]["stop_reason"], "tool_use", "{delta}");
    // What count_tokens answered is the prompt the chat ran.
    let usage = &delta["usage"];
    let prompt = usage["input_tokens"].as_i64().unwrap() + usage["cache_read_input_tokens"].as_i64().unwrap();
    assert_eq!(prompt, counted, "{usage}");
    // The system message Claude Code puts after the user's stays there; its billing header is nowhere. (The chat's
    // run is the last: a run of the agent's start alone saved its shared-prefix file before it.)
    let ran = prompts(&record).pop().unwrap();
    let (user, system) =
        (ran.find("<|im_start|>user\n").unwrap(), ran.find("<|im_start|>system\nThe user's terminal").unwrap());
    assert!(user < system && !ran.contains("x-anthropic-billing-header"), "{ran}");
}

#[tokio::test]
async fn a_key_is_taken_as_bearer_or_as_x_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let d = start(&record, &["--api-key", "sekrit"]);
    let body = json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]});
    let send = |header: Option<(&'static str, &'static str)>| {
        let mut r = d.client().post(format!("{}/v1/messages", d.url)).json(&body);
        if let Some((name, value)) = header {
            r = r.header(name, value);
        }
        async move { r.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(send(Some(("authorization", "Bearer sekrit"))).await, 200);
    assert_eq!(send(Some(("x-api-key", "sekrit"))).await, 200);
    assert_eq!(send(Some(("x-api-key", "wrong"))).await, 401);
    assert_eq!(send(None).await, 401);
}

/// The refusals met before a handler, on `path`: what, the status, Anthropic's error type for it, the request.
fn refusals(d: &Daemon, path: &str) -> Vec<(&'static str, u16, &'static str, reqwest::RequestBuilder)> {
    let url = format!("{}{path}", d.url);
    let small = json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]});
    let big = json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x".repeat(20_000)}]});
    // Sent without a Content-Length: refused while it is read, not when announced.
    let unannounced =
        reqwest::Body::wrap_stream(futures_util::stream::iter([Ok::<_, std::io::Error>(big.to_string())]));
    let keyed = |request: reqwest::RequestBuilder| request.header("x-api-key", "sekrit");
    vec![
        ("no key", 401, "authentication_error", d.client().post(&url).json(&small)),
        (
            "a foreign origin",
            403,
            "permission_error",
            keyed(d.client().post(&url)).header("origin", "http://evil.example").json(&small),
        ),
        ("a body announced over the limit", 413, "request_too_large", keyed(d.client().post(&url)).json(&big)),
        (
            "a body over the limit",
            413,
            "request_too_large",
            keyed(d.client().post(&url)).header("content-type", "application/json").body(unannounced),
        ),
        ("a method the route does not take", 405, "invalid_request_error", keyed(d.client().get(&url))),
    ]
}

/// A response's status, header names (less the ones every response varies in) and body.
async fn refused(request: reqwest::RequestBuilder) -> (u16, Vec<String>, Value) {
    let r = request.send().await.unwrap();
    let mut names: Vec<String> =
        r.headers().keys().map(|n| n.as_str().to_owned()).filter(|n| n != "content-length" && n != "date").collect();
    names.sort();
    (r.status().as_u16(), names, r.json().await.unwrap())
}

/// Every refusal before the handler on the two Messages routes is in
/// Anthropic's shape, with the status and the headers the same refusal
/// has in OpenAI's envelope on `/v1/chat/completions`.
#[tokio::test]
async fn refusals_before_the_handler_are_in_anthropics_shape() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(&dir.path().join("record.jsonl"), &["--api-key", "sekrit", "--body-limit-bytes", "10000"]);
    for path in ["/v1/messages", "/v1/messages/count_tokens"] {
        let openai = refusals(&d, "/v1/chat/completions");
        for ((what, status, kind, request), (.., like)) in refusals(&d, path).into_iter().zip(openai) {
            let (got, headers, body) = refused(request).await;
            assert_eq!(got, status, "{path}, {what}: {body}");
            assert_eq!(
                (&body["type"], &body["error"]["type"]),
                (&json!("error"), &json!(kind)),
                "{path}, {what}: {body}"
            );
            assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{path}, {what}: {body}");
            let (openai_status, openai_headers, envelope) = refused(like).await;
            assert_eq!(openai_status, status, "{what}: {envelope}");
            assert!(envelope["error"]["code"].is_string(), "{what}: {envelope}");
            assert_eq!(headers, openai_headers, "{path}, {what}");
        }
    }
}
