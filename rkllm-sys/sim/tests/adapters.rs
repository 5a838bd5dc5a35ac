//! LoRA adapters and prompt-cache files through `rkllm_sys::Model`, both ABIs.

mod common;

use common::{calls, run, temp_path};
use rkllm_sim::tokenize;
use rkllm_sys::{Abi, LoraAdapter, ModelError, RunRequest};

fn adapter(name: &str, path: &std::path::Path) -> LoraAdapter {
    LoraAdapter { name: name.into(), path: path.display().to_string(), scale: 0.5 }
}

#[test]
fn a_loaded_adapter_is_selected_per_run_and_an_unknown_one_fails() {
    for &abi in Abi::ALL {
        let record = temp_path("lora.jsonl");
        let file = temp_path("lora.rkllm");
        std::fs::write(&file, "adapter").unwrap();
        let model = common::load(abi, &format!("sim:instant?reply_tokens=12&record={}", record.display()));
        model.load_lora(&adapter("style", &file)).blocking_recv().unwrap().expect("rkllm_load_lora");

        let base = run(&model, RunRequest::prompt("Tell me a story"));
        let styled = run(&model, RunRequest { lora: Some("style".into()), ..RunRequest::prompt("Tell me a story") });
        assert_eq!(styled.finish.code, 0, "{abi}");
        assert_ne!(base.text(), styled.text(), "{abi}: the adapter changes the reply");

        let unknown = run(&model, RunRequest { lora: Some("other".into()), ..RunRequest::prompt("Tell me a story") });
        assert!(unknown.finish.is_error(), "{abi}: an adapter never loaded is a runtime error");

        let loads = calls(&record, "load_lora");
        assert_eq!(loads.len(), 1);
        assert_eq!((loads[0]["name"].as_str(), loads[0]["scale"].as_f64()), (Some("style"), Some(0.5)));
        let runs: Vec<_> = calls(&record, "run").iter().map(|r| r["lora_adapter"].clone()).collect();
        assert_eq!(runs, [serde_json::Value::Null, "style".into(), "other".into()], "{abi}");
    }
}

#[test]
fn an_adapter_file_that_is_missing_fails_with_the_runtimes_words() {
    let model = common::load(Abi::V1_3, "sim:instant");
    let missing = temp_path("missing.rkllm");
    let err = model.load_lora(&adapter("gone", &missing)).blocking_recv().unwrap().unwrap_err();
    assert!(matches!(err, ModelError::Said { call: "rkllm_load_lora", code: -1, .. }), "{err}");
    assert!(err.to_string().contains("failed to open lora adapter file"), "{err}");
}

#[test]
fn a_saved_prompt_cache_spares_its_prefix_after_it_is_loaded() {
    let record = temp_path("cache.jsonl");
    let cache = temp_path("prefix.cache");
    let spec = format!("sim:instant?reply_tokens=3&record={}", record.display());
    let prefix = "You are a patient teacher. Answer in short sentences.\n";
    let question = "Why is the sky blue?";
    let whole = format!("{prefix}{question}");
    {
        let model = common::load(Abi::V1_3, &spec);
        model.set_chat_template("", "", "").blocking_recv().unwrap().unwrap();
        let save = RunRequest { save_prompt_cache: Some(cache.display().to_string()), ..RunRequest::prompt(prefix) };
        assert_eq!(run(&model, save).perf().prefill_tokens as usize, tokenize(prefix).len());
        assert!(cache.is_file(), "the run wrote the prompt cache");
    }
    // A new handle, as after a restart: nothing cached until the file is loaded.
    let model = common::load(Abi::V1_3, &spec);
    model.set_chat_template("", "", "").blocking_recv().unwrap().unwrap();
    let cold = run(&model, RunRequest::prompt(whole.clone())).perf().prefill_tokens as usize;
    assert_eq!(cold, tokenize(&whole).len());
    model.load_prompt_cache(&cache.display().to_string()).blocking_recv().unwrap().expect("rkllm_load_prompt_cache");
    let warm = run(&model, RunRequest::prompt(whole.clone())).perf().prefill_tokens as usize;
    assert_eq!(warm, cold - tokenize(prefix).len(), "the prefix is not prefilled again");
    let other = run(&model, RunRequest::prompt(question)).perf().prefill_tokens as usize;
    assert_eq!(other, tokenize(question).len(), "an input that does not start with the prefix prefills in full");
    assert_eq!(
        calls(&record, "run_end").iter().map(|r| r["prompt_cache_tokens"].as_u64().unwrap()).collect::<Vec<_>>(),
        [0, 0, tokenize(prefix).len() as u64, 0]
    );

    model.release_prompt_cache().blocking_recv().unwrap().unwrap();
    let released = run(&model, RunRequest::prompt(whole.clone())).perf().prefill_tokens as usize;
    assert_eq!(released, cold);

    let foreign = temp_path("foreign.cache");
    std::fs::write(&foreign, "not a cache").unwrap();
    let err = model.load_prompt_cache(&foreign.display().to_string()).blocking_recv().unwrap().unwrap_err();
    assert!(err.to_string().contains("failed to load prompt cache"), "{err}");
}
