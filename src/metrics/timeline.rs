//! One request's timeline and every figure derived from it, exactly as
//! defined in `docs/timings.md`. Nothing else in
//! the daemon computes a duration or a rate.

use serde::Serialize;
use std::time::Instant;
use utoipa::ToSchema;

/// Monotonic instants of one request.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    /// The request was read and validated.
    pub received: Instant,
    /// It left the queue; `rkllm_run` was about to be called.
    pub admitted: Option<Instant>,
    /// The callback delivered the first generated token.
    pub first_token: Option<Instant>,
    /// The callback delivered the last generated token.
    pub last_token: Option<Instant>,
    /// `rkllm_run` returned (or the request ended without running).
    pub finished: Option<Instant>,
    /// Generated tokens (NORMAL and WAITING callbacks).
    pub tokens: u32,
    /// Requests that shared this request's run, itself included (1 unbatched).
    pub batch_n: u32,
    /// Prompt tokens the run did not prefill thanks to the model's prompt-cache
    /// file, by the runtime's count; `None`: no prompt cache, or not derivable.
    pub prompt_cache_n: Option<u32>,
    /// How the conversation cache found the prompt (`resident`, `restored`,
    /// `prefix`, `miss`) and, for a miss, why; `None` when it was not used.
    pub cache: Option<(&'static str, Option<&'static str>)>,
    /// A request with images: their figures.
    pub images: Option<ImageTimings>,
}

/// The `timings.images` object of a request with images (docs/timings.md).
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema, PartialEq)]
pub struct ImageTimings {
    /// Images in the request.
    pub count: u32,
    /// Prompt tokens the images take: per image its tokens and start/end tags.
    pub tokens: u32,
    /// Decoding and preprocessing every image (before the queue).
    pub preprocess_ms: f64,
    /// The encoder's runs, summed (inside the queue turn, before `admitted`);
    /// null when every embedding came from the cache.
    pub encoder_ms: Option<f64>,
    /// Images the encoder ran on.
    pub encoder_runs: u32,
    /// Images whose embedding came from the model's embedding cache.
    pub cache_hits: u32,
}

impl Timeline {
    pub fn new(received: Instant) -> Self {
        Timeline {
            received,
            admitted: None,
            first_token: None,
            last_token: None,
            finished: None,
            tokens: 0,
            batch_n: 1,
            prompt_cache_n: None,
            images: None,
            cache: None,
        }
    }

    /// Records one generated token; returns the gap since the previous one
    /// (an inter-token latency: n − 1 of them per reply).
    pub fn token(&mut self, at: Instant) -> Option<std::time::Duration> {
        let gap = self.last_token.map(|last| at.saturating_duration_since(last));
        self.first_token.get_or_insert(at);
        self.last_token = Some(at);
        self.tokens += 1;
        gap
    }
}

/// The runtime's own `RKLLMPerfStat`, reported beside our measurements.
#[derive(Debug, Clone, Copy, Serialize, ToSchema, PartialEq)]
pub struct RuntimePerf {
    pub prefill_time_ms: f64,
    pub prefill_tokens: i64,
    pub generate_time_ms: f64,
    pub generate_tokens: i64,
    pub memory_usage_mb: f64,
    /// Sequences these figures cover: 1, or the whole batch of a batched run
    /// (its tokens and times are the batch's, not this request's).
    pub batch_size: u32,
}

impl From<rkllm_sys::Perf> for RuntimePerf {
    fn from(p: rkllm_sys::Perf) -> Self {
        let rkllm_sys::Perf {
            prefill_time_ms,
            prefill_tokens,
            generate_time_ms,
            generate_tokens,
            memory_usage_mb,
            batch_size,
        } = p;
        RuntimePerf { prefill_time_ms, prefill_tokens, generate_time_ms, generate_tokens, memory_usage_mb, batch_size }
    }
}

/// The `timings` object of the final chunk and of non-stream bodies.
/// llama.cpp's names, with the corrected maths: `predicted_*` use the n−1
/// intervals after the first token. Undefined figures are `null`.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct Timings {
    /// Prompt tokens prefilled by this run (the runtime's count); with the
    /// conversation cache only the tokens after the cached prefix.
    pub prompt_n: Option<i64>,
    /// Prompt tokens reused (not prefilled): from the conversation cache or
    /// the prompt-cache file (`prompt_cache_n` of them).
    pub cache_n: i64,
    /// Prompt tokens the model's prompt-cache file spared this run's prefill
    /// (prompt tokens − the runtime's `prefill_tokens`; 0: not used); null
    /// when the model has no prompt cache or no tokenizer to count the prompt.
    pub prompt_cache_n: Option<i64>,
    /// How the conversation cache found the prompt: `resident` (the KV cache
    /// held it), `restored` (a saved conversation's file was loaded),
    /// `prefix` (a new conversation: the file of the system messages and
    /// tools an earlier one started with was loaded) or `miss`; null when
    /// the cache was not used (off, no tokenizer, batched).
    pub cache: Option<&'static str>,
    /// Why a `miss`: `empty`, `other`, `context`, `adapter` or `unknown`.
    pub cache_miss: Option<&'static str>,
    /// prefill_ms = first_token − admitted.
    pub prompt_ms: Option<f64>,
    pub prompt_per_token_ms: Option<f64>,
    /// prefill_tps = prompt_n / prefill_s.
    pub prompt_per_second: Option<f64>,
    /// Generated tokens, n.
    pub predicted_n: u32,
    /// decode_ms = last_token − first_token (null when n ≤ 1).
    pub predicted_ms: Option<f64>,
    /// tpot_ms = decode_ms / (n − 1).
    pub predicted_per_token_ms: Option<f64>,
    /// decode_tps = (n − 1) / decode_s.
    pub predicted_per_second: Option<f64>,
    /// admitted − received.
    pub queue_ms: Option<f64>,
    /// first_token − received.
    pub ttft_ms: Option<f64>,
    /// finished − received.
    pub e2e_ms: Option<f64>,
    /// Requests that shared this request's NPU run, itself included (1 unbatched).
    pub batch_n: u32,
    /// The daemon that served it (`instance`; default the host name): which
    /// board answered, when several stand behind one endpoint.
    pub instance: &'static str,
    /// Tool definitions left out of the prompt because they did not fit the
    /// context (`tools_overflow = "select"`); set by the api.
    pub tools_dropped: u32,
    pub runtime: Option<RuntimePerf>,
    /// Only for a request with images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageTimings>,
}

