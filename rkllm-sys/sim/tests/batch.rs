//! Through the raw C functions: token input and the KV-cache contract
//! (ids sent + ids generated), its fault switches, and batched runs
//! (`n_batch` > 1: N inputs, N results per callback).

mod common;

use rkllm_sys::common::*;
use rkllm_sys::{capture_output, v1_3, Abi, Functions, V1_3};
use std::ffi::{c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::Mutex;

/// One slot's result in one callback: token id and bytes (None: text NULL).
type Slot = (i32, Option<Vec<u8>>);

/// Every callback of a run: state, the n_batch results, the first's perf.
#[derive(Default)]
struct Seen {
    slots: usize,
    pause_after: Option<usize>,
    calls: Mutex<Vec<(c_int, Vec<Slot>, RKLLMPerfStat)>>,
}

impl Seen {
    fn new(slots: usize) -> Self {
        Seen { slots, ..Seen::default() }
    }
    fn states(&self) -> Vec<c_int> {
        self.calls.lock().unwrap().iter().map(|c| c.0).collect()
    }
    /// The generated tokens of one slot: (id, bytes), finished slots skipped.
    fn tokens(&self, slot: usize) -> Vec<(u32, Vec<u8>)> {
        let calls = self.calls.lock().unwrap();
        let steps = calls.iter().filter(|c| c.0 <= call_state::WAITING);
        steps.filter_map(|c| c.1[slot].1.clone().map(|b| (c.1[slot].0 as u32, b))).collect()
    }
    fn perf(&self) -> RKLLMPerfStat {
        self.calls.lock().unwrap().iter().find(|c| c.0 == call_state::FINISH).expect("FINISH").2
    }
}

unsafe extern "C" fn on_result(results: *mut RKLLMResult, userdata: *mut c_void, state: c_int) -> c_int {
    let seen = unsafe { &*(userdata as *const Seen) };
    let results = unsafe { std::slice::from_raw_parts(results, seen.slots) };
    let slots = results
        .iter()
        .map(|r| (r.token_id, (!r.text.is_null()).then(|| unsafe { CStr::from_ptr(r.text) }.to_bytes().to_vec())))
        .collect();
    let mut calls = seen.calls.lock().unwrap();
    calls.push((state, slots, results[0].perf));
    let steps = calls.iter().filter(|c| c.0 <= call_state::WAITING).count();
    c_int::from(state <= call_state::WAITING && seen.pause_after == Some(steps))
}

enum Input {
    Prompt(CString),
    Tokens(Vec<i32>),
    Nothing,
}

fn prompt(text: &str) -> Input {
    Input::Prompt(CString::new(text).unwrap())
}

fn tokens(text: &str) -> Input {
    Input::Tokens(rkllm_sim::token_ids(text).into_iter().map(|id| id as i32).collect())
}

struct Handle {
    fns: Functions<V1_3>,
    handle: LLMHandle,
    slots: usize,
}

fn fns() -> Functions<V1_3> {
    rkllm_sim::table(Abi::V1_3).functions::<V1_3>().expect("asked for 1.3")
}

/// Init with `n_batch`; the code and the runtime's lines.
fn try_init(spec: &str, n_batch: u8) -> (c_int, Handle, String) {
    let fns = fns();
    let path = CString::new(spec).unwrap();
    let mut param = unsafe { (fns.create_default_param)() };
    param.model_path = path.as_ptr();
    param.extend_param.n_batch = n_batch;
    let mut callback = v1_3::RKLLMCallback {
        result_callback: Some(on_result),
        result_userdata: ptr::null_mut(),
        tokenizer_callback: None,
        tokenizer_userdata: ptr::null_mut(),
        embed_callback: None,
        embed_userdata: ptr::null_mut(),
    };
    let mut handle: LLMHandle = ptr::null_mut();
    let (code, log) = capture_output(|| unsafe { (fns.init)(&mut handle, &mut param, &mut callback) });
    (code, Handle { fns, handle, slots: usize::from(n_batch) }, log)
}

fn init(spec: &str, n_batch: u8) -> Handle {
    let (code, handle, log) = try_init(spec, n_batch);
    assert_eq!(code, 0, "{log}");
    handle
}

impl Handle {
    /// Runs `inputs` (n_batch of them); the return code and the lines printed.
    fn run(&self, inputs: &[Input], keep_history: bool, max_new_tokens: i32, seen: &Seen) -> (c_int, String) {
        let mut raw: Vec<v1_3::RKLLMInput> = inputs
            .iter()
            .map(|input| {
                let mut raw: v1_3::RKLLMInput = unsafe { std::mem::zeroed() };
                raw.role = c"user".as_ptr();
                match input {
                    Input::Prompt(text) => raw.input.prompt_input = text.as_ptr(),
                    Input::Tokens(ids) => {
                        raw.input_type = RKLLMInputType::Token;
                        raw.input.token_input =
                            RKLLMTokenInput { input_ids: ids.as_ptr().cast_mut(), n_tokens: ids.len() };
                    }
                    Input::Nothing => raw.input.prompt_input = ptr::null(),
                }
                raw
            })
            .collect();
        let mut infer = v1_3::RKLLMInferParam {
            mode: RKLLMInferMode::Generate,
            lora_params: ptr::null_mut(),
            prompt_cache_params: ptr::null_mut(),
            sampling_params: ptr::null_mut(),
            keep_history: c_int::from(keep_history),
            max_new_tokens,
        };
        let userdata = seen as *const Seen as *mut c_void;
        capture_output(|| unsafe { (self.fns.run)(self.handle, raw.as_mut_ptr(), &mut infer, userdata) })
    }

    fn kv(&self) -> Vec<usize> {
        let mut sizes = vec![-1; self.slots];
        assert_eq!(unsafe { (self.fns.get_kv_cache_size)(self.handle, sizes.as_mut_ptr()) }, 0);
        sizes.into_iter().map(|s| s as usize).collect()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            unsafe { (self.fns.destroy)(self.handle) };
        }
    }
}

