//! `rkllm_run`: check the inputs, prefill them into the KV cache, plan the
//! replies, deliver them (`deliver`), and keep or drop what the cache holds.

use crate::call::{InferOptions, RunInput};
use crate::deliver::{Caller, End};
use crate::engine::{Reply, SimModel, SlotReply, State};
use crate::generate::{self, ReplySpec};
use crate::log;
use crate::record;
use crate::tokenizer::decode;
use rkllm_sys::common::*;
use serde_json::json;
use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

/// What the record's `run_end` line says.
pub(crate) struct Summary {
    pub code: c_int,
    pub end: &'static str,
    pub prefill_tokens: usize,
    /// Per slot.
    pub generate_tokens: Vec<usize>,
    /// Ids the loaded prompt cache spared the prefill (all slots).
    pub prompt_cache_tokens: usize,
}

impl Summary {
    pub fn failed(end: &'static str) -> Self {
        Summary { code: -1, end, prefill_tokens: 0, generate_tokens: Vec::new(), prompt_cache_tokens: 0 }
    }
}

/// A run ready to deliver: the replies and how long their prefill takes.
struct Prepared {
    reply: Reply,
    prefill_tokens: usize,
    prompt_cache_tokens: usize,
    prefill: Duration,
}

/// One slot's input, checked: what to prefill and what the model "read".
pub(crate) struct SlotInput {
    /// The text the reply is derived from: the prompt, or the decoded ids.
    pub text: String,
    /// Ids to prefill, the template's included.
    pub ids: Vec<u32>,
    /// How many of `ids` are the template's system part.
    pub system: usize,
    /// A multimodal input's images (`vision`) and where each starts in `ids`.
    pub vision: Option<(crate::call::ImageInput, Vec<usize>)>,
}

