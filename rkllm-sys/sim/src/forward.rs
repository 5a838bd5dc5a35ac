//! Hidden-layer (`RKLLM_INFER_GET_LAST_HIDDEN_LAYER`) and logits
//! (`RKLLM_INFER_GET_LOGITS`) runs: a prefill, then one NORMAL callback with
//! a `num_tokens × width` matrix, then FINISH. No model, but values that
//! behave like one where tests look:
//!
//! * **hidden layer** (width [`EMBD_SIZE`]): row *i* is the mean of the
//!   word features of every token up to *i* (context included), a causal
//!   bag of words. A token's feature hashes its lower-cased, trimmed text
//!   into a few signed dimensions (punctuation and special tokens weigh
//!   0.1), so texts that share words point the same way, last-token and
//!   mean pooling alike, and unrelated texts are near orthogonal.
//! * **logits** (width `vocab_size()`): every entry is a hash of (token,
//!   column) in [-1, 1]; in the last row, `yes` gets the number of
//!   distinct words that occur at least twice in the input and `no` gets 3,
//!   so a reranker prompt whose document repeats the query's words scores
//!   higher (the template's own repeated words add the same to every
//!   document).
//!
//! A callback that returns 2 releases the buffer at once (recorded as
//! `released: true` on the `output` line); otherwise it is kept until the
//! run ends, like a runtime waiting for its caller.

use crate::call::{InferOptions, Kind, RunInput};
use crate::deliver::Caller;
use crate::engine::SimModel;
use crate::generate::fnv1a;
use crate::run::Summary;
use crate::tokenizer::decode;
use rkllm_sys::common::*;
use serde_json::json;
use std::collections::HashMap;
use std::ffi::c_int;
use std::ptr;
use std::time::Instant;

/// The simulated model's hidden size.
pub const EMBD_SIZE: usize = 256;

impl SimModel {
    /// Runs a hidden-layer or logits pass over one input.
    pub(crate) fn forward(&self, kind: Kind, inputs: &[RunInput], infer: &InferOptions, caller: &Caller) -> Summary {
        let started = Instant::now();
        let prepared = self.forward_input(inputs, infer);
        let (context, fresh) = match prepared {
            Ok(ids) => ids,
            Err(message) => {
                crate::log::line(&message);
                caller.end(call_state::ERROR, RKLLMPerfStat::default());
                return Summary::failed("error");
            }
        };
        let prefill_ms = self.config.profile.prefill_ms(fresh) + self.config.prefill_extra_ms;
        if let Some(left) = (started + self.scaled(prefill_ms)).checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        let first = context.len() - fresh;
        let (mut buffer, width) = match kind {
            Kind::Hidden => (hidden_rows(&context, first), EMBD_SIZE),
            Kind::Logits => (logit_rows(&context, first), crate::vocab_size()),
        };
        let mut result = empty_result();
        match kind {
            Kind::Hidden => {
                result.last_hidden_layer = RKLLMResultLastHiddenLayer {
                    hidden_states: buffer.as_ptr(),
                    embd_size: width as c_int,
                    num_tokens: fresh as c_int,
                }
            }
            Kind::Logits => {
                result.logits = RKLLMResultLogits {
                    logits: buffer.as_ptr(),
                    vocab_size: width as c_int,
                    num_tokens: fresh as c_int,
                }
            }
        }
        let answer = caller.call_one(&mut result, call_state::NORMAL);
        let released = answer == callback_return::RELEASE;
        if released {
            buffer = Vec::new();
        }
        self.recorder.write(json!({
            "call": "output", "mode": kind.name(), "rows": fresh, "width": width, "released": released,
        }));
        let perf = RKLLMPerfStat {
            prefill_time_ms: (started.elapsed().as_secs_f64() * 1000.0) as f32,
            prefill_tokens: fresh as i32,
            ..RKLLMPerfStat::default()
        };
        caller.end(call_state::FINISH, perf);
        drop(buffer);
        let mut state = self.state();
        if infer.keep_history {
            state.kv[0] = context;
        } else {
            state.clear(false);
        }
        Summary { code: 0, end: kind.name(), prefill_tokens: fresh, generate_tokens: vec![0], prompt_cache_tokens: 0 }
    }

