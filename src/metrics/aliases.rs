//! rkllmd's own load figures again under the names other servers use, for
//! what reads those names: inference-aware routers (the Gateway API
//! Inference Extension's endpoint picker reads vLLM's) and dashboards made
//! for llama.cpp's server. Each alias is the same value as an `rkllmd_*`
//! series of the same scrape (docs/api.md, "Metrics under other servers'
//! names"); absent exactly when that value is unknown.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// The values the aliases repeat, as `scrape.rs` read them for this scrape.
pub struct Load<'a> {
    /// Requests running and waiting (once a model is loaded).
    pub queue: Option<(usize, usize)>,
    pub kv_cache_tokens: Option<i64>,
    pub kv_cache_usage: Option<f64>,
    /// The loaded adapters' served ids; `None`: none loaded.
    pub adapters: Option<&'a [String]>,
    /// Prompt and generated tokens so far.
    pub token_totals: (u64, u64),
}

/// vLLM's `vllm:lora_requests_info` labels, as the endpoint picker reads them.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoraLabels {
    running_lora_adapters: String,
    waiting_lora_adapters: String,
    max_lora: String,
}

pub fn register(r: &mut Registry, load: &Load) {
    let gauge = |r: &mut Registry, name: &str, help: &str, value: Option<f64>| {
        if let Some(v) = value {
            r.register(name, help, ConstGauge::<f64>::new(v));
        }
    };
    let (running, waiting) = load.queue.map(|(r, w)| (r as f64, w as f64)).unzip();
    let usage = load.kv_cache_usage;
    let tokens = load.kv_cache_tokens.map(|t| t as f64);

    gauge(r, "vllm:num_requests_running", "Alias of rkllmd_requests_running", running);
    gauge(r, "vllm:num_requests_waiting", "Alias of rkllmd_requests_waiting", waiting);
    gauge(r, "vllm:kv_cache_usage_perc", "Alias of rkllmd_kv_cache_usage_ratio (0-1)", usage);
    // vLLM's name before 0.10, which endpoint pickers of that time read.
    gauge(r, "vllm:gpu_cache_usage_perc", "Alias of rkllmd_kv_cache_usage_ratio (0-1)", usage);
    if let Some(adapters) = load.adapters {
        // Every adapter is loaded with its model and stays resident: all of
        // them can serve at once, none waits to be loaded. The value is the
        // scrape's time, as vLLM's (the picker takes the newest series).
        let family = Family::<LoraLabels, Gauge<f64, AtomicU64>>::default();
        let labels = LoraLabels {
            running_lora_adapters: adapters.join(","),
            waiting_lora_adapters: String::new(),
            max_lora: adapters.len().to_string(),
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64());
        family.get_or_create(&labels).set(now.unwrap_or(0.0));
        r.register("vllm:lora_requests_info", "LoRA adapters loaded (all resident; none waiting)", family);
    }

    gauge(r, "llamacpp:requests_processing", "Alias of rkllmd_requests_running", running);
    gauge(r, "llamacpp:requests_deferred", "Alias of rkllmd_requests_waiting", waiting);
    gauge(r, "llamacpp:kv_cache_usage_ratio", "Alias of rkllmd_kv_cache_usage_ratio", usage);
    gauge(r, "llamacpp:kv_cache_tokens", "Alias of rkllmd_kv_cache_tokens", tokens);
    let (prompt, predicted) = load.token_totals;
    r.register("llamacpp:prompt_tokens", "Alias of rkllmd_prompt_tokens_total", ConstCounter::new(prompt));
    r.register("llamacpp:tokens_predicted", "Alias of rkllmd_generation_tokens_total", ConstCounter::new(predicted));
}
