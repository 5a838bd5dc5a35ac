//! The first run with Open WebUI: its request shapes, recorded from the
//! package's source (`tests/fixtures/openwebui/`), replayed against the real
//! binary. A chat with 36 built-in tools does not fit a 4,096-token context:
//! by default it is answered with the most relevant tools that fit (counted
//! by the tokenizer, or by bytes without one), the dropped ones reported;
//! with `tools_overflow = "refuse"` it is a 400 `context_length_exceeded`
//! naming the tools, with a tokenizer (counted before the NPU) and without
//! one (the runtime's refusal translated); the task requests (title, tags,
//! follow-ups) must work. And `response_format` is honest: JSON of the
//! schema, or an error.

mod common;

use common::{read_sse, script, Daemon};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path)
}

/// A recorded request, addressed to `model`.
fn recorded(name: &str, model: &str) -> Value {
    let text = std::fs::read_to_string(fixture(&format!("openwebui/{name}"))).unwrap();
    let mut body: Value = serde_json::from_str(&text).unwrap();
    body["model"] = json!(model);
    body
}

/// The recorded chat, streamed (as Open WebUI sends it) or not.
fn chat_36_tools(model: &str, stream: bool) -> Value {
    let mut body = recorded("chat_36_tools.json", model);
    if !stream {
        body["stream"] = json!(false);
        body.as_object_mut().unwrap().remove("stream_options");
    }
    body
}