impl SimModel {
    pub fn run(&self, inputs: &[RunInput], infer: &InferOptions, userdata: *mut c_void) -> c_int {
        self.recorder.write(record::run(inputs, infer, self.params.abi.per_run_sampling()));
        let userdata = if userdata.is_null() { self.callback.userdata as *mut c_void } else { userdata };
        let caller = Caller {
            function: self.callback.function,
            userdata,
            slots: inputs.len(),
            perf_last: self.config.batch_perf_last,
        };
        let summary = match self.gate.enter() {
            Some(_running) => match crate::call::Kind::of(infer.mode) {
                Some(kind) => self.forward(kind, inputs, infer, &caller),
                None => self.run_entered(inputs, infer, &caller),
            },
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
            "generate_tokens": summary.generate_tokens.iter().sum::<usize>(),
            "slot_generate_tokens": summary.generate_tokens,
            "prompt_cache_tokens": summary.prompt_cache_tokens,
        }));
        summary.code
    }

    fn run_entered(&self, inputs: &[RunInput], infer: &InferOptions, caller: &Caller) -> Summary {
        // Planning the replies takes the simulator real time: it counts as
        // part of the prefill, whose deadline is set from here.
        let started = Instant::now();
        let prepared = {
            let mut state = self.state();
            match state.paused.take() {
                // A paused reply resumes whatever this call's input says.
                Some(reply) => Ok(Prepared {
                    reply,
                    prefill_tokens: 0,
                    prompt_cache_tokens: 0,
                    prefill: self.scaled(self.config.profile.decode_ms),
                }),
                None => self.prepare(&mut state, inputs, infer),
            }
        };
        let Prepared { mut reply, prefill_tokens, prompt_cache_tokens, prefill } = match prepared {
            Ok(p) => p,
            Err(message) => {
                log::line(&message);
                caller.end(call_state::ERROR, RKLLMPerfStat::default());
                return Summary::failed("error");
            }
        };
        let delivered_before: Vec<usize> = reply.slots.iter().map(|s| s.next).collect();
        let (mut end, perf) = self.deliver(&mut reply, started, prefill, prefill_tokens, caller);
        if end == End::Paused && caller.slots > 1 {
            log::line(
                "E rkllm: a batched run was paused by its callback (returned 1); the simulated runtime does not \
                 resume batches (unknown on the real one): the run ends with ERROR",
            );
            end = End::Error;
        }
        let end_name = match end {
            End::Finished if reply.slots.iter().any(|s| s.truncated) => "length",
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
                log::line(&format!("E rkllm: simulated runtime error after {} generated tokens", perf.generate_tokens));
                caller.end(call_state::ERROR, perf);
                -1
            }
        };
        if self.config.abort_unsaved && end == End::Aborted && perf.generate_tokens == 0 {
            self.unsave_prompt_cache(infer);
        }
        let generate_tokens: Vec<usize> =
            reply.slots.iter().zip(&delivered_before).map(|(slot, before)| slot.next - before).collect();
        let mut state = self.state();
        let eos = crate::eos_token_id();
        for ((slot, before), kv) in reply.slots.iter().zip(&delivered_before).zip(state.kv.iter_mut()) {
            kv.extend(slot.pieces[*before..slot.next].iter().map(|p| p.token_id as u32));
            if self.config.eos_in_cache && end == End::Finished && !slot.truncated {
                kv.push(eos);
            }
        }
        match end {
            End::Paused => state.paused = Some(reply),
            End::Error => state.clear(false),
            End::Finished | End::Aborted if !reply.keep_history => state.clear(false),
            End::Finished | End::Aborted => {}
        }
        Summary { code, end: end_name, prefill_tokens, generate_tokens, prompt_cache_tokens }
    }

    /// What one slot's input prefills; the error is the line to print.
    pub(crate) fn slot_input(&self, state: &State, slot: usize, input: &RunInput) -> Result<SlotInput, String> {
        let n = state.kv.len();
        let which = if n > 1 { format!("batch slot {slot}: ") } else { String::new() };
        let empty = || {
            if n > 1 {
                format!(
                    "E rkllm: rkllm_run: batch slot {slot} of {n} has no input; with n_batch = {n} every run must give {n} \
                     inputs (the simulated runtime refuses fewer unless short_batch=accept: whether the real one \
                     accepts them is unknown)"
                )
            } else if input.input_type == RKLLMInputType::Token as i32 {
                "E rkllm: token_input has no ids".to_owned()
            } else {
                "E rkllm: prompt_input is NULL".to_owned()
            }
        };
        match input.input_type {
            t if t == RKLLMInputType::Prompt as i32 => {
                let prompt = input.prompt.as_deref().ok_or_else(empty)?;
                let system = if state.kv[slot].is_empty() { state.template.system_ids() } else { Vec::new() };
                let ids = [system.as_slice(), &state.template.turn_ids(prompt)].concat();
                Ok(SlotInput { text: prompt.to_owned(), ids, system: system.len(), vision: None })
            }
            t if t == RKLLMInputType::Token as i32 => {
                let sent = input.token_ids.as_deref().filter(|ids| !ids.is_empty()).ok_or_else(empty)?;
                let vocab = crate::vocab_size();
                let ids: Vec<u32> = sent.iter().filter_map(|id| u32::try_from(*id).ok()).collect();
                if let Some(bad) = sent.iter().find(|id| usize::try_from(**id).map_or(true, |id| id >= vocab)) {
                    return Err(format!("E rkllm: {which}token id {bad} is outside the vocabulary (0..{vocab})"));
                }
                // Token input is prefilled as sent: no template, no system part.
                Ok(SlotInput { text: decode(&ids), ids, system: 0, vision: None })
            }
            t if t == RKLLMInputType::Multimodal as i32 => {
                let prompt = input.prompt.as_deref().ok_or_else(empty)?;
                let images = input.images.as_ref().ok_or_else(empty)?;
                let system = if state.kv[slot].is_empty() { state.template.system_ids() } else { Vec::new() };
                let checked = crate::vision::check(prompt, images, self.params.img.as_ref(), &state.template, &system)?;
                Ok(SlotInput {
                    text: checked.text,
                    ids: checked.ids,
                    system: system.len(),
                    vision: Some((checked.images, checked.at)),
                })
            }
            other => Err(format!(
                "E rkllm: {which}input_type {other} is not simulated; the simulated runtime takes RKLLM_INPUT_PROMPT, \
                 RKLLM_INPUT_TOKEN and RKLLM_INPUT_MULTIMODAL only"
            )),
        }
    }

    /// Checks every slot's input, prefills them into the KV cache and plans
    /// the replies. Nothing changes unless every slot is accepted.
    fn prepare(&self, state: &mut State, inputs: &[RunInput], infer: &InferOptions) -> Result<Prepared, String> {
        if infer.mode != RKLLMInferMode::Generate as i32 {
            return Err(format!(
                "E rkllm: infer mode {} is not simulated; the simulated runtime takes RKLLM_INFER_GENERATE, \
                 RKLLM_INFER_GET_LAST_HIDDEN_LAYER and RKLLM_INFER_GET_LOGITS",
                infer.mode
            ));
        }
        let lora = self.lora(state, infer)?;
        let max_context = self.params.max_context_len.max(0) as usize;
        let max_new = infer.max_new_tokens.filter(|n| *n > 0).unwrap_or(self.params.max_new_tokens);
        let mut slots = Vec::with_capacity(inputs.len());
        for (slot, input) in inputs.iter().enumerate() {
            // `short_batch=accept`: a slot without input is left as it is.
            let absent = input.input_type == RKLLMInputType::Token as i32
                && input.token_ids.as_deref().is_none_or(|ids| ids.is_empty());
            if absent && inputs.len() > 1 && self.config.short_batch {
                let nothing = SlotInput { text: String::new(), ids: Vec::new(), system: 0, vision: None };
                slots.push((nothing, 0, SlotReply { pieces: Vec::new(), next: 0, truncated: false }));
                continue;
            }
            let checked = self.slot_input(state, slot, input)?;
            let cached = state.kv[slot].len();
            let filled = cached + checked.ids.len();
            if filled > max_context {
                return Err(format!(
                    "E rkllm: the input of {} tokens (with {cached} tokens in the KV cache) exceeds max context length {max_context}",
                    checked.ids.len()
                ));
            }
            let room = max_context - filled;
            let limit = usize::try_from(max_new).ok().filter(|n| *n > 0).map_or(room, |n| n.min(room));
            // Like a model, the reply depends on everything in the context:
            // the cached sequence and this input, as text. A follow-up sent as
            // the new tokens after a kept history gets the reply the whole
            // transcript sent at once would get.
            let context = if cached == 0 {
                checked.text.clone()
            } else {
                decode(&[state.kv[slot].as_slice(), &checked.ids].concat())
            };
            // A model that sees images says what they are: this input's
            // and those its cache holds from earlier turns.
            let mut seen = crate::vision::held(&state.images, slot, &state.kv[slot]);
            if let Some((images, _)) = &checked.vision {
                seen.extend(images.seen());
            }
            let vision = (!seen.is_empty()).then(|| crate::vision::describe(&seen));
            let (pieces, truncated) = generate::reply(&ReplySpec {
                prompt: &context,
                seed: self.config.seed ^ crate::adapters::lora_salt(lora.as_ref()),
                sampling: infer.sampling.unwrap_or(self.params.sampling),
                reply_tokens: self.config.reply_tokens,
                scripted: vision.as_deref().or_else(|| self.script.as_ref().and_then(|s| s.reply_for(&context))),
                ignore_eos: self.params.ignore_eos_token == Some(true),
                limit,
                split: self.config.split_chars,
            });
            // image_cache_lies: images are never matched against a loaded file.
            let lies = self.config.image_cache_lies && checked.vision.is_some();
            let spared = if lies { 0 } else { state.prompt_cache_hit(slot, &checked.ids) };
            slots.push((checked, spared, SlotReply { pieces, next: 0, truncated }));
        }
        // What each slot's KV cache holds after the prefill, as a saved prompt cache.
        let after: Vec<Vec<u32>> =
            slots.iter().zip(&state.kv).map(|((input, _, _), kv)| [kv.as_slice(), &input.ids].concat()).collect();
        self.save_prompt_cache(&after, infer)?;
        if state.kv[0].is_empty() {
            state.kv_system_tokens = slots[0].0.system;
        }
        let prompt_cache_tokens = slots.iter().map(|(_, spared, _)| spared).sum();
        let prefill_tokens = slots.iter().map(|(input, _, _)| input.ids.len()).sum::<usize>() - prompt_cache_tokens;
        // batch_history_lies: the slots' history is prefilled again.
        let lied = if self.config.batch_history_lies && slots.len() > 1 && infer.keep_history {
            state.kv.iter().map(Vec::len).sum()
        } else {
            0
        };
        let prefill_tokens = prefill_tokens + lied;
        crate::vision::prune(&mut state.images, &state.kv);
        for (slot, ((input, _, _), kv)) in slots.iter().zip(state.kv.iter_mut()).enumerate() {
            if let Some((images, at)) = &input.vision {
                state.images.extend(crate::vision::placed(images, at, slot, kv.len()));
            }
            kv.extend(&input.ids);
        }
        // A batch's prefill costs the tokens of all its slots; writing a
        // prompt-cache file costs by its size.
        let saved = infer.prompt_cache.as_ref().is_some_and(|(save, _)| *save != 0);
        let size: usize = state.kv.iter().map(Vec::len).sum();
        let save_ms = if saved { self.config.cache_file_ms * size as f64 / 1000.0 } else { 0.0 };
        let prefill_ms = self.config.profile.prefill_ms(prefill_tokens) + self.config.prefill_extra_ms + save_ms;
        Ok(Prepared {
            reply: Reply {
                slots: slots.into_iter().map(|(_, _, reply)| reply).collect(),
                keep_history: infer.keep_history,
                steps: 0,
            },
            prefill_tokens,
            prompt_cache_tokens,
            prefill: self.scaled(prefill_ms),
        })
    }
}
