//! The conversation cache matches a follow-up by what the client resends,
//! not only by re-tokenized ids (issue 21, item 1): a reply cut inside a
//! character (U+FFFD resent), a thinking model's reply resent without its
//! reasoning, a reply resent with trailing whitespace trimmed. An edited
//! earlier turn still starts clean, and every reply is the scripted one.

mod common;

use common::{script, Daemon, Turn};
use serde_json::{json, Value};

const MODEL: &str = "sim-qwen2.5-1.5b";

async fn turn(d: &Daemon, messages: &Value, max_tokens: Option<u32>) -> Turn {
    let mut body = json!({"model": MODEL, "messages": messages});
    if let Some(n) = max_tokens {
        body["max_tokens"] = json!(n);
    }
    let r = d.post("/v1/chat/completions", body).await;
    assert_eq!(r.status(), 200);
    Turn::of(&r.json().await.unwrap())
}

fn start(script: &tempfile::NamedTempFile, extra: &[&str]) -> Daemon {
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0&script={}", script.path().display());
    Daemon::start(&[&["--model", &spec, "--model-id", MODEL][..], extra].concat())
}

/// The follow-up reused the whole cache (the first turn's prompt and every
/// token it generated) and the runtime prefilled only the rest.
fn assert_whole_reuse(first: &Turn, follow: &Turn) {
    assert_reuse_in_slot(first, follow);
    let prompt_n = follow.timings["prompt_n"].as_i64().unwrap();
    assert_eq!(prompt_n, follow.prompt() - follow.cached(), "{}", follow.timings);
}

/// The same in a batch slot, whose run's prefill count is the batch's, not
/// one request's (`prompt_n` is null).
fn assert_reuse_in_slot(first: &Turn, follow: &Turn) {
    assert_eq!(follow.cached(), first.prompt() + first.completion(), "{}", follow.usage);
    assert_eq!(follow.timings["cache_n"], follow.cached());
    assert_eq!(follow.timings["cache"], "resident", "{}", follow.timings);
}

#[tokio::test]
async fn a_reply_cut_inside_a_character_and_resent_with_u_fffd_is_reused() {
    let s = script(&[("Again", "Fine."), ("Where", "In 東京 mostly.")]);
    let d = start(&s, &[]);
    let mut messages = vec![json!({"role": "user", "content": "Where?"})];
    // "In" and " " are whole tokens; 東 is three byte tokens: 3 cuts inside it.
    let first = turn(&d, &Value::Array(messages.clone()), Some(3)).await;
    assert!(first.content.ends_with('\u{FFFD}'), "the case this test is about: {:?}", first.content);
    messages
        .extend([json!({"role": "assistant", "content": first.content}), json!({"role": "user", "content": "Again?"})]);
    let follow = turn(&d, &Value::Array(messages), None).await;
    assert_eq!(follow.content, "Fine.");
    assert_whole_reuse(&first, &follow);
    assert_eq!(d.metric("rkllmd_kv_cache_mismatch_total").await, Some(0.0), "no disagreement");
}

#[tokio::test]
async fn a_reply_resent_with_trailing_whitespace_trimmed_is_reused_and_an_edit_before_it_is_not() {
    let s = script(&[("next", "Done."), ("Hello", "Sure thing.   ")]);
    let on = start(&s, &[]);
    let off = start(&s, &["--conversation-cache", "off"]);
    let mut messages = vec![json!({"role": "user", "content": "Hello"})];
    let first = turn(&on, &Value::Array(messages.clone()), None).await;
    assert_eq!(first.content, "Sure thing.   ");
    let trimmed = first.content.trim_end();
    messages
        .extend([json!({"role": "assistant", "content": trimmed}), json!({"role": "user", "content": "And next?"})]);
    let follow = turn(&on, &Value::Array(messages.clone()), None).await;
    assert_eq!(follow.content, "Done.");
    assert_whole_reuse(&first, &follow);

    // The last reply resent as seen, after an edited earlier turn: the ids
    // before it are not the cached ones, a clean miss with the right reply.
    messages[0] = json!({"role": "user", "content": "Hello, edited"});
    messages.extend([json!({"role": "assistant", "content": "Done."}), json!({"role": "user", "content": "next"})]);
    let edited = turn(&on, &Value::Array(messages.clone()), None).await;
    let plain = turn(&off, &Value::Array(messages), None).await;
    assert_eq!(edited.cached(), 0, "{}", edited.usage);
    assert_eq!((edited.content.as_str(), edited.prompt()), (plain.content.as_str(), plain.prompt()));
}

