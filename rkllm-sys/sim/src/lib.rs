//! A simulated `librkllmrt.so`: Rockchip's RKLLM runtime C functions,
//! implemented in Rust with `rkllm-sys`'s `repr(C)` types, for every ABI
//! `rkllm-sys` lists (1.2.1–1.2.3 and 1.3.0). There is no model: replies are deterministic
//! text, delivered at the pace of a published RK3588 model.
//!
//! # Two ways in
//! * **In-process** (the daemon's mock backend): [`runtime`]`(abi)` gives a
//!   [`rkllm_sys::Runtime`] whose [`table`] holds this crate's functions by
//!   address. Every listed ABI is offered, reporting the newest runtime
//!   version it drives (`AbiInfo::newest`: 1.2 reports `1.2.3`).
//! * **As a shared library**: the cdylib `librkllm_sim.so` exports the real
//!   symbol names (`rkllm_init`, `rkllm_run`, …) with ABI 1.3.0 only and
//!   embeds `RKLLM SDK (version: 1.3.0 simulated)`, so
//!   `rkllm_sys::sniff_file` and `Runtime::load` treat it as a 1.3.0
//!   runtime. One exported `rkllm_createDefaultParam` cannot return two
//!   struct sizes, hence no 1.2 cdylib. All 15 functions of the 1.3.0
//!   header are exported; `rkllm_run_async` exists and returns -1.
//!
//! Interposition: only the named exports (module `exports`) carry `rkllm_*`
//! names, and they are thin wrappers; the table points at the unnamed
//! functions behind them. An executable linking this crate does not export
//! those names dynamically, so loading a real runtime next to it is safe.
//!
//! # Configuration: the `model_path` given to `rkllm_init`
//! * `sim:PROFILE?key=value&key=value` — a simulated model with a timing
//!   [`Profile`] (`sim:` alone or `sim:?…` uses the default profile).
//! * a path to an existing file — profile from `RKLLM_SIM_PROFILE`, else
//!   [`DEFAULT_PROFILE`].
//! * anything else fails like the vendor runtime: it prints
//!   `E rkllm: failed to open model file: PATH` and `E rkllm: invalid rkllm model!`
//!   and `rkllm_init` returns -1 with the handle left NULL.
//!
//! Every key can also come from the environment as `RKLLM_SIM_<KEY>`
//! (upper case; an empty variable counts as unset); a key in the path wins.
//! An unknown key in the path, or a bad value, fails init with a line naming it.
//! Values are taken literally (no percent-decoding) and cannot contain `&`.
//!
//! | key | value | effect |
//! |---|---|---|
//! | `time_scale` | number 0–1000, default 1 | multiplies every delay (0: no delays) |
//! | `reply_tokens` | integer | reply length in generated tokens (default: 16–48 from the prompt's hash, then to the end of that sentence: about 16–65) |
//! | `seed` | integer, default 0 | mixed into the reply's randomness |
//! | `fail_init` | `npu_memory` (any other value too), `driver`, `platform`, `magic`, `tensors` | init fails with that board failure's line, e.g. `E rkllm: failed to malloc npu memory!` |
//! | `error_after` | N | after N generated tokens of a reply the callback gets ERROR and `rkllm_run` returns -1 (a reply that ends first finishes normally) |
//! | `prefill_extra_ms` | number | added to every prefill: a very slow prefill |
//! | `hang_after` | N | after N generated tokens of a reply the run hangs for good: no more callbacks, aborts ignored, `rkllm_run` never returns (a wedged runtime, for watchdog tests; `0` hangs after the prefill). The process must be killed, unless `hang_ms` is set |
//! | `hang_ms` | N | with `hang_after`: the hang ends after N ms (not scaled) and the run goes on, an abort that came meanwhile seen at the next token boundary (a runtime that comes back) |
//! | `hang_runs` | N | with `hang_after`: only the model's first N runs hang, later ones run normally (a runtime that comes back and then serves; default: every run) |
//! | `script` | path to JSON `[{"match": "…", "reply": "…"}]` | the first entry whose `match` occurs in the prompt gives the reply text (`reply_tokens` does not apply) |
//! | `record` | path | appends one JSON line per call received (see below) |
//! | `kv_size_skew` | integer (may be negative), default 0 | a fault: `rkllm_get_kv_cache_size` reports every slot's size plus N (at least 0), disagreeing with the ids sent and generated |
//! | `abort_lag` | N | a run goes on for N tokens after an abort (a runtime that notices it late, as when an abort lands before the run began) |
//! | `reentrant_abort` | `ok` (default) or `deadlock` | `deadlock`: `rkllm_abort` called from inside the result callback never returns (as a runtime holding one lock around the callback and in abort); the record marks every abort `reentrant` or not |
//! | `init_ms` | number | `rkllm_init` takes this long (a slow model load; not scaled by `time_scale`) |
//! | `eos_in_cache` | `0` (default) or `1` | `1`: a reply that ends by EOS leaves the EOS token (`<|im_end|>`) in the KV cache (see *KV cache*) |
//! | `batch_abort_ignored` | `0` (default) or `1` | a fault: a batched run ignores `rkllm_abort` and decodes every slot, filler slots too, to its end (unpaced after the abort); for the check that reports such a runtime |
//! | `cache_lies` | `0` (default) or `1` | a fault: `rkllm_load_prompt_cache` succeeds but the loaded cache spares no later prefill (a prompt cache that does not speed up, rknn-llm #399) |
//! | `image_cache_lies` | `0` (default) or `1` | a fault: a loaded prompt cache spares a token run as usual but no multimodal run (a runtime that does not match images against a file) |
//! | `batch_history_lies` | `0` (default) or `1` | a fault: a batched run with `keep_history = 1` prefills every slot's cached tokens again (counted in `perf.prefill_tokens` and in the prefill time), as a runtime whose batch slots keep no history would; the replies and sizes stay as they were |
//! | `batch_perf_last` | `0` (default) or `1` | a fault: a batched run's FINISH carries the run's `perf` in the last result instead of the first (a runtime that contradicts rkllmd's reading of the manual; rkllmd logs an ERROR and counts it in `rkllmd_runtime_surprises_total`) |
//! | `short_batch` | `refuse` (default) or `accept` | whether a batched run may leave slots without input (a token input of no ids; the manual leaves it open): `refuse` fails the run as above; `accept` leaves such a slot out of the run — no prefill, no decode, its KV cache as it was |
//! | `batch_cache` | `slots` (default) or `refuse` | what a batched run asked to save a prompt cache does (the manual leaves it open): `slots` writes every slot's prompt KV to the one file, and a loaded file of a batched run spares each slot its own ids; `refuse` fails such a run (ERROR, -1) |
//! | `abort_unsaved` | `0` (default) or `1` | a run asked to save a prompt cache and aborted before its first token (in its prefill) leaves no file (the manual leaves open whether an aborted run saves) |
//! | `split_chars` | `bytes` (default), `repeat`, `empty`, `null`, `raw`, `lost` | how a character split over tokens is delivered (the manual leaves it open): `bytes` WAITING carries the token's own bytes and the next text the rest; `repeat` WAITING carries the bytes since the last whole character and the completing NORMAL text repeats them (NORMAL texts are whole characters, as Rockchip's demo reads them); `empty` and `null` WAITING carries `""` or NULL and the completing NORMAL text the whole characters; `raw` no WAITING, every token's own bytes as NORMAL; `lost` a fault: WAITING carries NULL and the completing text only its own bytes, so a split character's first bytes never arrive. In a batch (state always NORMAL) each slot's texts follow the same rule |
//! | `cache_file_ms` | number, default 10 | milliseconds per 1000 tokens to load a prompt-cache file (in `rkllm_load_prompt_cache`) or save one (added to the saving run's prefill), × `time_scale`: ~28 KiB of Qwen2.5-1.5B KV per token on tmpfs |
//!
//! `fail_init` is the switch that makes `rkllm_init` fail.
//!
//! Init also checks what the vendor runtime checks: `extend_param.n_batch`
//! outside 1..=100 prints `E rkllm: The n_batch must be between 1 and 100, but got N`
//! (and the simulator refuses more than 8, the manual's recommended maximum);
//! `max_context_len` must be positive. On success it prints the runtime's
//! `I rkllm: rkllm-runtime version: …` and `I rkllm: rkllm-toolkit version: …` lines.
//! All lines go straight to the process's stderr, where callers capture them.
//!
//! # Timing
//! A run sleeps `prefill = (base_ms + per_token_ms × prefilled tokens + prefill_extra_ms) × time_scale`,
//! then delivers the first token, then one token every `decode_ms × time_scale`,
//! all against deadlines from the run's start (sleeps do not add up drift).
//! The sleeping happens on the thread that called `rkllm_run`.
//!
//! [`PROFILES`] are Rockchip's published RK3588 figures (runtime 1.3.0, w8a8,
//! time to first token at a 128-token prompt). Each TTFT is split like the
//! Qwen2.5-1.5B field measurement (104 ms + 2.14 ms/token = 378 ms):
//! `base_ms = TTFT × 104/378`, `per_token_ms = TTFT × (274/378)/128`.
//!
//! | profile | TTFT @128 | tok/s | base_ms | per_token_ms | decode_ms | memory |
//! |---|---|---|---|---|---|---|
//! | `instant` | 0 | ∞ | 0 | 0 | 0 | — |
//! | `qwen2-0.5b` | 146 ms | 41.6 | 40.2 | 0.827 | 24.0 | 670 MB |
//! | `qwen3-0.6b` | 199 ms | 32.9 | 54.8 | 1.127 | 30.4 | 791 MB |
//! | `tinyllama-1.1b` | 244 ms | 24.4 | 67.1 | 1.382 | 41.0 | 1.09 GB |
//! | `qwen2.5-1.5b` (default) | 378 ms | 16.7 | 104.0 | 2.141 | 59.9 | 1.69 GB |
//! | `phi3-3.8b` | 1017 ms | 7.45 | 279.8 | 5.759 | 134.2 | 3.76 GB |
//! | `chatglm3-6b` | 1353 ms | 4.98 | 372.3 | 7.662 | 200.8 | 5.99 GB |
//! | `qwen2.5-vl-3b` | 809 ms¹ | 8.66 | 222.5 | 4.579 | 115.5 | — |
//!
//! ¹ From the published prefill of one image (196 tokens, 1120 ms) with the
//! same split. This profile is a vision-language model: its simulated
//! vision encoder is `rknn-sim`'s, and multimodal runs are described in
//! module `vision` (the reply names each image's colour).
//!
//! The FINISH callback's `perf` is measured, not copied from the profile:
//! `prefill_time_ms` run start → first token, `generate_time_ms` first token
//! → finish, `prefill_tokens` the tokens prefilled by this run,
//! `generate_tokens` the token callbacks made (NORMAL and WAITING),
//! `memory_usage_mb` the process's VmHWM.
//!
//! # Tokens
//! The simulated model has a real tokenizer: [`tokenizer_json`] is a
//! byte-level BPE in Hugging Face's `tokenizer.json` format (built in code
//! from `words.txt`: ~840 common English words in four forms, numbers,
//! punctuation runs, and the special tokens `<|endoftext|>`, `<|im_start|>`,
//! `<|im_end|>`), and the simulator itself tokenizes with the `tokenizers`
//! crate, with the tokenizer that text is written from. So a daemon that loads the same `tokenizer.json`
//! counts every text exactly as the simulator does, and decoding a reply's
//! `token_id`s gives its text. Common English is ~4 characters per token
//! ("Hello!" is 2 tokens, "Why is the sky blue?" 6); a word outside the
//! list splits into shorter pieces, a character outside it into one token
//! per UTF-8 byte. [`tokenize`] gives the tokens' bytes, [`token_ids`] the ids.
//!
//! A run prefills `tokens(system)` (only when the KV cache is empty)
//! `+ tokens(prefix + prompt + postfix)` of the chat template. The built-in
//! template is ChatML ([`DEFAULT_SYSTEM`], [`DEFAULT_PREFIX`],
//! [`DEFAULT_POSTFIX`]): a first prompt `p` prefills `19 + tokens(p)` tokens,
//! a follow-up in a kept history `8 + tokens(p)`. `rkllm_set_chat_template`
//! replaces the three parts (three empty strings: the prompt alone) and
//! clears the KV cache. The role and `enable_thinking` do not change the
//! count. `RKLLM_INPUT_TOKEN` input is prefilled exactly as sent: no
//! template, no system part; an id outside `0..vocab_size()` or no ids is
//! a runtime error (ERROR, -1).
//!
//! Replies read as what they are: `Simulated reply: …` followed by whole
//! sentences drawn from a fixed list, deterministic for a prompt (for token
//! input: the decoded ids), seed and sampling setting (greedy `top_k` 1, the
//! RKLLM default, ignores the sampling values). Some sentences carry words
//! like `café`, `naïve`, `東京`, `🙂`, whose characters are outside the
//! vocabulary: each is delivered over several tokens, every one a callback
//! and a generated token, WAITING while the bytes so far end inside the
//! character, NORMAL with its last byte. A default reply is 16–48 tokens
//! (from the prompt's hash) rounded up to a whole sentence; `reply_tokens`
//! cuts it to exactly N tokens, ending on a whole character. Scripted text
//! is tokenized like any text.
//!
//! # Runs
//! * The reply ends with FINISH (text NULL, `perf` filled) and `rkllm_run`
//!   returns 0. `max_new_tokens` (init, or per run on 1.3 when > 0; ≤ 0: no
//!   limit) and the room left in `max_context_len` cut it short the same way;
//!   with `ignore_eos_token` (1.3) it continues up to that limit.
//! * A prompt that does not fit in `max_context_len` (with the KV cache)
//!   prints `E rkllm: … exceeds max context length …`, calls back ERROR and returns -1.
//! * `keep_history = 1` keeps the run in the KV cache and the next run
//!   prefills only its own turn; `keep_history = 0` empties the cache after
//!   the run. There is no automatic prefix reuse.
//!
//! # KV cache
//! The cache is a list of token ids per batch slot, exactly: the ids a run
//! prefilled (template included, as above) followed by the ids its
//! callbacks delivered. `rkllm_get_kv_cache_size` writes each slot's count
//! (`n_batch` entries). Whether the real runtime keeps the EOS token that
//! ended a reply is *open*; the simulator does **not** (the size after a
//! kept run is prompt + generated tokens) unless `eos_in_cache=1`, which
//! adds one id after a reply that ended by EOS (not after one cut by its
//! limit or aborted). A run that ends with ERROR empties the cache; a
//! refused input leaves it as it was. `rkllm_clear_kv_cache(h, 1, …)` keeps
//! the system prompt's ids, `(h, 0, …)` nothing; the position ranges are
//! not simulated.
//!
//! # Batches (`extend_param.n_batch` = N, 2..=8)
//! * `rkllm_run` reads an array of N inputs. *Open* on the real runtime:
//!   whether fewer may be given. By default (`short_batch=refuse`) the
//!   simulator refuses a run in which any slot has no input (NULL prompt,
//!   no token ids): `E rkllm: rkllm_run: batch slot I of N has no input …`,
//!   ERROR, -1, nothing prefilled. With `short_batch=accept` a slot whose
//!   input is a token input of no ids is left out of the run: it
//!   prefills and decodes nothing (finished from the first step, so it adds
//!   nothing to a step's cost) and its KV cache stays as it was; slot I's
//!   input goes to slot I.
//! * Every callback carries an array of N results: one step of every slot,
//!   state NORMAL (a slot's bytes may end inside a character: reassemble per
//!   slot). A slot that has finished reports `token_id` -1 and `text` NULL
//!   from then on; the run ends when every slot has finished, with FINISH
//!   (N results, all finished). *Open:* where `perf` goes; the simulator
//!   fills `result[0].perf` for the whole run (tokens summed over slots) and
//!   zeroes the others. ERROR has the same shape.
//! * Sampling, `max_new_tokens` and `keep_history` are per run, shared by
//!   the slots; each slot has its own reply (EOS), limit and KV cache.
//! * Prefill costs the tokens of all slots; a step costs
//!   `decode_ms × (1 + slot_cost × (active slots − 1))` (`slot_cost` 0.15 by default).
//! * `rkllm_abort` ends the run, all slots (*open* whether one slot can be
//!   stopped: the simulator has no way to). A callback returning 1 (pause)
//!   in a batch ends the run with an `E rkllm:` line, ERROR and -1: resuming
//!   batches is not simulated. `hang_after` and `error_after` count steps.
//!
//! # Other calls
//! * `rkllm_abort` from any thread stops a run at its next token boundary
//!   (also while it waits for the next token); the prefill cannot be
//!   interrupted. An aborted run gets FINISH with `perf` and returns 0.
//!   An abort while no run is in progress does nothing.
//! * A callback returning 1 pauses: no more callbacks, `rkllm_run` returns
//!   0 without FINISH. The next `rkllm_run` resumes that reply, ignoring its
//!   own input and parameters (its first token comes one decode interval
//!   after the call). Clearing the cache or setting a template drops a paused reply.
//! * A second `rkllm_run` on a handle that is running returns -1 at once
//!   with an `E rkllm:` line and no callbacks. Clearing the cache, setting a
//!   template or tools, and destroying are refused the same way during a run.
//! * `rkllm_set_function_tools` is recorded only. `rkllm_set_cross_attn_params`
//!   is recorded (`num_tokens`) and returns 0 on a handle initialised with
//!   `extend_param.use_cross_attn` set, else -1 with an `E rkllm:` line.
//! * Only prompt and token input are simulated, in GENERATE mode and in the
//!   hidden-layer and logits modes (`forward.rs`: one NORMAL callback with
//!   the matrix, deterministic values where texts sharing words are close;
//!   a callback returning 2 releases the buffer at once; n_batch 1 only);
//!   anything else, or the name of an adapter that was not loaded, gets ERROR and -1.
//! * LoRA adapters and prompt-cache files: see *Adapters and prompt caches* below.
//! * The callback gets `rkllm_run`'s `userdata`, or on 1.3 when that is NULL
//!   the `result_userdata` given at init (the `RKLLMCallback` struct is copied).
//! * NULL or unknown handles get -1; no call panics across the C boundary.
//!
//! # Adapters and prompt caches
//! * `rkllm_load_lora` checks that the adapter's file exists (the content is
//!   not read; a missing file prints `E rkllm: failed to open lora adapter
//!   file: PATH` and returns -1; a name loaded before, -1 too). A run whose
//!   `lora_params` names a loaded adapter gets replies salted with its name
//!   and scale (different from the base model's); hidden-layer and logits
//!   values do not depend on it.
//! * A run with `prompt_cache_params.save_prompt_cache = 1` writes what its
//!   KV cache holds after the prefill to `prompt_cache_path` (the
//!   simulator's own JSON format; a write error is ERROR and -1). A batched
//!   run writes every slot's ids (`batch_cache=slots`), or fails
//!   (`batch_cache=refuse`).
//!   `rkllm_load_prompt_cache` reads such a file (anything else: -1 with an
//!   `E rkllm:` line); `rkllm_release_prompt_cache` drops it.
//! * A run whose slot's KV cache is empty and whose ids start with the
//!   loaded cache's ids (and go on past them) does not prefill those again:
//!   the prefill time and `perf.prefill_tokens` count only the rest (a
//!   batched run's file: slot I is matched against the ids slot I saved). The
//!   loaded cache stays across runs, `keep_history` and
//!   `rkllm_clear_kv_cache` (*open* on the real runtime).
//! * Images are positions like any other: a file saved by a run whose cache
//!   holds images keeps them, and a multimodal run (each image's positions
//!   where its `<image>` marker is) whose ids start with a loaded file's is
//!   spared them too (*open* on the real runtime: the daemon checks every
//!   restore against `perf.prefill_tokens`).
//!
//! # The record file
//! One JSON object per line with `"call"`: `init` (every `RKLLMParam` field,
//! `extend_param` nested, `abi`), `run` (`role`, `enable_thinking`,
//! `input_type`, `prompt`, `token_ids` — with `n_batch` > 1 these are in an
//! `inputs` array, one object per slot — `mode`, `keep_history`,
//! `lora_adapter`, `prompt_cache`, and on 1.3 `max_new_tokens` and
//! `sampling` (object or null)), `run_end` (`code`, `end`:
//! `eos`/`length`/`abort`/`pause`/`error`/`refused`, `prefill_tokens`,
//! `generate_tokens`, `slot_generate_tokens`, `prompt_cache_tokens` (ids the
//! loaded prompt cache spared the prefill); `end` is `hidden_layer` or
//! `logits` for those modes), `output` (`mode`, `rows`, `width`,
//! `released`: the callback returned 2), `load_lora` (`path`, `name`,
//! `scale`), `load_prompt_cache` (`path`), `release_prompt_cache`, `abort`, `clear_kv_cache`,
//! `set_chat_template`, `set_function_tools`, `set_cross_attn_params`, `destroy`.

