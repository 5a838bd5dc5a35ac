//! One scrape of `/metrics`: the accumulated registry, then the gauges of
//! this moment (queue, KV cache, memory, CPU, NPU telemetry), each present
//! only when its value is known — a missing telemetry file is a missing
//! series, not a zero.

use super::process::ProcessStats;
use super::registry::Metrics;
use super::telemetry::Snapshot;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// The values of this moment.
pub struct Live<'a> {
    /// Requests running and waiting (once the model is loaded).
    pub queue: Option<(usize, usize)>,
    /// Vision-encoder runs in progress, summed (`None`: no loaded model has an encoder).
    pub encoder_running: Option<usize>,
    /// The loaded model's context length, when exactly one model is loaded.
    pub context_len: Option<u32>,
    /// The served ids (`BASE:NAME`) of the loaded models' LoRA adapters; `None`: none loaded.
    pub adapters: Option<Vec<String>>,
    /// Tokens in the loaded models' KV caches after their last runs, summed
    /// (`None` until a runtime said).
    pub kv_cache_tokens: Option<i64>,
    /// Conversations the loaded models saved as prompt-cache files, summed
    /// (`None`: no model keeps conversations).
    pub saved_conversations: Option<SavedTotals>,
    /// Labels of `rkllmd_runtime_info` (backend, versions, ABI); empty = no info metric.
    pub info: Vec<(&'static str, String)>,
    pub telemetry: &'a Snapshot,
    pub process: ProcessStats,
}

/// Saved conversations' counts and bytes, on both tiers and on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SavedTotals {
    pub count: i64,
    pub bytes: i64,
    pub on_disk: i64,
    pub on_disk_bytes: i64,
}

impl std::ops::Add for SavedTotals {
    type Output = SavedTotals;
    fn add(self, o: SavedTotals) -> SavedTotals {
        SavedTotals {
            count: self.count + o.count,
            bytes: self.bytes + o.bytes,
            on_disk: self.on_disk + o.on_disk,
            on_disk_bytes: self.on_disk_bytes + o.on_disk_bytes,
        }
    }
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub fn render(metrics: &Metrics, live: &Live) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    encode_registry(&mut out, metrics.registry())?;
    encode_registry(&mut out, &live_registry(metrics, live))?;
    encode_eof(&mut out)?;
    Ok(out)
}