/// A Qwen3 template drops earlier reasoning from the history it renders; the
/// KV cache holds the reasoning the model generated.
#[tokio::test]
async fn a_thinking_reply_resent_without_its_reasoning_is_reused_unless_history_follows_the_template() {
    let s = script(&[
        ("second", "<think>\nShorter.\n</think>\n\nTwo."),
        ("first", "<think>\nLet me think about it.\n</think>\n\nOne."),
    ]);
    let base = ["--template", "qwen3"];
    let kept = start(&s, &base);
    let template = start(&s, &[&base[..], &["--reasoning-history", "template"]].concat());
    let off = start(&s, &[&base[..], &["--conversation-cache", "off"]].concat());
    let batched = start(&s, &[&base[..], &["--batch", "2"]].concat());
    let mut results = Vec::new();
    for d in [&kept, &template, &off, &batched] {
        let mut messages = vec![json!({"role": "user", "content": "The first question"})];
        let first = turn(d, &Value::Array(messages.clone()), None).await;
        assert_eq!(first.content, "One.");
        // As the openai SDK resends it: content only, no reasoning_content.
        messages.extend([
            json!({"role": "assistant", "content": first.content}),
            json!({"role": "user", "content": "The second one"}),
        ]);
        let follow = turn(d, &Value::Array(messages), None).await;
        assert_eq!(follow.content, "Two.");
        results.push((first, follow));
    }
    let [(k1, k2), (t1, t2), (_, o2), (b1, b2)] = &results[..] else { unreachable!() };
    assert_whole_reuse(k1, k2);
    assert_reuse_in_slot(b1, b2);
    // Template: the cached reasoning is not reused; the first prompt, saved
    // as a file when it ran, is restored and the reply prefilled again.
    assert_eq!(t2.cached(), t1.prompt(), "{}", t2.usage);
    assert_eq!(t2.timings["cache"], "restored", "{}", t2.timings);
    assert_eq!(t2.prompt(), o2.prompt(), "template: the prompt is the cache-off daemon's");
    // What keeping costs: the earlier reasoning stays in the context.
    assert!(k2.prompt() > o2.prompt(), "kept {} vs template {}", k2.prompt(), o2.prompt());
}

#[tokio::test]
async fn through_dlopen_a_cut_reply_resent_is_reused() {
    let s = script(&[("Again", "Fine."), ("Where", "In 東京 mostly.")]);
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = dir.path().join("tokenizer.json");
    std::fs::write(&tokenizer, rkllm_sim::tokenizer_json()).unwrap();
    let spec = format!("sim:qwen2.5-1.5b?time_scale=0&script={}", s.path().display());
    let args =
        ["--model", &spec, "--model-id", MODEL, "--template", "chatml", "--tokenizer", tokenizer.to_str().unwrap()];
    let d = Daemon::start_dlopen(&args);
    let mut messages = vec![json!({"role": "user", "content": "Where?"})];
    let first = turn(&d, &Value::Array(messages.clone()), Some(3)).await;
    assert!(first.content.ends_with('\u{FFFD}'), "{:?}", first.content);
    messages
        .extend([json!({"role": "assistant", "content": first.content}), json!({"role": "user", "content": "Again?"})]);
    let follow = turn(&d, &Value::Array(messages), None).await;
    assert_eq!(follow.content, "Fine.");
    assert_whole_reuse(&first, &follow);
}

/// Every turn cut inside a character: the cache holds the generated bytes,
/// the client's history holds U+FFFD, turn after turn.
#[tokio::test]
async fn a_chat_of_cut_replies_reuses_the_whole_cache_on_every_turn() {
    chat_of_cut_replies(&[], assert_whole_reuse).await;
}

/// The same in a batch slot (`slots.rs`): the client names what it saw as
/// its slot's reply ends, which may be before the batched run has returned.
#[tokio::test]
async fn in_a_batch_slot_a_chat_of_cut_replies_reuses_the_whole_cache_on_every_turn() {
    chat_of_cut_replies(&["--batch", "2"], assert_reuse_in_slot).await;
}

async fn chat_of_cut_replies(extra: &[&str], assert_reuse: fn(&Turn, &Turn)) {
    let s = script(&[("", "In 東京 mostly.")]);
    let d = start(&s, extra);
    let mut messages = vec![json!({"role": "user", "content": "Where?"})];
    let mut previous: Option<Turn> = None;
    for i in 0..5 {
        let t = turn(&d, &Value::Array(messages.clone()), Some(3)).await;
        assert!(t.content.ends_with('\u{FFFD}'), "turn {i}: {:?}", t.content);
        match &previous {
            Some(p) => assert_reuse(p, &t),
            None => assert_eq!(t.cached(), 0),
        }
        messages
            .extend([json!({"role": "assistant", "content": t.content}), json!({"role": "user", "content": "More?"})]);
        previous = Some(t);
    }
}

/// A thinking reply cut before its answer shows the client no content; the
/// openai SDK resends it as an empty message (its reasoning dropped), and
/// the cached reply, reasoning and all, stands for it.
#[tokio::test]
async fn a_thinking_reply_cut_before_its_answer_and_resent_empty_is_reused() {
    let s = script(&[("Next", "Fine."), ("", "<think>\nLet me think about it for quite a while.\n</think>\n\nOne.")]);
    let d = start(&s, &["--template", "qwen3"]);
    let mut messages = vec![json!({"role": "user", "content": "The first question"})];
    let first = turn(&d, &Value::Array(messages.clone()), Some(6)).await;
    assert_eq!(first.content, "", "the case this test is about: cut inside the reasoning");
    messages.extend([json!({"role": "assistant", "content": ""}), json!({"role": "user", "content": "Next?"})]);
    let follow = turn(&d, &Value::Array(messages), None).await;
    assert_eq!(follow.content, "Fine.");
    assert_whole_reuse(&first, &follow);
}
