//! keep_history, the KV cache calls, the chat template, and the record file.

mod common;

use common::{calls, first_turn_tokens, records, run, temp_path};
use rkllm_sim::{tokenize, DEFAULT_SYSTEM};
use rkllm_sys::{Abi, Model, RunRequest};

fn kv(model: &Model) -> i32 {
    model.kv_cache_size().blocking_recv().unwrap().expect("rkllm_get_kv_cache_size")[0]
}

fn turn(prompt: &str, keep_history: bool) -> RunRequest {
    RunRequest { keep_history, ..RunRequest::prompt(prompt) }
}

/// Tokens of a follow-up turn with the built-in template.
fn follow_up_tokens(prompt: &str) -> usize {
    first_turn_tokens(prompt) - tokenize(DEFAULT_SYSTEM).len()
}

#[test]
fn keep_history_grows_the_cache_and_prefills_only_the_new_turn() {
    let model = common::load(Abi::V1_3, "sim:instant?reply_tokens=10");
    assert_eq!(kv(&model), 0);
    let first = run(&model, turn("Hello there", true));
    assert_eq!(first.perf().prefill_tokens as usize, first_turn_tokens("Hello there"));
    let after_first = first_turn_tokens("Hello there") + 10;
    assert_eq!(kv(&model) as usize, after_first);

    let second = run(&model, turn("And then?", true));
    assert_eq!(second.perf().prefill_tokens as usize, follow_up_tokens("And then?"));
    assert_eq!(kv(&model) as usize, after_first + follow_up_tokens("And then?") + 10);

    // Keeping the system prompt: a new conversation prefills no system part.
    model.clear_kv_cache(true).blocking_recv().unwrap().unwrap();
    assert_eq!(kv(&model) as usize, tokenize(DEFAULT_SYSTEM).len());
    let third = run(&model, turn("Fresh start", false));
    assert_eq!(third.perf().prefill_tokens as usize, follow_up_tokens("Fresh start"));
    assert_eq!(kv(&model), 0, "keep_history = 0 empties the cache after the run");

    let fourth = run(&model, turn("Again", true));
    assert_eq!(fourth.perf().prefill_tokens as usize, first_turn_tokens("Again"));
    model.clear_kv_cache(false).blocking_recv().unwrap().unwrap();
    assert_eq!(kv(&model), 0);
}

#[test]
fn the_chat_template_decides_the_prefill_and_everything_is_recorded() {
    let record = temp_path("record.jsonl");
    let model = common::load(Abi::V1_3, &format!("sim:instant?reply_tokens=5&record={}", record.display()));
    let prompt = "What is 2+2?";
    assert_eq!(run(&model, turn(prompt, true)).perf().prefill_tokens as usize, first_turn_tokens(prompt));

    // Empty strings: the daemon renders the template itself.
    model.set_chat_template("", "", "").blocking_recv().unwrap().unwrap();
    assert_eq!(kv(&model), 0, "setting a template clears the KV cache");
    assert_eq!(run(&model, turn(prompt, false)).perf().prefill_tokens as usize, tokenize(prompt).len());

    model.set_chat_template("SYS: be brief\n", "Q: ", "\nA:").blocking_recv().unwrap().unwrap();
    let expected = tokenize("SYS: be brief\n").len() + tokenize(&format!("Q: {prompt}\nA:")).len();
    assert_eq!(run(&model, turn(prompt, false)).perf().prefill_tokens as usize, expected);

    model
        .set_function_tools("You can call tools.", r#"[{"name":"add"}]"#, "tool_response")
        .blocking_recv()
        .unwrap()
        .unwrap();
    model.clear_kv_cache(true).blocking_recv().unwrap().unwrap();
    drop(model);

    let all = records(&record);
    let init = &all[0];
    assert_eq!(init["call"], "init");
    assert_eq!(init["abi"], "1.3");
    assert!(init["model_path"].as_str().unwrap().starts_with("sim:instant?"));
    assert_eq!(init["extend_param"]["n_batch"], 1);
    assert_eq!((init["max_context_len"].as_i64(), init["max_new_tokens"].as_i64()), (Some(4096), Some(2048)));
    assert_eq!((init["top_k"].as_i64(), init["top_p"].as_f64()), (Some(1), Some(0.9)));
    assert_eq!(init["ignore_eos_token"], false);

    let runs = calls(&record, "run");
    assert_eq!(runs.len(), 3);
    assert_eq!((runs[0]["role"].as_str(), runs[0]["prompt"].as_str()), (Some("user"), Some(prompt)));
    assert_eq!((runs[0]["keep_history"].as_bool(), runs[1]["keep_history"].as_bool()), (Some(true), Some(false)));
    assert_eq!((runs[0]["input_type"].as_i64(), runs[0]["enable_thinking"].as_bool()), (Some(0), Some(false)));
    assert!(runs[0]["sampling"].is_null() && runs[0]["max_new_tokens"] == 0);

    let templates = calls(&record, "set_chat_template");
    assert_eq!(templates.len(), 2);
    assert_eq!(
        (templates[1]["system"].as_str(), templates[1]["prefix"].as_str()),
        (Some("SYS: be brief\n"), Some("Q: "))
    );
    assert_eq!(templates[1]["postfix"], "\nA:");
    let tools = calls(&record, "set_function_tools");
    assert_eq!(tools[0]["tools"], r#"[{"name":"add"}]"#);
    assert_eq!(tools[0]["tool_response_tag"], "tool_response");
    assert_eq!(calls(&record, "clear_kv_cache")[0]["keep_system_prompt"], true);
    assert_eq!(all.last().unwrap()["call"], "destroy");
}

#[test]
fn per_run_sampling_is_recorded_on_1_3() {
    let record = temp_path("record.jsonl");
    let model = common::load(Abi::V1_3, &format!("sim:instant?reply_tokens=3&record={}", record.display()));
    let sampling = rkllm_sys::SamplingParams { top_k: 20, temperature: 0.7, top_p: 0.95, ..Default::default() };
    run(&model, RunRequest { sampling: Some(sampling), max_new_tokens: Some(2), ..RunRequest::prompt("hi") });
    let line = &calls(&record, "run")[0];
    assert_eq!(line["max_new_tokens"], 2);
    assert_eq!(line["sampling"]["top_k"], 20);
    assert_eq!(line["sampling"]["temperature"].as_f64(), Some(0.7));
    assert_eq!(line["sampling"]["top_p"].as_f64(), Some(0.95));
    assert_eq!(line["sampling"]["repeat_penalty"].as_f64(), Some(1.1));
}
