//! Hidden-layer and logits runs through `rkllm_sys::Model`: the callback
//! copies the rows and columns asked for and releases the buffer (returns 2).

mod common;

use common::*;
use rkllm_sys::{Abi, Capture, Matrix, Rows, RunRequest};

fn capture(model: &rkllm_sys::Model, text: &str, capture: Capture) -> (Matrix, Outcome) {
    let ids = rkllm_sim::token_ids(text).into_iter().map(|i| i as i32).collect();
    let out = run(model, RunRequest { capture: Some(capture), ..RunRequest::tokens(ids) });
    let matrix = out.finish.output.clone().expect("a buffer was delivered").expect("copied");
    (matrix, out)
}

#[test]
fn hidden_layer_rows_are_copied_and_the_buffer_released() {
    for &abi in Abi::ALL {
        let record = temp_path(&format!("forward-hidden-{abi}"));
        let model = load(abi, &format!("sim:instant?record={}", record.display()));
        let text = "The cat sat on the mat";
        let n = rkllm_sim::token_ids(text).len();
        let (all, out) = capture(&model, text, Capture::HiddenLayer { rows: Rows::All });
        assert_eq!((all.rows, all.cols, all.num_tokens), (n, rkllm_sim::EMBD_SIZE, n));
        assert!(out.tokens.is_empty(), "no text is generated");
        assert_eq!(out.perf().prefill_tokens, n as i64);
        let (last, _) = capture(&model, text, Capture::HiddenLayer { rows: Rows::Last });
        assert_eq!(last.rows, 1);
        assert_eq!(last.row(0), all.row(n - 1), "the last row is the same either way");
        let outputs = calls(&record, "output");
        assert_eq!(outputs.len(), 2);
        assert!(outputs.iter().all(|o| o["released"] == true && o["mode"] == "hidden_layer"), "{outputs:?}");
        let ends = calls(&record, "run_end");
        assert!(ends.iter().all(|e| e["code"] == 0 && e["end"] == "hidden_layer"), "{ends:?}");
    }
}

#[test]
fn logits_copy_only_the_columns_asked_for() {
    let model = load(Abi::V1_3, "sim:instant");
    let yes = rkllm_sim::token_ids("yes")[0];
    let no = rkllm_sim::token_ids("no")[0];
    let text = "query: red apples. document: red apples are sweet";
    let (m, _) = capture(&model, text, Capture::Logits { rows: Rows::Last, columns: vec![yes, no] });
    assert_eq!((m.rows, m.cols, m.width), (1, 2, rkllm_sim::vocab_size()));
    let unrelated = "query: red apples. document: stock markets fell";
    let (u, _) = capture(&model, unrelated, Capture::Logits { rows: Rows::Last, columns: vec![yes, no] });
    assert!(m.row(0)[0] - m.row(0)[1] > u.row(0)[0] - u.row(0)[1], "{:?} vs {:?}", m.values, u.values);
    let bad = vec![rkllm_sim::vocab_size() as u32];
    let ids = rkllm_sim::token_ids(text).into_iter().map(|i| i as i32).collect();
    let out = run(
        &model,
        RunRequest { capture: Some(Capture::Logits { rows: Rows::Last, columns: bad }), ..RunRequest::tokens(ids) },
    );
    assert!(matches!(out.finish.output, Some(Err(rkllm_sys::CaptureError::Column { .. }))));
}