fn live_registry(metrics: &Metrics, live: &Live) -> Registry {
    let mut r = Registry::default();
    let gauge = |r: &mut Registry, name: &str, help: &str, value: Option<i64>| {
        if let Some(v) = value {
            r.register(name, help, ConstGauge::new(v));
        }
    };
    let (running, waiting) = live.queue.unzip();
    gauge(&mut r, "rkllmd_requests_running", "Generations on the NPU now", running.map(|n| n as i64));
    gauge(&mut r, "rkllmd_requests_waiting", "Requests waiting in the queue", waiting.map(|n| n as i64));
    gauge(
        &mut r,
        "rkllmd_image_encoder_running",
        "Vision-encoder runs in progress (models with an encoder loaded)",
        live.encoder_running.map(|n| n as i64),
    );
    gauge(
        &mut r,
        "rkllmd_kv_cache_tokens",
        "Tokens in the loaded models' KV caches after their last runs (rkllm_get_kv_cache_size), summed",
        live.kv_cache_tokens,
    );
    let kv_cache_usage = kv_cache_usage(live);
    if let Some(usage) = kv_cache_usage {
        r.register(
            "rkllmd_kv_cache_usage_ratio",
            "rkllmd_kv_cache_tokens over the loaded model's context length, 0-1 (one model loaded)",
            ConstGauge::<f64>::new(usage),
        );
    }
    let saved = live.saved_conversations;
    gauge(
        &mut r,
        "rkllmd_conversations_saved",
        "Conversations saved as prompt-cache files (both tiers)",
        saved.map(|s| s.count),
    );
    gauge(
        &mut r,
        "rkllmd_conversations_saved_bytes",
        "Bytes of the saved conversations' files (both tiers)",
        saved.map(|s| s.bytes),
    );
    gauge(
        &mut r,
        "rkllmd_conversations_on_disk",
        "Saved conversations on the disk tier (conversation_cache_disk_dir)",
        saved.map(|s| s.on_disk),
    );
    gauge(
        &mut r,
        "rkllmd_conversations_on_disk_bytes",
        "Bytes of the saved conversations' files on the disk tier",
        saved.map(|s| s.on_disk_bytes),
    );
    gauge(
        &mut r,
        "rkllmd_runtime_peak_memory_bytes",
        "Peak memory the runtime reported for the last run (RKLLMPerfStat.memory_usage_mb)",
        metrics.runtime_peak_memory_bytes(),
    );
    let p = live.process;
    gauge(&mut r, "process_resident_memory_bytes", "Resident memory (VmRSS)", p.rss_bytes.map(|b| b as i64));
    gauge(
        &mut r,
        "rkllmd_process_peak_resident_memory_bytes",
        "Peak resident memory (VmHWM)",
        p.peak_rss_bytes.map(|b| b as i64),
    );
    if let Some(cpu) = p.cpu_seconds {
        r.register("process_cpu_seconds", "User and system CPU time", ConstCounter::new(cpu));
    }
    let t = live.telemetry;
    if let Some(cores) = &t.npu_load {
        let family = Family::<[(&'static str, String); 1], Gauge<f64, AtomicU64>>::default();
        for c in cores {
            family.get_or_create(&[("core", c.core.to_string())]).set(c.ratio);
        }
        r.register("rkllmd_npu_load_ratio", "NPU core load over the driver's 1-s window, 0–1", family);
    }
    if let Some(hz) = t.npu_frequency_hz {
        r.register("rkllmd_npu_frequency_hertz", "NPU clock (devfreq cur_freq)", ConstGauge::new(hz as i64));
    }
    if !t.temperatures.is_empty() {
        let family = Family::<[(&'static str, String); 1], Gauge<f64, AtomicU64>>::default();
        for z in &t.temperatures {
            family.get_or_create(&[("zone", z.zone.clone())]).set(z.celsius);
        }
        r.register("rkllmd_soc_temperature_celsius", "Thermal zone temperatures", family);
    }
    if let Some([one, five, fifteen]) = t.loadavg {
        let family = Family::<[(&'static str, &'static str); 1], Gauge<f64, AtomicU64>>::default();
        for (window, v) in [("1m", one), ("5m", five), ("15m", fifteen)] {
            family.get_or_create(&[("window", window)]).set(v);
        }
        r.register("rkllmd_system_load_average", "System load average (/proc/loadavg)", family);
    }
    if !live.info.is_empty() {
        // A gauge of 1 with the labels, not OpenMetrics' `info` type: the
        // Prometheus text parser that routers' scrapers use (Go's expfmt)
        // refuses a `# TYPE … info` line, and with it the whole scrape.
        let family = Family::<Vec<(&'static str, String)>, Gauge>::default();
        family.get_or_create(&live.info).set(1);
        r.register("rkllmd_runtime_info", "Runtime and NPU driver versions (labels; value 1)", family);
    }
    let load = super::aliases::Load {
        queue: live.queue,
        kv_cache_tokens: live.kv_cache_tokens,
        kv_cache_usage,
        adapters: live.adapters.as_deref(),
        token_totals: metrics.token_totals(),
    };
    super::aliases::register(&mut r, &load);
    r
}

/// The KV cache's fill, 0–1: tokens in it after the last run over the
/// loaded model's context length. Only with one model loaded: the summed
/// tokens of several models have no one context to be a share of.
fn kv_cache_usage(live: &Live) -> Option<f64> {
    let tokens = live.kv_cache_tokens?;
    let context = live.context_len.filter(|&c| c > 0)?;
    Some((tokens as f64 / f64::from(context)).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::telemetry::CoreLoad;

    #[test]
    fn a_missing_source_is_a_missing_series() {
        let m = Metrics::new();
        let empty = Snapshot::default();
        let live = Live {
            queue: None,
            encoder_running: None,
            context_len: None,
            adapters: None,
            kv_cache_tokens: None,
            saved_conversations: None,
            info: vec![],
            telemetry: &empty,
            process: ProcessStats::default(),
        };
        let text = render(&m, &live).unwrap();
        for absent in
            ["npu_load", "npu_frequency", "temperature", "rkllmd_kv_cache_tokens", "requests_running", "runtime_info"]
        {
            assert!(!text.contains(absent), "{absent} should be absent:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));

        let board = Snapshot {
            npu_load: Some(vec![CoreLoad { core: 0, ratio: 0.5 }, CoreLoad { core: 1, ratio: 0.25 }]),
            npu_frequency_hz: Some(1_000_000_000),
            ..Snapshot::default()
        };
        let live = Live {
            queue: Some((1, 3)),
            encoder_running: None,
            context_len: None,
            adapters: None,
            kv_cache_tokens: Some(42),
            saved_conversations: Some(SavedTotals { count: 2, bytes: 100, on_disk: 1, on_disk_bytes: 40 }),
            info: vec![("driver_version", "0.9.8".into())],
            telemetry: &board,
            process: ProcessStats::default(),
        };
        let text = render(&m, &live).unwrap();
        for present in [
            "rkllmd_npu_load_ratio{core=\"0\"} 0.5",
            "rkllmd_npu_load_ratio{core=\"1\"} 0.25",
            "rkllmd_npu_frequency_hertz 1000000000",
            "rkllmd_conversations_saved 2",
            "rkllmd_conversations_on_disk_bytes 40",
            "rkllmd_requests_waiting 3",
            "rkllmd_kv_cache_tokens 42",
            "rkllmd_runtime_info{driver_version=\"0.9.8\"} 1",
        ] {
            assert!(text.contains(present), "missing {present}:\n{text}");
        }
        assert_eq!(text.matches("# EOF").count(), 1);
    }
}
