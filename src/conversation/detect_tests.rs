use super::*;
use std::io::Write;
use std::os::unix::fs::FileExt;

/// A sparse file of `len` bytes with `marks` written at their offsets.
fn model(dir: &Path, name: &str, len: u64, marks: &[(u64, &str)]) -> std::path::PathBuf {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(len).unwrap();
    for (at, text) in marks {
        file.write_all_at(text.as_bytes(), *at).unwrap();
    }
    path
}

const BIG: u64 = 3 * WINDOW;

#[test]
fn file_names_name_families() {
    let cases = [
        ("Qwen2.5-1.5B-Instruct-rk3588-w8a8.rkllm", Some(Known::Family(TemplateFamily::Chatml))),
        ("qwen2_5_0.5b_instruct.rkllm", Some(Known::Family(TemplateFamily::Chatml))),
        ("Qwen3-1.7B-rk3588-w8a8-opt-1-hybrid-ratio-0.0.rkllm", Some(Known::Family(TemplateFamily::Qwen3))),
        ("DeepSeek-R1-Distill-Qwen-1.5B_W8A8_RK3588.rkllm", Some(Known::Family(TemplateFamily::DeepseekR1))),
        ("Llama-3.2-1B-Instruct_w8a8.rkllm", Some(Known::Family(TemplateFamily::Llama3))),
        ("TinyLlama-1.1B-Chat-v1.0.rkllm", Some(Known::Unsupported("zephyr (TinyLlama chat)"))),
        ("gemma-3-1b-it.rkllm", Some(Known::Family(TemplateFamily::Gemma))),
        ("Phi-3.5-mini-instruct.rkllm", Some(Known::Family(TemplateFamily::Phi3))),
        ("MiniCPM4-0.5B.rkllm", Some(Known::Family(TemplateFamily::Chatml))),
        ("internlm2_5-1_8b-chat.rkllm", Some(Known::Unsupported("internlm"))),
        ("model.rkllm", None),
    ];
    for (name, expected) in cases {
        assert_eq!(from_name(name).map(|(known, _)| known), expected, "{name}");
    }
}

#[test]
fn tokens_at_either_end_are_found_and_the_middle_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(
        dir.path(),
        "model.rkllm",
        BIG,
        &[(BIG / 2, "<start_of_turn>"), (BIG - 700_000, "<|start_header_id|>"), (BIG - 20_000, "<|eot_id|>")],
    );
    let d = detect(&path);
    assert_eq!(d.family, Some(TemplateFamily::Llama3), "{d:?}");
    let expected = format!("`<|start_header_id|>` at byte {}", BIG - 700_000);
    assert!(d.reason.contains("from the special tokens in the file") && d.reason.contains(&expected), "{}", d.reason);
    assert!(!d.reason.contains("start_of_turn"), "the middle of the file holds weights and is skipped");
}

#[test]
fn a_marker_across_a_chunk_boundary_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let at = CHUNK as u64 - 5;
    let path = model(dir.path(), "model.rkllm", 3 * CHUNK as u64, &[(at, "<|im_start|>")]);
    let d = detect(&path);
    assert_eq!(d.family, Some(TemplateFamily::Chatml));
    assert!(d.reason.contains(&format!("at byte {at}")), "{}", d.reason);
}

#[test]
fn the_most_specific_token_rule_wins() {
    let dir = tempfile::tempdir().unwrap();
    // A DeepSeek-R1 distill of Llama keeps Llama's header tokens.
    let marks = [(4096, "<|start_header_id|>"), (5000, "<|eot_id|>"), (6000, "<｜User｜>"), (6100, "<｜Assistant｜>")];
    assert_eq!(detect(&model(dir.path(), "a.rkllm", BIG, &marks)).family, Some(TemplateFamily::DeepseekR1));
    let marks = [(4096, "<|im_start|>"), (9000, "<think>")];
    assert_eq!(detect(&model(dir.path(), "b.rkllm", BIG, &marks)).family, Some(TemplateFamily::Qwen3));
    let marks = [(4096, "<|user|>"), (9000, "<|end|>"), (9100, "<|assistant|>")];
    assert_eq!(detect(&model(dir.path(), "c.rkllm", BIG, &marks)).family, Some(TemplateFamily::Phi3));
}

