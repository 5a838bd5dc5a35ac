//! `rkllm_run`: prefill, then one callback per generated token, paced
//! against absolute deadlines from the run's start so sleeps never drift.

use crate::call::{InferOptions, RunInput};
use crate::engine::{Reply, SimModel, State};
use crate::generate::{self, Piece, ReplySpec};
use crate::log;
use crate::record;
use rkllm_sys::common::*;
use serde_json::json;
use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::time::{Duration, Instant};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The reply ended (EOS), or its limit was reached.
    Finished,
    Aborted,
    /// The callback returned 1; the reply waits for the next `rkllm_run`.
    Paused,
    /// A simulated runtime error (`error_after`).
    Error,
}

/// What the record's `run_end` line says.
struct Summary {
    code: c_int,
    end: &'static str,
    prefill_tokens: usize,
    generate_tokens: usize,
}

impl Summary {
    fn failed(end: &'static str) -> Self {
        Summary { code: -1, end, prefill_tokens: 0, generate_tokens: 0 }
    }
}

/// The result callback with the run's `userdata`.
struct Caller {
    function: Option<LLMResultCallback>,
    userdata: *mut c_void,
}

impl Caller {
    fn call(&self, text: *const c_char, token_id: i32, perf: RKLLMPerfStat, state: c_int) -> c_int {
        let Some(function) = self.function else {
            return callback_return::CONTINUE;
        };
        let mut result = RKLLMResult {
            text,
            token_id,
            last_hidden_layer: RKLLMResultLastHiddenLayer { hidden_states: ptr::null(), embd_size: 0, num_tokens: 0 },
            logits: RKLLMResultLogits { logits: ptr::null(), vocab_size: 0, num_tokens: 0 },
            perf,
        };
        // SAFETY: the caller registered this callback for exactly this
        // signature; `result` is fully initialised and outlives the call.
        unsafe { function(&mut result, self.userdata, state) }
    }

    fn token(&self, piece: &Piece) -> c_int {
        let state = if piece.waiting { call_state::WAITING } else { call_state::NORMAL };
        self.call(piece.text.as_ptr(), piece.token_id, RKLLMPerfStat::default(), state)
    }

    fn end(&self, state: c_int, perf: RKLLMPerfStat) {
        self.call(ptr::null(), 0, perf, state);
    }
}

/// A run ready to deliver: the reply and how long its prefill takes.
struct Prepared {
    reply: Reply,
    prefill_tokens: usize,
    prefill: Duration,
}

impl SimModel {
    pub fn run(&self, input: &RunInput, infer: &InferOptions, userdata: *mut c_void) -> c_int {
        self.recorder.write(record::run(input, infer, self.params.abi.per_run_sampling()));
        let userdata = if userdata.is_null() { self.callback.userdata as *mut c_void } else { userdata };
        let caller = Caller { function: self.callback.function, userdata };
        let summary = match self.gate.enter() {
            Some(_running) => self.run_entered(input, infer, &caller),
            None => {
                log::line("E rkllm: rkllm_run called while another run is in progress on this handle; one handle runs one sequence");
                Summary::failed("refused")
            }
        };
        self.recorder.write(json!({
            "call": "run_end",
            "code": summary.code,
            "end": summary.end,
            "prefill_tokens": summary.prefill_tokens,
            "generate_tokens": summary.generate_tokens,
        }));
        summary.code
    }

    fn run_entered(&self, input: &RunInput, infer: &InferOptions, caller: &Caller) -> Summary {
        let prepared = {
            let mut state = self.state();
            match state.paused.take() {
                // A paused reply resumes whatever this call's input says.
                Some(reply) => {
                    Ok(Prepared { reply, prefill_tokens: 0, prefill: self.scaled(self.config.profile.decode_ms) })
                }
                None => self.prepare(&mut state, input, infer),
            }
        };
        let mut prepared = match prepared {
            Ok(p) => p,
            Err(message) => {
                log::line(&message);
                caller.end(call_state::ERROR, RKLLMPerfStat::default());
                return Summary::failed("error");
            }
        };
        let (end, perf) = self.deliver(&mut prepared, caller);
        let reply = prepared.reply;
        let end_name = match end {
            End::Finished if reply.truncated => "length",
            End::Finished => "eos",
            End::Aborted => "abort",
            End::Paused => "pause",
            End::Error => "error",
        };
        let code = match end {
            End::Finished | End::Aborted => {
                caller.end(call_state::FINISH, perf);
                0
            }
            End::Paused => 0,
            End::Error => {
                log::line(&format!(
                    "E rkllm: simulated runtime error after {} generated tokens (error_after)",
                    reply.next
                ));
                caller.end(call_state::ERROR, perf);
                -1
            }
        };
        let mut state = self.state();
        state.kv_tokens += perf.generate_tokens as usize;
        match end {
            End::Paused => state.paused = Some(reply),
            End::Error => state.clear(false),
            End::Finished | End::Aborted if !reply.keep_history => state.clear(false),
            End::Finished | End::Aborted => {}
        }
        Summary {
            code,
            end: end_name,
            prefill_tokens: prepared.prefill_tokens,
            generate_tokens: perf.generate_tokens as usize,
        }
    }

