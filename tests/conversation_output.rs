//! Reasoning split, tool calls and stop strings in replies, end to end: the
//! real binary, a scripted simulated runtime, real HTTP.

mod common;
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const THINKING: &str = "<think>The user greets me. Reply briefly.</think>\n\nHello there!";
const CALL: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}}}])
}

fn scripted(entries: &[(&str, &str)], extra: &[&str]) -> (Daemon, tempfile::NamedTempFile) {
    let file = script(entries);
    let spec = format!("sim:instant?script={}", file.path().display());
    let mut args = vec!["--backend", "sim", "--model", &spec, "--model-id", "m"];
    args.extend_from_slice(extra);
    (Daemon::start(&args), file)
}

/// The chunks of a chat stream (without `[DONE]`), each with its arrival time.
async fn stream_chunks(d: &Daemon, mut body: Value) -> Vec<(Value, Instant)> {
    body["stream"] = json!(true);
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status(), 200);
    let (events, _) = read_sse(r).await;
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    events[..events.len() - 1].iter().map(|e| (e.json(), e.at)).collect()
}

fn deltas(chunks: &[(Value, Instant)]) -> Vec<&Value> {
    chunks
        .iter()
        .filter(|(c, _)| c["choices"][0]["finish_reason"].is_null())
        .map(|(c, _)| &c["choices"][0]["delta"])
        .collect()
}

fn concat(deltas: &[&Value], field: &str) -> String {
    deltas.iter().filter_map(|d| d[field].as_str()).collect()
}

fn finish_reason(chunks: &[(Value, Instant)]) -> Value {
    chunks.last().unwrap().0["choices"][0]["finish_reason"].clone()
}

#[tokio::test]
async fn thinking_is_split_into_reasoning_content_in_both_shapes() {
    let (d, _f) = scripted(&[("greet", THINKING)], &[]);
    let b: Value = d.post("/v1/chat/completions", chat("m", "greet me")).await.json().await.unwrap();
    let msg = &b["choices"][0]["message"];
    assert_eq!(msg["reasoning_content"], "The user greets me. Reply briefly.");
    assert_eq!(msg["content"], "Hello there!", "whitespace after </think> is not content");
    assert_eq!(b["choices"][0]["finish_reason"], "stop");
    assert_eq!(b["usage"]["completion_tokens"].as_u64(), Some(rkllm_sim::tokenize(THINKING).len() as u64));

    let chunks = stream_chunks(&d, chat("m", "greet me")).await;
    let ds = deltas(&chunks);
    assert_eq!(ds.len(), rkllm_sim::tokenize(THINKING).len(), "still one chunk per runtime token");
    assert_eq!(concat(&ds, "reasoning_content"), "The user greets me. Reply briefly.");
    assert_eq!(concat(&ds, "content"), "Hello there!");
    assert_eq!(ds[0]["role"], "assistant");
    assert!(ds.iter().all(|d| !d.to_string().contains("think>")), "the tags reach no client");
    // Reasoning arrives while the model thinks, not after: the first words are in early chunks.
    let first_reasoning = ds.iter().position(|d| d["reasoning_content"].is_string()).unwrap();
    assert!(first_reasoning <= 4, "'<think>' is 4 sim tokens; reasoning starts right after: {ds:?}");
    assert_eq!(finish_reason(&chunks), "stop");
}

#[tokio::test]
async fn inline_and_hide_modes() {
    for (mode, content, reasoning) in [
        ("inline", THINKING, None),
        ("hide", "Hello there!", None),
        ("split", "Hello there!", Some("The user greets me. Reply briefly.")),
    ] {
        let (d, _f) = scripted(&[("greet", THINKING)], &["--reasoning", mode]);
        let b: Value = d.post("/v1/chat/completions", chat("m", "greet me")).await.json().await.unwrap();
        let msg = &b["choices"][0]["message"];
        assert_eq!(msg["content"], content, "{mode}");
        assert_eq!(msg["reasoning_content"].as_str(), reasoning, "{mode}");
        let chunks = stream_chunks(&d, chat("m", "greet me")).await;
        let ds = deltas(&chunks);
        assert_eq!(concat(&ds, "content"), content, "{mode}");
        assert_eq!(ds.iter().any(|d| d["reasoning_content"].is_string()), reasoning.is_some(), "{mode}");
        // The legacy endpoint returns raw text whatever the mode.
        let b: Value = d
            .post("/v1/completions", json!({"model": "m", "prompt": "greet", "max_tokens": 100}))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(b["choices"][0]["text"], THINKING, "{mode}");
    }
}