    /// The context after this input (cache + new ids) and how many are new.
    fn forward_input(&self, inputs: &[RunInput], infer: &InferOptions) -> Result<(Vec<u32>, usize), String> {
        let [input] = inputs else {
            return Err("E rkllm: hidden-layer and logits runs are simulated with n_batch 1 only".into());
        };
        let state = self.state();
        self.lora(&state, infer)?;
        let checked = self.slot_input(&state, 0, input)?;
        let cached = state.kv[0].len();
        let max_context = self.params.max_context_len.max(0) as usize;
        if cached + checked.ids.len() > max_context {
            return Err(format!(
                "E rkllm: the input of {} tokens (with {cached} tokens in the KV cache) exceeds max context length {max_context}",
                checked.ids.len()
            ));
        }
        let fresh = checked.ids.len();
        Ok(([state.kv[0].as_slice(), &checked.ids].concat(), fresh))
    }
}

fn empty_result() -> RKLLMResult {
    RKLLMResult {
        text: ptr::null(),
        token_id: -1,
        last_hidden_layer: RKLLMResultLastHiddenLayer { hidden_states: ptr::null(), embd_size: 0, num_tokens: 0 },
        logits: RKLLMResultLogits { logits: ptr::null(), vocab_size: 0, num_tokens: 0 },
        perf: RKLLMPerfStat::default(),
    }
}

/// A token's word feature, added into `row`.
fn add_feature(row: &mut [f32], id: u32) {
    let bytes = crate::token_bytes(id).unwrap_or_default();
    let text = String::from_utf8_lossy(bytes).trim().to_lowercase();
    let is_word = text.chars().any(char::is_alphanumeric);
    let (weight, dims) = if is_word { (1.0, 8) } else { (0.1, 1) };
    let mut h = fnv1a(text.as_bytes()) | 1;
    for _ in 0..dims {
        let sign = if h & 1 == 0 { 1.0 } else { -1.0 };
        row[((h >> 1) % row.len() as u64) as usize] += sign * weight;
        h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17);
    }
}

/// Rows `first..` of the causal bag-of-words hidden states of `context`.
fn hidden_rows(context: &[u32], first: usize) -> Vec<f32> {
    let mut sum = vec![0.0f32; EMBD_SIZE];
    let mut out = Vec::with_capacity((context.len() - first) * EMBD_SIZE);
    for (i, &id) in context.iter().enumerate() {
        add_feature(&mut sum, id);
        if i >= first {
            let n = (i + 1) as f32;
            out.extend(sum.iter().map(|v| v / n));
        }
    }
    out
}

/// Rows `first..` of the logits of `context` (see the module docs).
fn logit_rows(context: &[u32], first: usize) -> Vec<f32> {
    let vocab = crate::vocab_size();
    let mut out = Vec::with_capacity((context.len() - first) * vocab);
    for &id in &context[first..] {
        let seed = u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        out.extend((0..vocab as u64).map(|v| {
            let h = (seed ^ v).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            ((h >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }));
    }
    let last = out.len() - vocab;
    let id = |word: &str| crate::token_ids(word).first().map(|&i| i as usize);
    if let (Some(yes), Some(no)) = (id("yes"), id("no")) {
        out[last + yes] = repeated_words(&decode(context)) as f32;
        out[last + no] = 3.0;
    }
    out
}

/// Distinct words (lower-cased alphanumeric runs) that occur at least twice.
fn repeated_words(text: &str) -> usize {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        *counts.entry(word.to_lowercase()).or_default() += 1;
    }
    counts.values().filter(|&&n| n >= 2).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (norm(a) * norm(b))
    }

    fn last_row(text: &str) -> Vec<f32> {
        let ids = crate::token_ids(text);
        hidden_rows(&ids, ids.len() - 1)
    }

    #[test]
    fn shared_words_are_closer_than_unrelated_text() {
        let cat = last_row("The cat sat on the mat");
        let near = last_row("A cat on a mat");
        let far = last_row("Stock prices fell sharply today");
        assert!(cosine(&cat, &near) > cosine(&cat, &far) + 0.3, "{} vs {}", cosine(&cat, &near), cosine(&cat, &far));
    }

    #[test]
    fn repeated_words_count_each_word_once() {
        assert_eq!(repeated_words("cat dog Cat dog cat bird"), 2);
        assert_eq!(repeated_words("nothing repeats here"), 0);
    }
}
