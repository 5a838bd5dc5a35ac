//! What the simulated model says: UTF-8 split across callbacks, scripts,
//! determinism, limits, and both ABIs in-process.

mod common;

use common::{calls, load, prompt, run, temp_path};
use rkllm_sys::{Abi, InitConfig, Model, RunRequest, SamplingParams};

fn script(entries: &str) -> std::path::PathBuf {
    let path = temp_path("script.json");
    std::fs::write(&path, entries).expect("script written");
    path
}

#[test]
fn multibyte_text_split_over_waiting_and_normal_comes_back_exactly() {
    let reply = "café 日本 🚀👍🏽";
    let path = script(&format!(r#"[{{"match": "unicode", "reply": "{reply}"}}, {{"match": "u", "reply": "no"}}]"#));
    let model = load(Abi::V1_3, &format!("sim:instant?script={}", path.display()));
    let out = prompt(&model, "show some unicode");

    assert_eq!(out.text(), reply);
    assert_eq!(out.bytes(), reply.as_bytes());
    assert!(out.finish.tail.is_empty());
    // Every token of a character outside the vocabulary but its last is WAITING.
    let tokens = rkllm_sim::tokenize(reply);
    assert_eq!(out.tokens.len(), tokens.len(), "one callback per token");
    let mut end = 0;
    for (got, expected) in out.tokens.iter().zip(&tokens) {
        end += expected.len();
        assert_eq!(got.bytes, *expected);
        assert_eq!(got.waiting, !reply.is_char_boundary(end), "token ending at byte {end}");
        if got.waiting {
            assert_eq!(got.text, "", "nothing completes on a WAITING token");
        }
    }
    assert!(out.tokens.iter().any(|t| t.waiting));
    let ids: Vec<u32> = out.tokens.iter().map(|t| t.token_id as u32).collect();
    assert_eq!(ids, rkllm_sim::token_ids(reply), "the token ids are the tokenizer's");
    assert_eq!(out.perf().generate_tokens as usize, out.tokens.len());

    // No match: generated text, still valid UTF-8 however it was split.
    let out = prompt(&model, "nothing scripted here");
    assert!(!out.text().contains('\u{FFFD}'));
    assert_eq!(out.bytes(), out.text().as_bytes());
    assert!(out.text().starts_with("Simulated reply"), "{}", out.text());
}

#[test]
fn generated_replies_include_split_characters_and_reassemble() {
    let model = load(Abi::V1_3, "sim:instant?reply_tokens=48");
    let mut waiting = 0;
    for i in 0..10 {
        let out = prompt(&model, &format!("prompt number {i}"));
        assert_eq!(out.tokens.len(), 48);
        assert_eq!(out.bytes(), out.text().as_bytes(), "lossless reassembly");
        waiting += out.tokens.iter().filter(|t| t.waiting).count();
    }
    assert!(waiting > 0, "the vocabulary's multi-byte words were generated");
}

#[test]
fn same_prompt_and_seed_same_reply_other_seed_other_reply() {
    let texts = |spec: &str, p: &str| {
        let model = load(Abi::V1_3, spec);
        let out = prompt(&model, p);
        (out.text(), out.tokens.iter().map(|t| t.token_id).collect::<Vec<_>>())
    };
    let a = texts("sim:instant?seed=1", "Hello there");
    assert_eq!(a, texts("sim:instant?seed=1", "Hello there"));
    assert_ne!(a.0, texts("sim:instant?seed=2", "Hello there").0);
    assert_ne!(a.0, texts("sim:instant?seed=1", "Hello there!").0);

    // Greedy is the default; a sampled run differs from it, repeatably.
    let model = load(Abi::V1_3, "sim:instant?seed=1");
    let sampled = |m: &Model| {
        let sampling = SamplingParams { top_k: 40, temperature: 0.9, ..SamplingParams::RKLLM_DEFAULTS };
        run(m, RunRequest { sampling: Some(sampling), ..RunRequest::prompt("Hello there") }).text()
    };
    assert_eq!(prompt(&model, "Hello there").text(), a.0);
    assert_ne!(sampled(&model), a.0);
    assert_eq!(sampled(&model), sampled(&model));
}

#[test]
fn max_new_tokens_per_run_on_1_3() {
    let record = temp_path("record.jsonl");
    let model = load(Abi::V1_3, &format!("sim:instant?reply_tokens=20&record={}", record.display()));
    let out = run(&model, RunRequest { max_new_tokens: Some(5), ..RunRequest::prompt("limit me") });
    assert_eq!(out.tokens.len(), 5);
    assert_eq!(out.perf().generate_tokens, 5);
    assert!(!out.finish.is_error());
    // Without a per-run limit, the init value (2048) leaves the reply whole.
    assert_eq!(prompt(&model, "limit me").tokens.len(), 20);
    let ends: Vec<_> = calls(&record, "run_end").iter().map(|r| r["end"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ends, ["length", "eos"]);
    let runs = calls(&record, "run");
    assert_eq!(runs[0]["max_new_tokens"], 5);
    assert_eq!(runs[1]["max_new_tokens"], 0);
}

#[test]
fn max_new_tokens_at_init_on_1_2() {
    let cfg = InitConfig { max_new_tokens: 7, ..InitConfig::new("sim:instant?reply_tokens=30") };
    let model = Model::load(common::sim(Abi::V1_2), cfg).expect("init");
    let out = prompt(&model, "limit me");
    assert_eq!(out.tokens.len(), 7);
    assert_eq!(out.perf().generate_tokens, 7);
    // A per-run limit cannot reach the runtime on 1.2: the init value applies.
    let out = run(&model, RunRequest { max_new_tokens: Some(3), ..RunRequest::prompt("limit me") });
    assert_eq!(out.tokens.len(), 7);
}

#[test]
fn both_abis_in_process_generate() {
    for (abi, version) in [(Abi::V1_2, "1.2.3"), (Abi::V1_3, "1.3.0")] {
        let runtime = common::sim(abi);
        assert_eq!(runtime.version(), Some(version));
        assert_eq!(runtime.abi(), abi);
        let model =
            Model::load(runtime, InitConfig::new("sim:qwen2-0.5b?time_scale=0.05&reply_tokens=9")).expect("init");
        assert_eq!(model.abi(), abi);
        assert!(model.init_log().contains(&format!("rkllm-runtime version: {version} (simulated)")));
        let out = prompt(&model, "Hi");
        assert_eq!(out.finish.code, 0, "{abi}");
        assert_eq!(out.tokens.len(), 9, "{abi}");
        let perf = out.perf();
        assert_eq!((perf.generate_tokens, perf.prefill_tokens as usize), (9, common::first_turn_tokens("Hi")));
        assert!(!out.text().is_empty());
    }
}