    /// Checks the input, prefills it into the KV cache and plans the reply.
    /// The error is the line to print.
    fn prepare(&self, state: &mut State, input: &RunInput, infer: &InferOptions) -> Result<Prepared, String> {
        if input.input_type != RKLLMInputType::Prompt as i32 {
            return Err(format!(
                "E rkllm: input_type {} is not simulated; the simulated runtime takes RKLLM_INPUT_PROMPT only",
                input.input_type
            ));
        }
        let Some(prompt) = input.prompt.as_deref() else {
            return Err("E rkllm: prompt_input is NULL".to_owned());
        };
        if infer.mode != RKLLMInferMode::Generate as i32 {
            return Err(format!(
                "E rkllm: infer mode {} is not simulated; the simulated runtime takes RKLLM_INFER_GENERATE only",
                infer.mode
            ));
        }
        if let Some(name) = &infer.lora_adapter {
            return Err(format!("E rkllm: lora adapter {name} is not loaded"));
        }
        let system_tokens = if state.kv_tokens == 0 { state.template.system_tokens() } else { 0 };
        let prefill_tokens = system_tokens + state.template.turn_tokens(prompt);
        let max_context = self.params.max_context_len.max(0) as usize;
        let filled = state.kv_tokens + prefill_tokens;
        if filled > max_context {
            return Err(format!(
                "E rkllm: the input of {prefill_tokens} tokens (with {} tokens in the KV cache) exceeds max context length {max_context}",
                state.kv_tokens
            ));
        }
        let max_new = infer.max_new_tokens.filter(|n| *n > 0).unwrap_or(self.params.max_new_tokens);
        let room = max_context - filled;
        let limit = usize::try_from(max_new).ok().filter(|n| *n > 0).map_or(room, |n| n.min(room));
        let (pieces, truncated) = generate::reply(&ReplySpec {
            prompt,
            seed: self.config.seed,
            sampling: infer.sampling.unwrap_or(self.params.sampling),
            reply_tokens: self.config.reply_tokens,
            scripted: self.script.as_ref().and_then(|s| s.reply_for(prompt)),
            ignore_eos: self.params.ignore_eos_token == Some(true),
            limit,
        });
        if state.kv_tokens == 0 {
            state.kv_system_tokens = system_tokens;
        }
        state.kv_tokens = filled;
        let prefill_ms = self.config.profile.prefill_ms(prefill_tokens) + self.config.prefill_extra_ms;
        Ok(Prepared {
            reply: Reply { pieces, next: 0, truncated, keep_history: infer.keep_history },
            prefill_tokens,
            prefill: self.scaled(prefill_ms),
        })
    }

    fn scaled(&self, ms: f64) -> Duration {
        Duration::from_secs_f64(ms * self.config.time_scale / 1000.0)
    }

    /// Sleeps through the prefill (an abort cannot interrupt it, as on the
    /// vendor runtime), then delivers pieces one decode interval apart,
    /// checking for an abort at every token boundary.
    fn deliver(&self, prepared: &mut Prepared, caller: &Caller) -> (End, RKLLMPerfStat) {
        let start = Instant::now();
        let first_due = start + prepared.prefill;
        if let Some(left) = first_due.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        let decode = self.scaled(self.config.profile.decode_ms);
        let reply = &mut prepared.reply;
        let mut first_token = None;
        let mut generated: u32 = 0;
        let end = loop {
            let Some(piece) = reply.pieces.get(reply.next) else {
                break End::Finished;
            };
            // Before the abort check: a wedged runtime ignores aborts.
            if self.config.hang_after == Some(reply.next) {
                hang();
            }
            if self.gate.wait_until(first_due + decode * generated) {
                break End::Aborted;
            }
            if self.config.error_after == Some(reply.next) {
                break End::Error;
            }
            first_token.get_or_insert_with(Instant::now);
            let answer = caller.token(piece);
            generated += 1;
            reply.next += 1;
            if answer == callback_return::PAUSE {
                break End::Paused;
            }
        };
        let now = Instant::now();
        let perf = RKLLMPerfStat {
            prefill_time_ms: millis(first_token.unwrap_or(now) - start),
            prefill_tokens: prepared.prefill_tokens as i32,
            generate_time_ms: first_token.map_or(0.0, |t| millis(now - t)),
            generate_tokens: generated as i32,
            memory_usage_mb: peak_memory_mb(),
        };
        (end, perf)
    }
}

/// A wedged runtime (`hang_after`): no more callbacks, aborts ignored,
/// `rkllm_run` never returns. Only killing the process ends it.
fn hang() -> ! {
    loop {
        std::thread::park();
    }
}

fn millis(d: Duration) -> f32 {
    (d.as_secs_f64() * 1000.0) as f32
}

/// The process's peak resident memory (VmHWM), MB; 0 if unknown.
fn peak_memory_mb() -> f32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
    kb.map_or(0.0, |kb| (kb / 1024.0) as f32)
}
