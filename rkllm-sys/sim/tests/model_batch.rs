//! Batched runs through the safe layer (`Model::submit_batch`): each slot's
//! tokens reach that slot's own channel, reassembled per slot; a slot whose
//! reply ends gets its `Finished` at once; the run's own `Finished` carries
//! the batch's perf. In-process and through the `dlopen`ed cdylib.

mod common;

use common::{collect, sim, temp_path};
use rkllm_sys::{Abi, BatchEnd, BatchInput, BatchRequest, Event, InitConfig, Model, ModelError, RunInput, Runtime};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::mpsc;

const REPLIES: [(&str, &str); 3] = [
    ("first", "Short café reply."),
    ("second", "The second client gets 東京 and a somewhat longer answer than the first one did."),
    ("third", "Third: naïve 🙂 words, and a middle length answer."),
];

fn script() -> PathBuf {
    let path = temp_path("batch-script.json");
    let entries: Vec<_> = REPLIES.iter().map(|(m, r)| serde_json::json!({"match": m, "reply": r})).collect();
    std::fs::write(&path, serde_json::to_string(&entries).unwrap()).unwrap();
    path
}

fn load(runtime: Arc<Runtime>, n_batch: u8, keys: &str) -> Model {
    let spec = format!("sim:qwen2-0.5b?time_scale=0.05&script={}{keys}", script().display());
    Model::load(runtime, InitConfig { n_batch, ..InitConfig::new(spec) }).expect("init")
}

fn request(prompts: &[&str]) -> BatchRequest {
    let slots = prompts
        .iter()
        .map(|p| Some(BatchInput { input: RunInput::Prompt(format!("the {p} prompt")), enable_thinking: false }))
        .collect();
    BatchRequest {
        slots,
        max_new_tokens: None,
        sampling: None,
        lora: None,
        keep_history: false,
        save_prompt_cache: None,
    }
}

/// Runs the three scripted prompts plus one filler slot nobody reads.
fn run_three(model: &Model) -> (Vec<common::Outcome>, BatchEnd) {
    let mut prompts: Vec<&str> = REPLIES.iter().map(|r| r.0).collect();
    prompts.push("filler");
    let (senders, mut receivers): (Vec<_>, Vec<_>) = (0..3).map(|_| mpsc::unbounded_channel()).unzip();
    let mut slots: Vec<_> = senders.into_iter().map(Some).collect();
    slots.push(None);
    let (_control, done) = model.submit_batch(request(&prompts), slots).expect("submitted");
    let outcomes = receivers.iter_mut().map(collect).collect();
    (outcomes, done.blocking_recv().expect("the run's Finished"))
}

fn check_three(outcomes: &[common::Outcome], end: &BatchEnd) {
    let run = &end.finish;
    for ((_, reply), outcome) in REPLIES.iter().zip(outcomes) {
        assert_eq!(outcome.text(), *reply, "each slot gets its own reply, reassembled");
        assert!(!outcome.finish.is_error() && !outcome.finish.aborted, "{:?}", outcome.finish);
    }
    // The short reply ended (and was told so) before the long one.
    assert!(outcomes[0].finish.at < outcomes[1].finish.at);
    assert!(outcomes[0].finish.at < run.at, "a slot's end is reported when it happens, not at the run's");
    assert!(run.surprises.is_empty(), "{:?}", run.surprises);
    let perf = run.perf.expect("perf of the batch");
    assert_eq!(perf.batch_size, 4);
    // Every slot's generated ids, as its stream got them; the filler's too.
    assert_eq!(end.slot_tokens.len(), 4);
    for (ids, outcome) in end.slot_tokens.iter().zip(outcomes) {
        assert_eq!(*ids, outcome.tokens.iter().map(|t| t.token_id).collect::<Vec<_>>());
    }
    assert!(!end.slot_tokens[3].is_empty(), "the filler decoded too");
    let own: usize = outcomes.iter().map(|o| o.tokens.len()).sum();
    assert!(perf.generate_tokens as usize > own, "summed over the slots, the filler's too: {perf:?} vs {own}");
}

#[test]
fn every_slot_streams_its_own_reply_in_process() {
    let model = load(sim(Abi::V1_3), 4, "");
    let (outcomes, run) = run_three(&model);
    check_three(&outcomes, &run);
}

#[test]
fn every_slot_streams_its_own_reply_through_dlopen() {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("executable directory");
    let path = [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|dir| dir.join("librkllm_sim.so"))
        .find(|p| p.is_file())
        .expect("librkllm_sim.so is built next to the tests");
    let model = load(Arc::new(Runtime::load(&path, None).expect("dlopen")), 4, "");
    let (outcomes, run) = run_three(&model);
    check_three(&outcomes, &run);
}