#[tokio::test]
async fn tool_call_non_stream_and_stream_agree() {
    let reply = format!("Let me check.\n{CALL}");
    let (d, _f) = scripted(&[("weather", &reply)], &[]);
    let mut body = chat("m", "What is the weather in Paris?");
    body["tools"] = tools();

    let b: Value = d.post("/v1/chat/completions", body.clone()).await.json().await.unwrap();
    let choice = &b["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], "Let me check.\n", "text before a call stays content");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args = calls[0]["function"]["arguments"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(args).unwrap(), json!({"city": "Paris", "unit": "celsius"}));

    let chunks = stream_chunks(&d, body.clone()).await;
    let ds = deltas(&chunks);
    assert_eq!(ds.len(), rkllm_sim::tokenize(&reply).len(), "one chunk per runtime token");
    assert_eq!(concat(&ds, "content"), "Let me check.\n");
    let steps: Vec<&Value> = ds.iter().filter_map(|d| d["tool_calls"].as_array()).flatten().collect();
    let first = steps[0];
    assert_eq!(first["index"], 0);
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["name"], "get_weather");
    assert_ne!(first["id"], calls[0]["id"], "ids are fresh per response");
    assert!(first["function"]["arguments"].is_string());
    for later in &steps[1..] {
        assert_eq!(later["index"], 0);
        assert!(later.get("id").is_none() && later.get("type").is_none() && later["function"].get("name").is_none());
    }
    assert!(steps.len() > 5, "arguments are streamed token by token, not in one piece: {steps:?}");
    let streamed: String = steps.iter().map(|s| s["function"]["arguments"].as_str().unwrap()).collect();
    assert_eq!(streamed, args, "the fragments concatenate to the non-stream arguments");
    assert!(!concat(&ds, "content").contains("tool_call"), "call text is held back from content");
    assert_eq!(finish_reason(&chunks), "tool_calls");

    // Without `tools` (or with tool_choice "none") the same text is plain content.
    for extra in [json!({}), json!({"tools": tools(), "tool_choice": "none"})] {
        let mut plain = chat("m", "What is the weather in Paris?");
        plain.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let b: Value = d.post("/v1/chat/completions", plain).await.json().await.unwrap();
        assert_eq!(b["choices"][0]["message"]["content"], reply.as_str());
        assert!(b["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(b["choices"][0]["finish_reason"], "stop");
    }

    // The request log and metrics report the finish reason the replies carried.
    let metrics = reqwest::get(format!("{}/metrics", d.url)).await.unwrap().text().await.unwrap();
    let count = |reason: &str| -> f64 {
        let label = format!("finish_reason=\"{reason}\"");
        metrics
            .lines()
            .filter(|l| l.starts_with("rkllmd_requests_total{") && l.contains(&label))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    assert_eq!((count("tool_calls"), count("stop")), (2.0, 2.0), "{metrics}");
}

#[tokio::test]
async fn parallel_calls_and_malformed_calls() {
    let two = format!("{CALL}\n{}", CALL.replace("Paris", "Rome"));
    let bad = "<tool_call>get_weather(city=Paris)</tool_call>";
    let (d, _f) = scripted(&[("both", &two), ("broken", bad)], &[]);
    let ask = |text: &str| {
        let mut body = chat("m", text);
        body["tools"] = tools();
        body
    };
    let b: Value = d.post("/v1/chat/completions", ask("both cities")).await.json().await.unwrap();
    let msg = &b["choices"][0]["message"];
    assert!(msg["content"].is_null(), "a reply of only calls has content null: {msg}");
    let calls = msg["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0]["id"], calls[1]["id"]);
    let city = |c: &Value| {
        serde_json::from_str::<Value>(c["function"]["arguments"].as_str().unwrap()).unwrap()["city"].clone()
    };
    assert_eq!((city(&calls[0]), city(&calls[1])), (json!("Paris"), json!("Rome")));

    let chunks = stream_chunks(&d, ask("both cities")).await;
    let steps: Vec<Value> =
        deltas(&chunks).iter().filter_map(|d| d["tool_calls"].as_array()).flatten().cloned().collect();
    let heads: Vec<(u64, &str)> = steps
        .iter()
        .filter(|s| s.get("id").is_some())
        .map(|s| (s["index"].as_u64().unwrap(), s["function"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(heads, [(0, "get_weather"), (1, "get_weather")]);
    for index in [0, 1] {
        let args: String = steps
            .iter()
            .filter(|s| s["index"] == index)
            .map(|s| s["function"]["arguments"].as_str().unwrap())
            .collect();
        assert_eq!(args, calls[index as usize]["function"]["arguments"].as_str().unwrap());
    }
    assert_eq!(finish_reason(&chunks), "tool_calls");

    // Malformed call text is returned as content, never an error.
    for stream in [false, true] {
        let mut body = ask("broken");
        body["stream"] = json!(stream);
        let r = d.post("/v1/chat/completions", body).await;
        assert_eq!(r.status(), 200);
        let (content, finish) = if stream {
            let (events, _) = read_sse(r).await;
            let chunks: Vec<(Value, Instant)> = events[..events.len() - 1].iter().map(|e| (e.json(), e.at)).collect();
            assert!(deltas(&chunks).iter().all(|d| d.get("tool_calls").is_none()));
            (concat(&deltas(&chunks), "content"), finish_reason(&chunks))
        } else {
            let b: Value = r.json().await.unwrap();
            (
                b["choices"][0]["message"]["content"].as_str().unwrap().to_owned(),
                b["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!((content.as_str(), finish), (bad, json!("stop")), "stream={stream}");
    }
}

/// The non-stream reply and the stream's finish reason and whether its
/// deltas carried call steps.
async fn both_shapes(d: &Daemon, body: &Value) -> (Value, Value, bool) {
    let b: Value = d.post("/v1/chat/completions", body.clone()).await.json().await.unwrap();
    let chunks = stream_chunks(d, body.clone()).await;
    let streamed_steps = deltas(&chunks).iter().any(|d| d.get("tool_calls").is_some());
    (b["choices"][0].clone(), finish_reason(&chunks), streamed_steps)
}

#[tokio::test]
async fn calls_without_complete_valid_arguments_fall_back_to_content() {
    let broken = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \n</tool_call>";
    let (d, _f) = scripted(&[("broken", broken), ("weather", CALL)], &[]);
    let ask = |text: &str, extra: Value| {
        let mut body = chat("m", text);
        body["tools"] = tools();
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    // The block closes inside the arguments.
    let (choice, stream_finish, streamed) = both_shapes(&d, &ask("broken", json!({}))).await;
    assert_eq!(choice["message"]["content"], broken, "{choice}");
    assert!(choice["message"].get("tool_calls").is_none(), "{choice}");
    assert_eq!(choice["finish_reason"], "stop");
    assert!(streamed, "a stream passes the call's head on before its arguments end");
    assert_eq!(stream_finish, "stop", "a stream never reports tool_calls for a call that did not close");

    // max_tokens cuts the call in its arguments.
    let tokens = rkllm_sim::tokenize(CALL);
    let text = |n: usize| String::from_utf8(tokens[..n].concat()).unwrap();
    let n = (1..tokens.len()).find(|&n| text(n).contains("\"city\": \"P")).unwrap();
    let cut = text(n);
    let (choice, stream_finish, _) = both_shapes(&d, &ask("weather", json!({"max_tokens": n}))).await;
    assert_eq!((&choice["message"]["content"], &choice["finish_reason"]), (&json!(cut), &json!("length")));
    assert!(choice["message"].get("tool_calls").is_none(), "{choice}");
    assert_eq!(stream_finish, "length");

    // A stop string cuts it.
    let (choice, stream_finish, _) = both_shapes(&d, &ask("weather", json!({"stop": "Paris"}))).await;
    let before = &CALL[..CALL.find("Paris").unwrap()];
    assert_eq!((&choice["message"]["content"], &choice["finish_reason"]), (&json!(before), &json!("stop")));
    assert!(choice["message"].get("tool_calls").is_none(), "{choice}");
    assert_eq!(stream_finish, "stop");

    // The request log and metrics agree: no reply here ended with tool calls.
    let metrics = reqwest::get(format!("{}/metrics", d.url)).await.unwrap().text().await.unwrap();
    let tool_call_lines = metrics
        .lines()
        .filter(|l| l.starts_with("rkllmd_requests_total{") && l.contains("finish_reason=\"tool_calls\""))
        .count();
    assert_eq!(tool_call_lines, 0, "{metrics}");
}

#[tokio::test]
async fn a_model_that_reopens_the_block_its_prompt_opened_gets_clean_reasoning() {
    // DeepSeek-R1's generation prompt ends with `<think>\n`; some models write it again.
    let reply = "<think>\nLet me reason.\n</think>\n\nFour.";
    let (d, _f) = scripted(&[("sum", reply)], &["--template", "deepseek-r1"]);
    let b: Value = d.post("/v1/chat/completions", chat("m", "sum 2+2")).await.json().await.unwrap();
    let msg = &b["choices"][0]["message"];
    assert_eq!((&msg["reasoning_content"], &msg["content"]), (&json!("Let me reason.\n"), &json!("Four.")), "{msg}");
    let chunks = stream_chunks(&d, chat("m", "sum 2+2")).await;
    let ds = deltas(&chunks);
    assert_eq!((concat(&ds, "reasoning_content"), concat(&ds, "content")), ("Let me reason.\n".into(), "Four.".into()));
}

#[tokio::test]
async fn stop_string_after_thinking_is_matched_across_tokens() {
    // "END" reaches the runtime as "END" in one token; "</end>" is 5 sim tokens.
    let (d, _f) = scripted(&[("report", "<think>plan</think>\nIt is sunny. </end> more")], &[]);
    for stream in [false, true] {
        let mut body = chat("m", "report please");
        body["stop"] = json!(["</end>", "never"]);
        let (content, reasoning, finish) = if stream {
            let chunks = stream_chunks(&d, body).await;
            let ds = deltas(&chunks);
            (concat(&ds, "content"), concat(&ds, "reasoning_content"), finish_reason(&chunks))
        } else {
            let b: Value = d.post("/v1/chat/completions", body).await.json().await.unwrap();
            let m = &b["choices"][0]["message"];
            (
                m["content"].as_str().unwrap().to_owned(),
                m["reasoning_content"].as_str().unwrap().to_owned(),
                b["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!(
            (content.as_str(), reasoning.as_str(), finish),
            ("It is sunny. ", "plan", json!("stop")),
            "stream={stream}"
        );
    }
}

/// Tokens that cannot begin a stop string reach the client before the next
/// token is even generated; tokens that can are released by the token that
/// rules them out.
#[tokio::test]
async fn tokens_that_cannot_start_a_stop_string_are_not_delayed() {
    // 480 ms between tokens (qwen2.5-1.5b decodes every 59.9 ms; ×8): half
    // of it is the slack a busy machine gets below.
    let decode = Duration::from_micros(59_900 * 8);
    let reply = "The S is Sad. ST ops STOP after";
    let file = script(&[("pace", reply)]);
    let spec = format!("sim:qwen2.5-1.5b?time_scale=8&script={}", file.path().display());
    let d = Daemon::start(&["--backend", "sim", "--model", &spec, "--model-id", "m"]);
    let mut body = chat("m", "pace me");
    body["stop"] = json!("STOP");
    body["stream"] = json!(true);
    let (events, _) = read_sse(d.post("/v1/chat/completions", body).await).await;
    let chunks: Vec<(Value, Instant)> = events[..events.len() - 1].iter().map(|e| (e.json(), e.at)).collect();
    let tokens = rkllm_sim::tokenize(reply);
    let ds = deltas(&chunks);
    let got: Vec<&str> = ds.iter().map(|d| d["content"].as_str().unwrap()).collect();
    // Token i's chunk carries token i's text, except "S" and "ST" (prefixes of
    // STOP), which come with the token that rules them out; "P" ends it.
    let split = ["The", " S", " is", " Sa", "d", ".", " S", "T", " op", "s", " S", "T", "O", "P"];
    assert_eq!(tokens[..14], split.map(str::as_bytes));
    assert_eq!(got, ["The", " ", "S is", " Sa", "d", ".", " ", "", "ST op", "s", " ", "", "", ""]);
    assert_eq!(finish_reason(&chunks), "stop");

    // When: token i is generated at first + i × decode (the simulator paces
    // against deadlines from the run's start). So token i + 1 cannot exist
    // before the first token's chunk + (i + 1) × decode, less the first
    // chunk's own lateness (allowed: half an interval). A chunk that waited
    // for the next token could not arrive before that; each did. (Measured
    // from the first chunk, not from sending: the request's preparation is
    // not part of `ttft_ms`.)
    let token_chunks: Vec<_> = chunks.iter().filter(|(c, _)| c["choices"][0]["finish_reason"].is_null()).collect();
    let first = token_chunks[0].1;
    for (i, ((_, at), text)) in token_chunks.into_iter().zip(&got).enumerate() {
        if text.is_empty() {
            continue;
        }
        let next_token_earliest = decode * (i as u32) + decode / 2;
        assert!(
            *at - first < next_token_earliest,
            "chunk {i} ({text:?}) arrived {:?} after the first; token {} was due no earlier than {:?}",
            *at - first,
            i + 1,
            next_token_earliest + decode / 2
        );
    }
}