async fn post(d: &Daemon, body: Value) -> (u16, Value) {
    let r = d.post("/v1/chat/completions", body).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

fn runs(record: &Path) -> usize {
    std::fs::read_to_string(record).unwrap_or_default().lines().filter(|l| l.contains("\"call\":\"run\"")).count()
}

/// The tasks Open WebUI sends after the first reply all get a reply.
async fn tasks_work(d: &Daemon, model: &str) {
    for task in ["task_title.json", "task_tags.json", "task_follow_ups.json"] {
        let (status, body) = post(d, recorded(task, model)).await;
        assert_eq!(status, 200, "{task}: {body}");
        assert!(!body["choices"][0]["message"]["content"].as_str().unwrap().is_empty(), "{task}: {body}");
    }
}

/// The recorded chat, its question replaced by one a tool answers.
fn chat_about(model: &str, stream: bool, question: &str) -> Value {
    let mut body = chat_36_tools(model, stream);
    body["messages"] = json!([{"role": "user", "content": question}]);
    body
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
}

/// The tools whose definitions are in a prompt.
fn offered_in(prompt: &str, names: &[String]) -> Vec<String> {
    names.iter().filter(|n| prompt.contains(&format!("\"{n}\""))).cloned().collect()
}

/// A chat with the 36 tools gets a reply (streamed and not): the tools that
/// fit, the most relevant first, the dropped ones counted in the header,
/// in `timings`, in the log and in the metrics.
async fn selected(d: &Daemon, record: &Path, model: &str) -> u64 {
    let names = tool_names(&chat_36_tools(model, false));
    let mut total = 0;
    for stream in [false, true] {
        let r = d.post("/v1/chat/completions", chat_about(model, stream, "Search the web for news about Paris")).await;
        assert_eq!(r.status(), 200);
        let dropped: u64 = r.headers()["x-rkllmd-tools-dropped"].to_str().unwrap().parse().unwrap();
        let timings = if stream {
            let (events, _) = read_sse(r).await;
            events.iter().rev().find(|e| e.data != "[DONE]").unwrap().json()["timings"].clone()
        } else {
            r.json::<Value>().await.unwrap()["timings"].clone()
        };
        assert_eq!(timings["tools_dropped"], json!(dropped), "{timings}");
        let prompt = common::sim_records(record, "run").last().unwrap()["prompt"].as_str().unwrap().to_owned();
        let sent = offered_in(&prompt, &names);
        assert!(dropped > 0 && sent.len() as u64 == 36 - dropped, "{dropped} dropped, sent {sent:?}");
        assert!(sent.contains(&"search_web".to_owned()), "the tool the question names was dropped: {sent:?}");
        total += dropped;
    }
    let counted = d.wait_metric("rkllmd_tools_dropped_total", |n| n == total as f64).await;
    assert!(counted, "{:?} tools dropped, {total} counted", d.metric("rkllmd_tools_dropped_total").await);
    total
}

#[tokio::test]
async fn with_a_tokenizer_the_most_relevant_tools_that_fit_are_sent() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0&reply_tokens=4&record={}", record.display());
    // The in-process simulator comes with its tokenizer: the count is exact.
    let args = |overflow: &'static str| {
        let mut args = vec!["--model", &spec, "--model-id", "m", "--template", "chatml"];
        args.extend(["--conversation-cache", "off", "--tools-overflow", overflow]);
        args
    };
    let d = Daemon::start(&args("select"));
    selected(&d, &record, "m").await;
    // The recorded question too, and over the Ollama API (its connection sends the same tools).
    // Four turns of the recorded chat, its history resent each time, over both connections.
    for path in ["/v1/chat/completions", "/api/chat"] {
        let mut body = chat_36_tools("m", false);
        for turn in 0..4 {
            let r = d.post(path, body.clone()).await;
            assert_eq!(r.status(), 200, "{path} turn {turn}");
            assert!(r.headers().contains_key("x-rkllmd-tools-dropped"), "{path} turn {turn}");
            let reply: Value = r.json().await.unwrap();
            let content = match path {
                "/api/chat" => reply["message"]["content"].clone(),
                _ => reply["choices"][0]["message"]["content"].clone(),
            };
            assert!(!content.as_str().unwrap().is_empty(), "{path} turn {turn}: {reply}");
            let history = body["messages"].as_array_mut().unwrap();
            history.push(json!({"role": "assistant", "content": content}));
            history.push(json!({"role": "user", "content": format!("Tell me more ({turn}).")}));
        }
    }
    let ollama = json!({"model": "m", "stream": false, "tools": chat_36_tools("m", false)["tools"],
                        "messages": [{"role": "user", "content": "Generate an image of a cat"}]});
    let r = d.post("/api/chat", ollama).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-rkllmd-tools-dropped"));
    let prompt = common::sim_records(&record, "run").last().unwrap()["prompt"].as_str().unwrap().to_owned();
    assert!(prompt.contains("\"generate_image\""), "{prompt}");
    // Messages alone that do not fit are still refused, before the NPU.
    let runs_before = runs(&record);
    let long = "word ".repeat(4200);
    let (status, body) = post(&d, chat_about("m", false, &long)).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("context_length_exceeded")), "{body}");
    assert_eq!(runs(&record), runs_before);
    tasks_work(&d, "m").await;
    drop(d);

    // `refuse`: the 400 that names the tools' share.
    let d = Daemon::start(&args("refuse"));
    let runs_before = runs(&record);
    for stream in [true, false] {
        let (status, body) = post(&d, chat_36_tools("m", stream)).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
        assert_eq!(body["error"]["param"], "messages");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("36 tool definitions take ~"), "{message}");
        assert!(message.contains("tokens; the model's context is 4,096 tokens: send fewer tools"), "{message}");
    }
    assert_eq!(runs(&record), runs_before, "the runtime was asked to run a prompt that does not fit");
    // Without the tools the same chat fits.
    let mut body = chat_36_tools("m", false);
    body.as_object_mut().unwrap().remove("tools");
    let (status, body) = post(&d, body).await;
    assert_eq!(status, 200, "{body}");
}

