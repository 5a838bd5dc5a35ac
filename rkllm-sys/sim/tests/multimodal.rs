//! `RKLLM_INPUT_MULTIMODAL` through `rkllm_sys::Model`: both ABIs in
//! process and the cdylib. The simulated model reads each image's colour
//! from features 0–2 of its first token (`rknn-sim`'s layout) and says it.

mod common;

use common::{first_turn_tokens, run, sim};
use rkllm_sys::{Abi, ImageTags, Images, InitConfig, Model, RunRequest, Runtime};
use std::sync::Arc;

const TOKENS: usize = 3;
const WIDTH: usize = 256; // the simulated model's hidden size

fn tags() -> ImageTags {
    ImageTags { start: "<|vision_start|>".into(), end: "<|vision_end|>".into(), content: "<|image_pad|>".into() }
}

/// Two images: red, then blue (the rest of each embedding is noise).
fn two_images() -> Images {
    let mut embeddings: Vec<f32> = (0..2 * TOKENS * WIDTH).map(|i| (i % 7) as f32 / 7.0).collect();
    embeddings[..3].copy_from_slice(&[1.0, 0.0, 0.0]);
    embeddings[TOKENS * WIDTH..TOKENS * WIDTH + 3].copy_from_slice(&[0.0, 0.0, 1.0]);
    Images { embeddings, n_image: 2, n_image_tokens: TOKENS, width: 392, height: 392, tags: tags() }
}

fn ask(model: &Model, prompt: &str, images: Images) -> common::Outcome {
    run(model, RunRequest { images: Some(images), ..RunRequest::prompt(prompt) })
}

const SEEN: &str = "I see 2 images: image 1 is #ff0000 (392x392), image 2 is #0000ff (392x392).";

fn sees_both_images_in_order(runtime: Arc<Runtime>, init_tags: Option<ImageTags>) {
    let model = Model::load(runtime, InitConfig { image_tags: init_tags, ..InitConfig::new("sim:instant") }).unwrap();
    let out = ask(&model, "Compare <image> with <image>, please.", two_images());
    assert_eq!(out.text(), SEEN);
    // The turn without its markers, and per image its tags and tokens.
    assert_eq!(out.perf().prefill_tokens as usize, first_turn_tokens("Compare  with , please.") + 2 * (TOKENS + 2));
}

#[test]
fn abi_1_3_tags_with_the_input() {
    sees_both_images_in_order(sim(Abi::V1_3), None);
}

#[test]
fn abi_1_2_tags_at_init() {
    sees_both_images_in_order(sim(Abi::V1_2), Some(tags()));
    // Without tags at init, 1.2 has none: a runtime error, not a guess.
    let model = common::load(Abi::V1_2, "sim:instant");
    let out = ask(&model, "<image> <image>", two_images());
    assert!(out.finish.runtime_error && out.text().is_empty());
}

#[test]
fn through_dlopen_of_the_cdylib() {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let path = [deps, deps.parent().unwrap()].iter().map(|d| d.join("librkllm_sim.so")).find(|p| p.is_file()).unwrap();
    sees_both_images_in_order(Arc::new(Runtime::load(&path, None).unwrap()), None);
}

#[test]
fn a_marker_count_that_disagrees_with_the_images_is_a_runtime_error() {
    let model = common::load(Abi::V1_3, "sim:instant");
    for prompt in ["only one <image>", "three <image> <image> <image>", "none"] {
        let out = ask(&model, prompt, two_images());
        assert!(out.finish.runtime_error, "{prompt}");
    }
    let out = ask(&model, "<image> and <image>", two_images());
    assert_eq!(out.text(), SEEN, "the handle still serves");
}
