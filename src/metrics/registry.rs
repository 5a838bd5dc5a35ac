//! The Prometheus metrics that accumulate over the process's life: request
//! histograms and counters, fed once per finished request from the same
//! [`Timings`] the final chunk carries, and the inter-token gaps as tokens
//! arrive. Point-in-time gauges are built per scrape (`scrape.rs`).

use super::request_log::{Finished, Kind, Mismatch};
use super::Timings;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Histogram buckets in seconds, 1 ms to 10 min: NPU prefills of long prompts
/// take minutes, a decode step tens of milliseconds.
pub const BUCKETS: [f64; 18] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 600.0];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    model: String,
    status: String,
    finish_reason: String,
    kind: &'static str,
}

/// The latencies every kind of request has (the others only completions).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

type ByKind = Family<KindLabels, Histogram, fn() -> Histogram>;

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    found: &'static str,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnloadLabels {
    model: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    check: &'static str,
}

pub struct Metrics {
    registry: Registry,
    ttft: Histogram,
    tpot: Histogram,
    itl: Histogram,
    e2e: ByKind,
    queue: ByKind,
    prefill: Histogram,
    decode: Histogram,
    encoder: Histogram,
    encoder_runs: Counter,
    image_cache_hits: Counter,
    prompt_tokens: Counter,
    cached_prompt_tokens: Counter,
    kv_cache_mismatches: Counter,
    prompt_cache_mismatches: Counter,
    generation_tokens: Counter,
    tools_dropped: Counter,
    requests: Family<RequestLabels, Counter>,
    disconnects: Counter,
    mismatches: Family<CheckLabels, Counter>,
    conversation_cache: Family<CacheLabels, Counter>,
    conversation_cache_off: Counter,
    conversation_evictions: Counter,
    shared_prefixes_made: Counter,
    shared_prefix_off: Counter,
    model_yields: Counter,
    model_load_waits: Counter,
    model_unloads: Family<UnloadLabels, Counter>,
    model_loads_wedged: Family<ModelLabels, Counter>,
    runtime_text_dropped: Counter,
    batch_gather_window: Histogram,
    batch_gathers_expired: Counter,
    batch_fillers_in_live_slots: Counter,
    batch_short_off: Counter,
    runtime_surprises: Counter,
    /// Last sampled KV-cache size in tokens; −1 until the first sample.
    /// Last `memory_usage_mb` the runtime reported, in bytes; −1 until then.
    runtime_peak_memory: AtomicI64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            ttft: histogram(),
            tpot: histogram(),
            itl: histogram(),
            e2e: Family::new_with_constructor(histogram),
            queue: Family::new_with_constructor(histogram),
            prefill: histogram(),
            decode: histogram(),
            encoder: histogram(),
            encoder_runs: Counter::default(),
            image_cache_hits: Counter::default(),
            prompt_tokens: Counter::default(),
            cached_prompt_tokens: Counter::default(),
            kv_cache_mismatches: Counter::default(),
            prompt_cache_mismatches: Counter::default(),
            generation_tokens: Counter::default(),
            tools_dropped: Counter::default(),
            requests: Family::default(),
            disconnects: Counter::default(),
            mismatches: Family::default(),
            conversation_cache: Family::default(),
            conversation_cache_off: Counter::default(),
            conversation_evictions: Counter::default(),
            shared_prefixes_made: Counter::default(),
            shared_prefix_off: Counter::default(),
            model_yields: Counter::default(),
            model_load_waits: Counter::default(),
            model_unloads: Family::default(),
            model_loads_wedged: Family::default(),
            runtime_text_dropped: Counter::default(),
            batch_gather_window: histogram(),
            batch_gathers_expired: Counter::default(),
            batch_fillers_in_live_slots: Counter::default(),
            batch_short_off: Counter::default(),
            runtime_surprises: Counter::default(),
            runtime_peak_memory: AtomicI64::new(-1),
        };
        // Both checks start at 0, so an alert can watch for any increase.
        for check in [Mismatch::Tokens, Mismatch::Prefill] {
            drop(m.mismatches.get_or_create(&CheckLabels { check: check.label() }));
        }
        m.register()
    }

    fn register(mut self) -> Metrics {
        let r = &mut self.registry;
        for (name, help, h) in [
            ("rkllmd_time_to_first_token_seconds", "first_token − received (includes the queue)", &self.ttft),
            ("rkllmd_time_per_output_token_seconds", "(last_token − first_token) / (n − 1), for n ≥ 2", &self.tpot),
            ("rkllmd_inter_token_latency_seconds", "gaps between consecutive tokens (n − 1 per request)", &self.itl),
            ("rkllmd_request_prefill_time_seconds", "first_token − admitted", &self.prefill),
            ("rkllmd_request_decode_time_seconds", "last_token − first_token, for n ≥ 2", &self.decode),
            (
                "rkllmd_image_encoder_seconds",
                "a request's vision-encoder runs, summed (requests whose images all came from the cache: none)",
                &self.encoder,
            ),
        ] {
            r.register(name, help, h.clone());
        }
        for (name, help, h) in [
            ("rkllmd_e2e_request_latency_seconds", "finished − received", &self.e2e),
            ("rkllmd_request_queue_time_seconds", "admitted − received", &self.queue),
        ] {
            r.register(name, help, h.clone());
        }
        r.register(
            "rkllmd_prompt_tokens",
            "Prompt tokens (usage.prompt_tokens: the tokenizer's count, else the runtime's prefill count)",
            self.prompt_tokens.clone(),
        );
        r.register(
            "rkllmd_prompt_tokens_cached",
            "Prompt tokens reused from the conversation cache or a prompt-cache file (usage.prompt_tokens_details.cached_tokens)",
            self.cached_prompt_tokens.clone(),
        );
        r.register(
            "rkllmd_kv_cache_mismatch",
            "Runs after which rkllm_get_kv_cache_size disagreed with the tokens sent and generated (the cache restarts clean)",
            self.kv_cache_mismatches.clone(),
        );
        r.register(
            "rkllmd_prompt_cache_mismatch",
            "Runs whose prefill skipped other than the prompt-cache prefix's tokens (all of them when the prompt starts with the prefix, none otherwise)",
            self.prompt_cache_mismatches.clone(),
        );
        r.register(
            "rkllmd_conversation_cache",
            "Runs with the conversation cache by how the prompt's state was found (resident, restored, miss) and why a miss",
            self.conversation_cache.clone(),
        );
        r.register(
            "rkllmd_conversation_cache_off",
            "Times saved conversations were switched off for a model (a file the runtime did not write, load or use as it should; see the WARN log)",
            self.conversation_cache_off.clone(),
        );
        r.register(
            "rkllmd_model_yields",
            "Times a busy model stopped taking new requests so that another model could load (max_switch_wait_secs)",
            self.model_yields.clone(),
        );
        r.register(
            "rkllmd_model_load_waits",
            "Loads that waited for room because the loaded models in their way were in use (max_loaded_models, the memory budget)",
            self.model_load_waits.clone(),
        );
        r.register(
            "rkllmd_model_unloads",
            "Models unloaded, by why: room (for another model's load), keep_alive (idle past it), request (an unload asked for)",
            self.model_unloads.clone(),
        );
        r.register(
            "rkllmd_model_loads_wedged",
            "Loads whose runtime did not come back from a probe at load (short batches, batched prompt-cache files): the model is refused until rkllmd restarts",
            self.model_loads_wedged.clone(),
        );
        r.register(
            "rkllmd_conversation_evictions",
            "Saved conversations removed to keep the budget (least recently used)",
            self.conversation_evictions.clone(),
        );
        r.register(
            "rkllmd_shared_prefixes_made",
            "Prompt-cache files made of a prefix that conversations share (an agent's system prompt and tools), each by a run of the prefix alone in the turn of a new conversation that prefilled it anyway",
            self.shared_prefixes_made.clone(),
        );
        r.register(
            "rkllmd_shared_prefix_off",
            "Times shared-prefix files were switched off for a model (a run of the prefix, a load, or a restore that did not spare the prefix's prefill; see the WARN log)",
            self.shared_prefix_off.clone(),
        );
        r.register("rkllmd_generation_tokens", "Generated tokens", self.generation_tokens.clone());
        r.register(
            "rkllmd_tools_dropped",
            "Tool definitions left out of chat prompts because they did not fit the context (tools_overflow = select; timings.tools_dropped)",
            self.tools_dropped.clone(),
        );
        r.register("rkllmd_image_encoder_runs", "Images the vision encoder ran on", self.encoder_runs.clone());
        r.register(
            "rkllmd_image_cache_hits",
            "Images whose embedding came from the model's embedding cache",
            self.image_cache_hits.clone(),
        );
        r.register("rkllmd_requests", "Completion, embedding and rerank requests by outcome", self.requests.clone());
        r.register(
            "rkllmd_client_disconnects",
            "Requests whose client went away before the end",
            self.disconnects.clone(),
        );
        r.register(
            "rkllmd_runtime_text_dropped_bytes",
            "Bytes of the runtime's token texts that fit no known way of splitting a character over tokens, left out of replies (see the WARN log; 0 normally)",
            self.runtime_text_dropped.clone(),
        );
        r.register(
            "rkllmd_batch_gather_window_seconds",
            "How long each batch gathered for the clients of the last run at most: batch_gather_ms, or twice their measured return time's 95th percentile plus 10 ms, at most 250 ms",
            self.batch_gather_window.clone(),
        );
        r.register(
            "rkllmd_batch_gathers_expired",
            "Batched runs that started when their gathering window (batch_gather_ms, or the clients' measured return time) ran out before every client expected back had sent again",
            self.batch_gathers_expired.clone(),
        );
        r.register(
            "rkllmd_batch_fillers_in_live_slots",
            "Filler inputs put into a batch slot that held a conversation, which the slot then loses (its client did not come back within the gathering window)",
            self.batch_fillers_in_live_slots.clone(),
        );
        r.register(
            "rkllmd_batch_short_off",
            "Times a model's batched runs went back to fillers for slots without a job: the probe at load found the runtime refusing a run with slots left without input, or giving an input to another slot, or a slot without input changed (see the WARN log)",
            self.batch_short_off.clone(),
        );
        r.register(
            "rkllmd_runtime_surprises",
            "Runtime behaviour that contradicts rkllmd's reading of the manual, e.g. a batched run's perf in another slot or a token after a slot finished (see the ERROR log)",
            self.runtime_surprises.clone(),
        );
        r.register(
            "rkllmd_timing_mismatch",
            "Disagreements with the runtime's perf stats (see the WARN log)",
            self.mismatches.clone(),
        );
        self
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Prompt and generated tokens so far (the two token counters).
    pub fn token_totals(&self) -> (u64, u64) {
        (self.prompt_tokens.get(), self.generation_tokens.get())
    }

    /// One gap between consecutive generated tokens of a reply.
    pub fn inter_token(&self, gap: Duration) {
        self.itl.observe(gap.as_secs_f64());
    }

    /// A request that reached the engine has ended.
    pub fn finished(&self, f: &Finished, t: &Timings, model: &str) {
        let seconds = |ms: Option<f64>| ms.map(|ms| ms / 1000.0);
        let kind = KindLabels { kind: f.kind.as_str() };
        for (h, value) in [
            (&self.ttft, t.ttft_ms),
            (&self.tpot, t.predicted_per_token_ms),
            (&*self.e2e.get_or_create(&kind), t.e2e_ms),
            (&*self.queue.get_or_create(&kind), t.queue_ms),
            (&self.prefill, t.prompt_ms),
            (&self.decode, t.predicted_ms),
        ] {
            if let Some(s) = seconds(value) {
                h.observe(s);
            }
        }
        if let Some(p) = f.prompt_tokens(t) {
            self.prompt_tokens.inc_by(p.unsigned_abs());
        }
        self.cached_prompt_tokens.inc_by(t.cache_n.unsigned_abs());
        self.generation_tokens.inc_by(u64::from(t.predicted_n));
        self.tools_dropped.inc_by(u64::from(t.tools_dropped));
        if let Some(images) = t.images {
            if let Some(s) = seconds(images.encoder_ms) {
                self.encoder.observe(s);
            }
            self.encoder_runs.inc_by(u64::from(images.encoder_runs));
            self.image_cache_hits.inc_by(u64::from(images.cache_hits));
        }
        if let Some(found) = t.cache {
            self.conversation_cache.get_or_create(&CacheLabels { found, reason: t.cache_miss.unwrap_or("") }).inc();
        }
        if f.client_disconnected {
            self.disconnects.inc();
        }
        self.count(model, f.kind, f.status, f.finish_reason);
        if let Some(perf) = t.runtime {
            self.runtime_peak_memory.store((perf.memory_usage_mb * 1024.0 * 1024.0) as i64, Ordering::Relaxed);
        }
    }

    /// A request refused before it reached the engine (validation, auth, queue full, loading).
    pub fn rejected(&self, model: &str, kind: Kind, status: u16) {
        self.count(model, kind, status, "none");
    }

    fn count(&self, model: &str, kind: Kind, status: u16, finish_reason: &str) {
        let labels = RequestLabels {
            model: model.to_owned(),
            status: status.to_string(),
            finish_reason: finish_reason.to_owned(),
            kind: kind.as_str(),
        };
        self.requests.get_or_create(&labels).inc();
    }

    pub fn mismatch(&self, which: Mismatch) {
        self.mismatches.get_or_create(&CheckLabels { check: which.label() }).inc();
    }

    pub fn kv_cache_mismatch(&self) {
        self.kv_cache_mismatches.inc();
    }

    pub fn prompt_cache_mismatch(&self) {
        self.prompt_cache_mismatches.inc();
    }

    pub fn batch_gather(&self, window: Duration) {
        self.batch_gather_window.observe(window.as_secs_f64());
    }

    pub fn batch_gather_expired(&self) {
        self.batch_gathers_expired.inc();
    }

    pub fn batch_fillers_in_live_slots(&self, fillers: usize) {
        self.batch_fillers_in_live_slots.inc_by(fillers as u64);
    }

    pub fn batch_short_off(&self) {
        self.batch_short_off.inc();
    }

    pub fn runtime_surprise(&self) {
        self.runtime_surprises.inc();
    }

    pub fn conversation_cache_off(&self) {
        self.conversation_cache_off.inc();
    }

    /// Bytes of a token's text that fit no convention for split characters.
    pub fn runtime_text_dropped(&self, bytes: usize) {
        self.runtime_text_dropped.inc_by(bytes as u64);
    }

    pub fn model_yielded(&self) {
        self.model_yields.inc();
    }

    pub fn model_load_waited(&self) {
        self.model_load_waits.inc();
    }

    /// A model's unload finished (its runtime destroyed).
    pub fn model_unloaded(&self, model: &str, reason: &'static str) {
        self.model_unloads.get_or_create(&UnloadLabels { model: model.to_owned(), reason }).inc();
    }

    /// A load of `model` left the runtime stuck in a probe.
    pub fn model_load_wedged(&self, model: &str) {
        self.model_loads_wedged.get_or_create(&ModelLabels { model: model.to_owned() }).inc();
    }

    pub fn shared_prefix_made(&self) {
        self.shared_prefixes_made.inc();
    }

    pub fn shared_prefix_off(&self) {
        self.shared_prefix_off.inc();
    }

    pub fn conversation_evicted(&self) {
        self.conversation_evictions.inc();
    }

    pub fn runtime_peak_memory_bytes(&self) -> Option<i64> {
        Some(self.runtime_peak_memory.load(Ordering::Relaxed)).filter(|&b| b >= 0)
    }
}