fn text_of(tokens: &[(u32, Vec<u8>)]) -> String {
    String::from_utf8(tokens.iter().flat_map(|t| t.1.clone()).collect()).expect("whole characters")
}

#[test]
fn token_input_prefills_exactly_the_ids_sent_and_the_cache_holds_them_with_the_reply() {
    let record = common::temp_path("record.jsonl");
    let h = init(&format!("sim:instant?reply_tokens=5&record={}", record.display()), 1);
    let first = rkllm_sim::token_ids("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n");
    let seen = Seen::new(1);
    assert_eq!(h.run(&[Input::Tokens(first.iter().map(|i| *i as i32).collect())], true, 0, &seen).0, 0);
    assert_eq!(seen.perf().prefill_tokens as usize, first.len(), "no template, no system prompt added");
    let reply = seen.tokens(0);
    assert_eq!(reply.len(), 5);
    for (id, bytes) in &reply {
        assert_eq!(rkllm_sim::token_bytes(*id), Some(bytes.as_slice()), "a generated id is the tokenizer's");
    }
    assert_eq!(h.kv(), [first.len() + 5], "the ids sent + the ids generated; no EOS");

    let second = tokens("And then?");
    let seen = Seen::new(1);
    assert_eq!(h.run(&[second], true, 0, &seen).0, 0);
    let sent = rkllm_sim::token_ids("And then?").len();
    assert_eq!(seen.perf().prefill_tokens as usize, sent, "only the new ids are prefilled");
    assert_eq!(h.kv(), [first.len() + 5 + sent + 5]);

    let seen = Seen::new(1);
    assert_eq!(h.run(&[tokens("Bye")], false, 0, &seen).0, 0);
    assert_eq!(h.kv(), [0], "keep_history 0 empties the cache");
    let runs = common::calls(&record, "run");
    assert_eq!(runs[0]["input_type"], 1);
    assert_eq!(runs[0]["token_ids"], serde_json::json!(first));
}

#[test]
fn a_token_outside_the_vocabulary_or_no_tokens_is_a_runtime_error() {
    let h = init("sim:instant?reply_tokens=5", 1);
    let vocab = rkllm_sim::vocab_size() as i32;
    for (input, line) in [
        (Input::Tokens(vec![1, vocab]), format!("token id {vocab} is outside the vocabulary")),
        (Input::Tokens(vec![-3]), "token id -3".to_owned()),
        (Input::Tokens(Vec::new()), "token_input has no ids".to_owned()),
    ] {
        let seen = Seen::new(1);
        let (code, log) = h.run(&[input], true, 0, &seen);
        assert_eq!((code, seen.states()), (-1, vec![call_state::ERROR]));
        assert!(log.contains(&line), "{log}");
        assert_eq!(h.kv(), [0], "nothing was prefilled");
    }
}

#[test]
fn eos_in_cache_and_kv_size_skew_switch_what_the_size_reports() {
    let ids = rkllm_sim::token_ids("Hello");
    let expect = |spec: &str, max_new_tokens: i32| {
        let h = init(spec, 1);
        let seen = Seen::new(1);
        assert_eq!(h.run(&[tokens("Hello")], true, max_new_tokens, &seen).0, 0);
        (h.kv()[0], seen.tokens(0).len())
    };
    assert_eq!(expect("sim:instant?reply_tokens=4", 0), (ids.len() + 4, 4));
    // The EOS that ended the reply is kept; a reply cut by its limit has none.
    assert_eq!(expect("sim:instant?reply_tokens=4&eos_in_cache=1", 0), (ids.len() + 4 + 1, 4));
    assert_eq!(expect("sim:instant?reply_tokens=4&eos_in_cache=1", 2), (ids.len() + 2, 2));
    assert_eq!(expect("sim:instant?reply_tokens=4&kv_size_skew=3", 0), (ids.len() + 4 + 3, 4));
    assert_eq!(expect("sim:instant?reply_tokens=4&kv_size_skew=-100", 0), (0, 4));
}