#[test]
fn a_runtime_error_ends_every_running_slot_with_the_error() {
    let model = load(sim(Abi::V1_3), 4, "&error_after=3");
    let (outcomes, run) = run_three(&model);
    assert!(run.finish.is_error());
    for outcome in &outcomes {
        assert!(outcome.finish.is_error(), "{:?}", outcome.finish);
        assert_eq!(outcome.tokens.len(), 3);
    }
}

#[test]
fn an_abort_ends_every_slot() {
    let model = load(sim(Abi::V1_3), 2, "");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (control, done) = model.submit_batch(request(&["second", "third"]), vec![Some(tx), None]).expect("submitted");
    loop {
        match rx.blocking_recv().expect("events until Finished") {
            Event::Token(_) => break control.abort(),
            Event::Started { .. } => {}
            Event::Finished(f) => panic!("finished before the abort: {f:?}"),
        }
    }
    let outcome = collect(&mut rx);
    assert!(outcome.finish.aborted && !outcome.finish.is_error(), "{:?}", outcome.finish);
    assert!(done.blocking_recv().expect("run finished").finish.aborted);
}

#[test]
fn a_batch_must_fill_every_slot() {
    let model = load(sim(Abi::V1_3), 4, "");
    let (tx, _rx) = mpsc::unbounded_channel();
    let err = model.submit_batch(request(&["first"]), vec![Some(tx)]).err().expect("refused");
    assert!(matches!(err, ModelError::BatchSize { given: 1, n_batch: 4 }), "{err}");
    let single = load(sim(Abi::V1_3), 1, "");
    assert!(single.submit_batch(request(&["first"]), vec![None]).is_err(), "n_batch 1 has no batched runs");
}

/// A run of the scripted prompts in the slots `given` names, the others
/// without input (a short batch), keeping history; each given slot's reply
/// and the run's end.
fn run_short(model: &Model, given: &[(usize, &str)]) -> (Vec<common::Outcome>, BatchEnd) {
    let n = 4;
    let mut slots: Vec<Option<BatchInput>> = vec![None; n];
    let mut channels = vec![None; n];
    let mut receivers = Vec::new();
    for &(slot, prompt) in given {
        let (tx, rx) = mpsc::unbounded_channel();
        slots[slot] = request(&[prompt]).slots.remove(0);
        channels[slot] = Some(tx);
        receivers.push(rx);
    }
    let req = BatchRequest {
        slots,
        max_new_tokens: None,
        sampling: None,
        lora: None,
        keep_history: true,
        save_prompt_cache: None,
    };
    let (_control, done) = model.submit_batch(req, channels).expect("submitted");
    let outcomes = receivers.iter_mut().map(collect).collect();
    (outcomes, done.blocking_recv().expect("the run's Finished"))
}

#[test]
fn a_short_batch_leaves_the_slots_without_input_as_they_were_where_accepted() {
    let model = load(sim(Abi::V1_3), 4, "&short_batch=accept");
    let (outcomes, end) = run_short(&model, &[(1, "first"), (3, "third")]);
    assert_eq!(outcomes[0].text(), REPLIES[0].1);
    assert_eq!(outcomes[1].text(), REPLIES[2].1);
    let perf = end.finish.perf.expect("perf");
    let own: usize = outcomes.iter().map(|o| o.tokens.len()).sum();
    assert_eq!(perf.generate_tokens as usize, own, "nothing decoded in the slots without input");
    assert!(end.slot_tokens[0].is_empty() && end.slot_tokens[2].is_empty());
    let sizes = model.kv_cache_size().blocking_recv().unwrap().unwrap();
    assert_eq!((sizes[0], sizes[2]), (0, 0), "{sizes:?}");
    assert!(sizes[1] > 0 && sizes[3] > 0, "{sizes:?}");
    // Slot 1 left alone by the next run keeps what it held.
    let (outcomes, _) = run_short(&model, &[(0, "second")]);
    assert_eq!(outcomes[0].text(), REPLIES[1].1);
    let after = model.kv_cache_size().blocking_recv().unwrap().unwrap();
    assert_eq!((after[1], after[3]), (sizes[1], sizes[3]));
}

#[test]
fn a_short_batch_is_refused_by_default() {
    let model = load(sim(Abi::V1_3), 4, "");
    let (outcomes, end) = run_short(&model, &[(1, "first")]);
    assert!(end.finish.is_error() && end.finish.code == -1, "{:?}", end.finish);
    assert!(outcomes[0].tokens.is_empty());
    assert_eq!(model.kv_cache_size().blocking_recv().unwrap().unwrap(), vec![0; 4], "nothing prefilled");
}