mod adapters;
mod call;
mod config;
mod deliver;
mod engine;
mod exports;
mod ffi;
mod forward;
mod gate;
mod generate;
mod handles;
mod log;
mod profile;
mod record;
mod run;
mod script;
mod template;
mod tokenizer;
mod vision;
mod vocab;

pub use config::{KEYS, SCHEME};
pub use forward::EMBD_SIZE;
pub use profile::{profile, Profile, DEFAULT_PROFILE, PROFILES};
pub use template::{DEFAULT_POSTFIX, DEFAULT_PREFIX, DEFAULT_SYSTEM};
pub use tokenizer::{eos_token_id, token_bytes, token_ids, tokenize, tokenizer, tokenizer_json, vocab_size};

use rkllm_sys::{Abi, ForAbi, Listed, Runtime, Table};

/// The name the in-process runtime reports as its origin.
pub const NAME: &str = "rkllm-sim";

/// The runtime version the simulator reports for an ABI.
pub fn version(abi: Abi) -> &'static str {
    abi.info().newest
}

/// The simulator's functions for one ABI, by address.
pub fn table(abi: Abi) -> Table {
    struct SimTable;
    impl ForAbi for SimTable {
        type Output = Table;
        fn call<A: Listed>(self) -> Table {
            A::table(ffi::functions::<A>())
        }
    }
    abi.dispatch(SimTable)
}

/// The simulated runtime, in-process, for one ABI.
pub fn runtime(abi: Abi) -> Runtime {
    Runtime::in_process(table(abi), version(abi), NAME)
}