#[test]
fn a_batch_runs_every_slot_to_its_own_end_in_shared_callbacks() {
    let prompts = ["Tell me a story", "Why is the sky blue?", "Hello!"];
    // Each slot's reply is the one a single sequence would get.
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| {
            let seen = Seen::new(1);
            assert_eq!(init("sim:instant", 1).run(&[prompt(p)], false, 0, &seen).0, 0);
            text_of(&seen.tokens(0))
        })
        .collect();
    let record = common::temp_path("record.jsonl");
    let h = init(&format!("sim:instant?record={}", record.display()), 3);
    let seen = Seen::new(3);
    let inputs: Vec<Input> = prompts.iter().map(|p| prompt(p)).collect();
    assert_eq!(h.run(&inputs, true, 0, &seen).0, 0);

    let calls = seen.calls.lock().unwrap().clone();
    let (last, steps) = calls.split_last().unwrap();
    assert_eq!(last.0, call_state::FINISH);
    assert!(last.1.iter().all(|s| s.0 < 0 && s.1.is_none()), "FINISH: every slot finished");
    assert!(steps.iter().all(|c| c.0 == call_state::NORMAL), "a batch step is NORMAL");
    let lengths: Vec<usize> = (0..3).map(|slot| seen.tokens(slot).len()).collect();
    assert_eq!(steps.len(), *lengths.iter().max().unwrap(), "the run ends when the last slot ends");
    for (slot, len) in lengths.iter().enumerate() {
        // A slot that has finished stays finished: negative id, text NULL.
        assert!(steps[*len..].iter().all(|c| c.1[slot].0 < 0 && c.1[slot].1.is_none()), "slot {slot}");
        assert_eq!(text_of(&seen.tokens(slot)), alone[slot], "slot {slot}");
    }
    assert!(lengths.iter().any(|l| *l != lengths[0]), "per-slot EOS: {lengths:?}");

    let perf = seen.perf();
    let prefill: Vec<usize> = prompts.iter().map(|p| common::first_turn_tokens(p)).collect();
    assert_eq!(perf.prefill_tokens as usize, prefill.iter().sum::<usize>(), "perf in result[0]: all slots");
    assert_eq!(perf.generate_tokens as usize, lengths.iter().sum::<usize>());
    assert!(last.1.len() == 3);
    let sizes: Vec<usize> = prefill.iter().zip(&lengths).map(|(p, l)| p + l).collect();
    assert_eq!(h.kv(), sizes, "one KV cache per slot");
    let run_end = &common::calls(&record, "run_end")[0];
    assert_eq!(run_end["slot_generate_tokens"], serde_json::json!(lengths));
    assert_eq!(common::calls(&record, "run")[0]["inputs"].as_array().map(Vec::len), Some(3));
}

#[test]
fn max_new_tokens_is_per_run_and_every_slot_stops_at_it() {
    let h = init("sim:instant?reply_tokens=30", 3);
    let seen = Seen::new(3);
    assert_eq!(h.run(&[prompt("one"), prompt("two"), prompt("three")], false, 12, &seen).0, 0);
    assert_eq!([0, 1, 2].map(|slot| seen.tokens(slot).len()), [12, 12, 12]);
    // What a batch step costs (×(1 + 0.15 per extra active slot)) is a
    // timing: measured in docs/performance.md, not asserted on a shared machine.
    assert_eq!(seen.perf().generate_tokens, 36, "the batch's perf counts every slot's tokens");
}

#[test]
fn an_empty_slot_a_paused_batch_and_more_than_8_slots_fail_loudly() {
    let h = init("sim:instant?reply_tokens=8", 2);
    let seen = Seen::new(2);
    let (code, log) = h.run(&[prompt("one"), Input::Nothing], true, 0, &seen);
    assert_eq!((code, seen.states()), (-1, vec![call_state::ERROR]));
    assert!(log.contains("E rkllm: rkllm_run: batch slot 1 of 2 has no input"), "{log}");
    assert_eq!(h.kv(), [0, 0]);

    let seen = Seen { pause_after: Some(2), ..Seen::new(2) };
    let (code, log) = h.run(&[prompt("one"), prompt("two")], true, 0, &seen);
    assert_eq!(code, -1);
    assert_eq!(seen.states().last(), Some(&call_state::ERROR));
    assert!(log.contains("a batched run was paused"), "{log}");
    assert_eq!(h.kv(), [0, 0], "an errored run leaves nothing in the cache");

    let (code, h, log) = try_init("sim:instant", 9);
    assert_eq!(code, -1);
    assert!(h.handle.is_null());
    assert!(log.contains("E rkllm: n_batch 9: the simulated runtime batches at most 8"), "{log}");
}