/// Open WebUI as it runs by default: the conversation cache on, a chat turn
/// with its 36 tools, then the title, tags and follow-up tasks, then the next
/// turn. The tools sit at the start of the prompt, so each turn must get the
/// same ones for the next to reuse the cache (tools_fit.rs); the tasks must
/// not cost the conversation its state. Run live with Open WebUI 0.12.4
/// before this (docs/clients.md): every follow-up was a full prefill.
#[tokio::test]
async fn selected_tools_stay_the_same_over_turns_and_follow_ups_reuse_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    // A prefill that takes time (`time_scale` above 0): the tasks displace
    // the conversation, which is restored from its file only while a load
    // measures cheaper than the prefill (saved.rs `worth_restoring`). With
    // no delays a prefill costs nothing and a load on a busy machine some
    // milliseconds, so the follow-ups were prefilled whole there.
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0.05&reply_tokens=24&record={}", record.display());
    let d = Daemon::start(&["--model", &spec, "--model-id", "m", "--template", "chatml"]);
    let names = tool_names(&chat_36_tools("m", false));
    let mut body = chat_36_tools("m", false);
    let mut offered = Vec::new();
    for turn in 0..4 {
        let r = d.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(r.status(), 200, "turn {turn}");
        let reply: Value = r.json().await.unwrap();
        // The cache sends token ids: the run's input as text, by the daemon's tokenizer.
        let ids = common::sim_records(&record, "run").last().unwrap()["token_ids"].clone();
        let r = d.post("/detokenize", json!({"tokens": ids})).await;
        let prompt = r.json::<Value>().await.unwrap()["content"].as_str().unwrap().to_owned();
        let cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
        if turn == 0 {
            offered = offered_in(&prompt, &names);
            assert!(!offered.is_empty() && offered.len() < 36, "{offered:?}");
        } else {
            // Only what is new was prefilled; the tools came from the cache
            // (a restore sends the saved ids again, the runtime skips them).
            let prompt_tokens = reply["usage"]["prompt_tokens"].as_u64().unwrap();
            assert!(cached > 0 && cached + reply["timings"]["prompt_n"].as_u64().unwrap() == prompt_tokens, "{reply}");
            assert!(cached > prompt_tokens * 9 / 10, "turn {turn}: {reply}");
            assert!(["resident", "restored"].contains(&reply["timings"]["cache"].as_str().unwrap()), "{reply}");
            let sent = offered_in(&prompt, &names);
            assert!(sent.is_empty() || sent == offered, "turn {turn}: {sent:?} after {offered:?}");
        }
        tasks_work(&d, "m").await;
        let history = body["messages"].as_array_mut().unwrap();
        history.push(json!({"role": "assistant", "content": reply["choices"][0]["message"]["content"]}));
        history.push(json!({"role": "user", "content": format!("Now generate an image of it ({turn}).")}));
    }
}

#[tokio::test]
async fn without_a_tokenizer_tools_are_selected_by_bytes_or_refused_by_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0&reply_tokens=4&record={}", record.display());
    let base = ["--model", &spec, "--model-id", "m", "--template", "chatml", "--conversation-cache", "off"];
    let d = Daemon::start_dlopen(&base);
    selected(&d, &record, "m").await;
    // The WARN tells the operator how the tools were measured (read after the exit).
    let (_, log) = d.exit();
    assert!(log.contains("counted=\"bytes (no tokenizer)\""), "{log}");

    let d = Daemon::start_dlopen(&[&base[..], &["--tools-overflow", "refuse"]].concat());
    // ~25 kB: not clearly over 4,096 tokens by bytes alone, so the runtime
    // is asked, refuses it, and the api reads that as the prompt's size.
    for stream in [true, false] {
        let (status, body) = post(&d, chat_36_tools("m", stream)).await;
        assert_eq!(status, 400, "stream {stream}: {body}");
        assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("The runtime refused the prompt before generating anything"), "{message}");
        assert!(message.contains("maximum context length of 4,096 tokens"), "{message}");
        assert!(message.contains("36 tool definitions take ~"), "{message}");
        assert!(message.contains("bytes of the prompt"), "{message}");
    }
    // The Responses and Messages APIs hold a stream's headers for that refusal too.
    let tools = chat_36_tools("m", false)["tools"].clone();
    let functions: Vec<Value> = tools.as_array().unwrap().iter().map(|t| t["function"].clone()).collect();
    let flat: Vec<Value> = functions
        .iter()
        .map(|f| {
            json!({"type": "function", "name": f["name"],
        "description": f["description"], "parameters": f["parameters"]})
        })
        .collect();
    let question = "What is the capital of France, and what is it famous for?";
    let r = d.post("/v1/responses", json!({"model": "m", "stream": true, "input": question, "tools": flat})).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "context_length_exceeded");
    let anthropic: Vec<Value> = functions
        .iter()
        .map(|f| {
            json!({"name": f["name"], "description": f["description"],
        "input_schema": f["parameters"]})
        })
        .collect();
    let body = json!({"model": "m", "stream": true, "max_tokens": 64, "tools": anthropic,
                      "messages": [{"role": "user", "content": question}]});
    let r = d.post("/v1/messages", body).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!((&body["type"], &body["error"]["type"]), (&json!("error"), &json!("invalid_request_error")), "{body}");
    // A prompt clearly over (at most 8 bytes per token) never reaches the runtime.
    let huge = "word ".repeat(8 * 4096 / 5 + 10);
    let (status, body) = post(&d, json!({"model": "m", "messages": [{"role": "user", "content": huge}]})).await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("context_length_exceeded")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("no tokenizer is configured"), "{body}");
    tasks_work(&d, "m").await;
}