#[test]
fn the_name_is_confirmed_or_overruled_by_the_tokens() {
    let dir = tempfile::tempdir().unwrap();
    // Qwen3's `<think>` may lie outside the windows: ChatML's markers confirm the name.
    let d = detect(&model(dir.path(), "Qwen3-0.6B.rkllm", BIG, &[(2048, "<|im_start|>")]));
    assert_eq!((d.family, d.conflict), (Some(TemplateFamily::Qwen3), false));
    assert!(d.reason.contains("confirmed by the special tokens") && d.reason.contains("at byte 2048"), "{}", d.reason);
    // A file renamed after the wrong model: the tokens win, and it is said.
    let d = detect(&model(dir.path(), "llama-3.2-1b.rkllm", BIG, &[(2048, "<|im_start|>")]));
    assert_eq!((d.family, d.conflict), (Some(TemplateFamily::Chatml), true));
    assert!(d.reason.contains("suggests llama3, which they contradict"), "{}", d.reason);
    // Tokens more specific than the name's family overrule it.
    let marks = [(2048, "<|im_start|>"), (4096, "<｜User｜>"), (4200, "<｜Assistant｜>")];
    let d = detect(&model(dir.path(), "qwen2.5-1.5b.rkllm", BIG, &marks));
    assert_eq!((d.family, d.conflict), (Some(TemplateFamily::DeepseekR1), true), "{}", d.reason);
}

#[test]
fn the_name_alone_and_nothing_at_all_are_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let d = detect(&model(dir.path(), "gemma-2-2b-it.rkllm", BIG, &[]));
    assert_eq!(d.family, Some(TemplateFamily::Gemma));
    assert!(d.reason.contains("no special-token text found in the first and last 16 MiB"), "{}", d.reason);
    let d = detect(&model(dir.path(), "model.rkllm", 1000, &[]));
    assert_eq!(d.family, None);
    assert!(d.reason.starts_with("nothing recognised") && d.reason.contains("the whole file"), "{}", d.reason);
    let d = detect(&model(dir.path(), "TinyLlama-1.1B-Chat.rkllm", 1000, &[(10, "<|user|>"), (30, "<|assistant|>")]));
    assert_eq!(d.family, None, "recognised, but no built-in template");
    assert!(d.reason.contains("zephyr") && d.reason.contains("set `template`"), "{}", d.reason);
    let d = detect(&dir.path().join("missing-qwen2.5.rkllm"));
    assert_eq!(d.family, Some(TemplateFamily::Chatml));
    assert!(d.reason.contains("could not be read"), "{}", d.reason);
}

/// The cost on a 2 GB model: only 32 MiB are read whatever the size. The
/// file is sparse, so this times the scan itself and the system calls; a
/// cold disk adds the read of those 32 MiB (the runtime reads the whole
/// file at init anyway). Run with `--nocapture` to see the median.
#[test]
fn detection_on_a_2_gb_file_reads_two_windows() {
    let dir = tempfile::tempdir().unwrap();
    let len = 2 << 30;
    let path = model(dir.path(), "model.rkllm", len, &[(len - 1_000_000, "<|im_start|>")]);
    let mut noise = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    // Weight-like bytes in the head window, with the bytes the scan stops at.
    let bytes: Vec<u8> = (0..WINDOW as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    noise.write_all(&bytes).unwrap();
    let mut times: Vec<std::time::Duration> = (0..5)
        .map(|_| {
            let started = std::time::Instant::now();
            assert_eq!(detect(&path).family, Some(TemplateFamily::Chatml));
            started.elapsed()
        })
        .collect();
    times.sort();
    println!("detection on a 2 GiB file: median {:?} (min {:?}, max {:?})", times[2], times[0], times[4]);
}