fn ms(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

/// `Some(x)` only for a finite, non-negative figure.
fn finite(x: f64) -> Option<f64> {
    (x.is_finite() && x >= 0.0).then_some(x)
}

impl Timings {
    pub fn derive(t: &Timeline, perf: Option<RuntimePerf>, cached_tokens: u32) -> Timings {
        let n = t.tokens;
        let prefill_ms = t.admitted.zip(t.first_token).map(|(a, f)| ms(a, f));
        let decode_ms = match (t.first_token, t.last_token) {
            (Some(f), Some(l)) if n > 1 => Some(ms(f, l)),
            _ => None,
        };
        let intervals = f64::from(n.saturating_sub(1));
        // A batch's count is every slot's prompt together: not this request's.
        let prompt_n = perf.filter(|p| p.batch_size <= 1).map(|p| p.prefill_tokens).filter(|&p| p > 0);
        Timings {
            prompt_n,
            cache_n: i64::from(cached_tokens),
            prompt_cache_n: t.prompt_cache_n.map(i64::from),
            cache: t.cache.map(|(found, _)| found),
            cache_miss: t.cache.and_then(|(_, why)| why),
            prompt_ms: prefill_ms,
            prompt_per_token_ms: prefill_ms.zip(prompt_n).and_then(|(ms, p)| finite(ms / p as f64)),
            prompt_per_second: prefill_ms.zip(prompt_n).and_then(|(ms, p)| finite(p as f64 / (ms / 1000.0))),
            predicted_n: n,
            predicted_ms: decode_ms,
            predicted_per_token_ms: decode_ms.and_then(|d| finite(d / intervals)),
            predicted_per_second: decode_ms.and_then(|d| finite(intervals / (d / 1000.0))),
            queue_ms: t.admitted.map(|a| ms(t.received, a)),
            ttft_ms: t.first_token.map(|f| ms(t.received, f)),
            e2e_ms: t.finished.map(|f| ms(t.received, f)),
            batch_n: t.batch_n,
            instance: super::observer().instance(),
            tools_dropped: 0,
            runtime: perf,
            images: t.images,
        }
    }
}

/// run_ms = finished − admitted: the time a request held the runtime (for
/// an embedding or rerank request, the runs of all its inputs). Not part
/// of [`Timings`]: the request log reports it beside them.
pub fn run_ms(t: &Timeline) -> Option<f64> {
    t.admitted.zip(t.finished).map(|(a, f)| ms(a, f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn figures_follow_the_definitions() {
        let r = Instant::now();
        let mut t = Timeline::new(r);
        t.admitted = Some(at(r, 100));
        for ms in [400, 500, 600, 700, 800] {
            t.token(at(r, ms));
        }
        t.finished = Some(at(r, 810));
        let perf = RuntimePerf {
            prefill_time_ms: 290.0,
            prefill_tokens: 150,
            generate_time_ms: 400.0,
            generate_tokens: 5,
            memory_usage_mb: 1.0,
            batch_size: 1,
        };
        let x = Timings::derive(&t, Some(perf), 0);
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-6;
        assert!(close(x.queue_ms, 100.0));
        assert!(close(x.prompt_ms, 300.0));
        assert!(close(x.ttft_ms, 400.0));
        assert!(close(x.predicted_ms, 400.0));
        assert!(close(x.predicted_per_token_ms, 100.0), "4 intervals, not 5 tokens");
        assert!(close(x.predicted_per_second, 10.0));
        assert!(close(x.prompt_per_second, 500.0));
        assert!(close(x.prompt_per_token_ms, 2.0));
        assert!(close(x.e2e_ms, 810.0));
        assert_eq!(x.predicted_n, 5);
    }

    #[test]
    fn one_token_has_no_decode_rate_and_no_token_has_no_ttft() {
        let r = Instant::now();
        let mut t = Timeline::new(r);
        t.admitted = Some(r);
        t.token(at(r, 50));
        let x = Timings::derive(&t, None, 0);
        assert_eq!((x.predicted_ms, x.predicted_per_second, x.predicted_per_token_ms), (None, None, None));
        assert!(x.ttft_ms.is_some());
        let x = Timings::derive(&Timeline::new(r), None, 0);
        assert_eq!((x.ttft_ms, x.prompt_ms, x.queue_ms, x.e2e_ms), (None, None, None, None));
    }

    #[test]
    fn zero_length_decode_is_null_not_infinite() {
        let r = Instant::now();
        let mut t = Timeline::new(r);
        t.admitted = Some(r);
        t.token(at(r, 5));
        t.token(at(r, 5));
        let x = Timings::derive(&t, None, 0);
        assert_eq!(x.predicted_ms, Some(0.0));
        assert_eq!(x.predicted_per_second, None);
    }
}