fn title_schema() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "title", "schema": {
        "type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"], "additionalProperties": false}}})
}

#[tokio::test]
async fn structured_output_is_json_of_the_schema_or_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let file = script(&[
        ("good", "{\"title\": \"Paris\"}"),
        ("prose", "Sure! The title is Paris."),
        ("extra", "{\"title\": \"Paris\", \"x\": 1}"),
    ]);
    let spec = format!("sim:instant?script={}&record={}", file.path().display(), record.display());
    // The record shows the prompt as text (the conversation cache would send token ids).
    let d = Daemon::start(&["--model", &spec, "--model-id", "m", "--conversation-cache", "off"]);
    let ask = |content: &str, stream: bool| {
        json!({"model": "m", "stream": stream, "response_format": title_schema(),
               "messages": [{"role": "user", "content": content}]})
    };

    let (status, body) = post(&d, ask("good", false)).await;
    assert_eq!(status, 200, "{body}");
    let content: Value = serde_json::from_str(body["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"title": "Paris"}));
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    // The schema went into the prompt.
    let log = std::fs::read_to_string(&record).unwrap();
    assert!(log.contains("conforms to this JSON Schema"), "{log}");

    for (prompt, why) in [("prose", "not valid JSON"), ("extra", "$.x is not allowed")] {
        let (status, body) = post(&d, ask(prompt, false)).await;
        assert_eq!((status, body["error"]["code"].clone()), (500, json!("invalid_response_format")), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(why), "{body}");

        // A stream sends the text as it comes, then an error event instead of `stop`.
        let r = d.post("/v1/chat/completions", ask(prompt, true)).await;
        assert_eq!(r.status(), 200);
        let (events, _) = read_sse(r).await;
        assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
        let last = events[events.len() - 2].json();
        assert_eq!(last["error"]["code"], "invalid_response_format", "{last}");
        assert!(events.iter().all(|e| e.data == "[DONE]" || e.json()["choices"][0]["finish_reason"].is_null()));
    }

    let (status, body) = post(
        &d,
        json!({"model": "m", "response_format": {"type": "yaml"}, "messages": [{"role": "user", "content": "good"}]}),
    )
    .await;
    assert_eq!((status, body["error"]["param"].clone()), (400, json!("response_format.type")), "{body}");
}

/// A model with a vision encoder whose runs take a twentieth of a board's time.
const SLOW_ENOUGH_VL: &str = "sim:qwen2.5-vl-3b?time_scale=0.05";

/// Open WebUI's default settings (a chat with its tools, streamed), with an
/// 8×8 red PNG in the first turn when `image`, and the title, tags and
/// follow-up tasks after every reply, 4 turns. Every turn is answered (the
/// model sees the image); each follow-up found its history as one of `kept`
/// (`timings.cache`) with ≥ 90 % of its prompt cached, counted so in the
/// conversation cache's metric, and the cache stayed on. Returns each turn's
/// last chunk.
async fn chat_with_side_tasks(d: &Daemon, image: bool, kept: &[&str]) -> Vec<Value> {
    let mut body = chat_36_tools("m", true);
    let question = json!({"type": "text", "text": "What is in this picture?"});
    let picture = json!({"type": "image_url", "image_url": {"url": common::data_url(&common::png(8, 8, [255, 0, 0]))}});
    let content = if image { json!([question, picture]) } else { json!([question]) };
    body["messages"] = json!([{"role": "user", "content": content}]);
    let mut turns = Vec::new();
    for turn in 1..=4 {
        let r = d.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(r.status(), 200, "turn {turn}");
        let (events, _) = read_sse(r).await;
        let chunks: Vec<Value> = events.iter().filter(|e| e.data != "[DONE]").map(|e| e.json()).collect();
        let content: String =
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
        let last = chunks.last().unwrap().clone();
        let (usage, timings) = (&last["usage"], &last["timings"]);
        if image {
            assert_eq!(
                content, "I see 1 image: image 1 is #ff0000 (392x392).",
                "turn {turn}: the model sees the image"
            );
        }
        assert!(!content.is_empty(), "turn {turn}: {last}");
        let prompt = usage["prompt_tokens"].as_u64().unwrap();
        let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
        println!(
            "turn {turn}: {cached} of {prompt} prompt tokens cached ({}, {}), TTFT {} ms",
            timings["cache"], timings["cache_miss"], timings["ttft_ms"]
        );
        if turn > 1 {
            assert!(kept.iter().any(|k| timings["cache"] == json!(k)), "turn {turn}: not {kept:?}: {timings}");
            assert!(cached * 10 >= prompt * 9, "turn {turn}: {cached} of {prompt} cached");
        }
        tasks_work(d, "m").await;
        let history = body["messages"].as_array_mut().unwrap();
        history.push(json!({"role": "assistant", "content": content}));
        history.push(json!({"role": "user", "content": format!("Tell me more about it ({turn}).")}));
        turns.push(last);
    }
    let metrics = d.client().get(format!("{}/metrics", d.url)).send().await.unwrap().text().await.unwrap();
    let found = |k: &str| {
        let prefix = format!("rkllmd_conversation_cache_total{{found=\"{k}\",");
        metrics
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert_eq!(kept.iter().map(|k| found(k)).sum::<f64>(), 3.0, "the 3 follow-ups counted as {kept:?}: {metrics}");
    assert!(
        !metrics.lines().any(|l| l.starts_with("rkllmd_conversation_cache_off_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    turns
}

/// The slots `batch = auto` opened, and why.
async fn slots_of(d: &Daemon) -> (u64, String) {
    let (status, health) = d.get_json("/health").await;
    assert_eq!(status, 200, "{health}");
    let batch = &health["runtime"]["batch"];
    (batch["slots"].as_u64().unwrap(), batch["reason"].as_str().unwrap_or_default().to_owned())
}

/// Default settings on the simulator (which refuses short batches: `batch =
/// auto` opens 1 slot): the side tasks take the KV cache between turns, and
/// each follow-up is restored from the file its previous turn saved, the
/// image's positions among it (engine/saved.rs). Before, a conversation with
/// images could not be restored: every turn prefilled the tools and the
/// image again.
#[tokio::test]
async fn an_image_chat_with_the_side_tasks_between_turns_is_restored_every_turn() {
    // Prefills that take time (a twentieth of a board's): without any, a
    // file's load, slowed by a busy machine, can measure costlier than
    // prefilling again and be skipped (`timings.cache_miss` `costlier`).
    let d = Daemon::start(&["--model", SLOW_ENOUGH_VL, "--model-id", "m"]);
    let turns = chat_with_side_tasks(&d, true, &["restored"]).await;
    for (turn, pair) in (2..).zip(turns.windows(2)) {
        let (usage, timings) = (&pair[1]["usage"], &pair[1]["timings"]);
        let (prompt, cached) =
            (usage["prompt_tokens"].as_u64().unwrap(), &usage["prompt_tokens_details"]["cached_tokens"]);
        // The previous turn's prompt, tools and image included, came from its
        // file; only its reply and the new question were prefilled.
        assert_eq!(cached, &pair[0]["usage"]["prompt_tokens"], "turn {turn}: {}", pair[1]);
        assert_eq!(cached.as_u64().unwrap() + timings["prompt_n"].as_u64().unwrap(), prompt, "turn {turn}");
        // The image is sent again (the runtime matches it against the file),
        // its embedding from the daemon's cache.
        assert_eq!((&timings["images"]["encoder_runs"], &timings["images"]["cache_hits"]), (&json!(0), &json!(1)));
    }
}

/// The same image chat on a runtime that takes short batches, default
/// settings (`batch = auto`): a model with a vision encoder still gets 1
/// slot (batched runs take text only), so the follow-ups are restored from
/// their files as above, not resident beside the tasks.
#[tokio::test]
async fn an_image_chat_on_a_runtime_that_takes_short_batches_is_restored_every_turn() {
    let spec = format!("{SLOW_ENOUGH_VL}&short_batch=accept");
    let d = Daemon::start(&["--model", &spec, "--model-id", "m"]);
    let (slots, reason) = slots_of(&d).await;
    assert_eq!(slots, 1, "{reason}");
    assert!(reason.contains("vision encoder"), "{reason}");
    chat_with_side_tasks(&d, true, &["resident", "restored"]).await;
}

/// The chat without its image on a runtime that takes short batches, default
/// settings: `batch = auto` opens several slots, each side task takes a
/// clean one (the others get no input), and the conversation stays resident
/// in its own slot. Once the tasks have used up the clean slots, one clears
/// them all; the conversation's turn before saved its file (newcomers were
/// taking the clean slots), and its next turn clears the tasks' slots to be
/// restored from it. Before, that turn prefilled everything (`other`).
#[tokio::test]
async fn a_chat_on_slots_keeps_its_slot_or_its_file_while_the_side_tasks_take_others() {
    let d = Daemon::start(&["--model", "sim:qwen2.5-1.5b?time_scale=0.05&short_batch=accept", "--model-id", "m"]);
    let (slots, reason) = slots_of(&d).await;
    assert!(slots > 1, "{reason}");
    let turns = chat_with_side_tasks(&d, false, &["resident", "restored"]).await;
    for (turn, pair) in (2..).zip(turns.windows(2)) {
        // Resident: the previous prompt and its reply; restored: the previous prompt.
        let cached = &pair[1]["usage"]["prompt_tokens_details"]["cached_tokens"];
        assert!(cached.as_u64() >= pair[0]["usage"]["prompt_tokens"].as_u64(), "turn {turn}: {}", pair[1]);
    }
}

/// A runtime that does not match images against a loaded file (simulated:
/// `image_cache_lies`): the first image restore that spares nothing switches
/// off the files with images, loudly, and only them: the reply is still
/// right, the image chat goes on by prefilling, and a text chat displaced
/// by a side task is still restored.
#[tokio::test]
async fn an_image_restore_that_spares_nothing_switches_off_only_the_files_with_images() {
    let spec = format!("{SLOW_ENOUGH_VL}&image_cache_lies=1");
    let d = Daemon::start(&["--model", &spec, "--model-id", "m"]);
    let image = common::data_url(&common::png(8, 8, [0, 0, 255]));
    let text = |t: &str| json!({"role": "user", "content": t});
    let mut pictured = vec![json!({"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image}},
        {"type": "text", "text": "What is this?"},
    ]})];
    let mut chat = vec![text("Conversation A: hello there")];
    let mut seen = Vec::new();
    for turn in 1..=3 {
        for messages in [&mut pictured, &mut chat] {
            let (status, body) = post(&d, json!({"model": "m", "messages": messages})).await;
            assert_eq!(status, 200, "{body}");
            let content = body["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
            seen.push((turn, body["timings"]["cache"].clone(), body["timings"]["cache_miss"].clone(), content.clone()));
            messages.extend([json!({"role": "assistant", "content": content}), text("Tell me more.")]);
            // A side task between every two requests.
            let (status, _) = post(&d, recorded("task_title.json", "m")).await;
            assert_eq!(status, 200);
        }
    }
    let caches: Vec<&str> = seen.iter().map(|s| s.1.as_str().unwrap()).collect();
    // Image chat, text chat, per turn: the image restore at turn 2 spared nothing.
    assert_eq!(caches, ["miss", "miss", "miss", "restored", "miss", "restored"], "{seen:?}");
    for (turn, _, _, content) in seen.iter().step_by(2) {
        assert_eq!(content, "I see 1 image: image 1 is #0000ff (392x392).", "turn {turn}");
    }
    let metrics = d.client().get(format!("{}/metrics", d.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == "rkllmd_conversation_cache_off_total 1"), "{metrics}");
    // One WARN, with its reason, for the operator (read after the exit).
    let (_, log) = d.exit();
    assert_eq!(log.matches("did not spare its prefill").count(), 1, "{log}");
    assert!(log.contains("saved conversations with images switched off"), "{log}");
}
