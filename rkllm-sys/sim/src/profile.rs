//! Timing profiles: how long a simulated model takes to prefill and decode.
//!
//! The figures are Rockchip's published RK3588 numbers (runtime 1.3.0, w8a8,
//! 128-token prompt). Time to first token is split into a fixed part and a
//! per-prompt-token part in the proportion measured on Qwen2.5-1.5B
//! (104 ms + 2.14 ms/token = 378 ms at 128 tokens), so a longer prompt takes
//! longer to prefill the way it does on a board.

/// The timing of one simulated model. All times are before `time_scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    pub name: &'static str,
    /// Fixed part of the prefill, ms.
    pub base_ms: f64,
    /// Prefill time per prompt token, ms.
    pub per_token_ms: f64,
    /// Time between two generated tokens, ms (1000 / tokens per second).
    pub decode_ms: f64,
    /// Published memory use, MB (informational: `perf.memory_usage_mb`
    /// reports this process's real peak instead).
    pub memory_mb: f64,
    /// The context the model was converted for, which init prints as
    /// `max_context_limit` (`context_limit` in the path overrides it): 4096,
    /// the toolkit's default and that of Rockchip's published models.
    pub context_limit: u32,
    /// The model's attention shape, `[layers, KV heads, head dim]`, from its
    /// published `config.json`: what a daemon plans a batch slot's KV with
    /// (`kv_bytes_per_token`), as it would from the `config.json` beside a
    /// real model.
    pub kv_shape: [u32; 3],
}

/// The toolkit's default `max_context`, which Rockchip's published models use.
const CONVERTED_CONTEXT: u32 = 4096;

impl Profile {
    /// Prefill time for `tokens` prompt tokens, ms.
    pub fn prefill_ms(&self, tokens: usize) -> f64 {
        self.base_ms + self.per_token_ms * tokens as f64
    }

    /// KV-cache bytes per token, as the runtime's facts size it: K and V,
    /// per layer, KV head and head dimension, 2 bytes each (fp16).
    pub fn kv_bytes_per_token(&self) -> u64 {
        let [layers, heads, dim] = self.kv_shape.map(u64::from);
        2 * layers * heads * dim * 2
    }
}

/// The Qwen2.5-1.5B field measurement, as shares of its 378 ms TTFT.
const BASE_SHARE: f64 = 104.0 / 378.0;
const PER_TOKEN_SHARE: f64 = (274.0 / 378.0) / 128.0;

const fn published(name: &'static str, ttft_ms: f64, tokens_per_s: f64, memory_mb: f64, kv_shape: [u32; 3]) -> Profile {
    Profile {
        name,
        base_ms: ttft_ms * BASE_SHARE,
        per_token_ms: ttft_ms * PER_TOKEN_SHARE,
        decode_ms: 1000.0 / tokens_per_s,
        memory_mb,
        context_limit: CONVERTED_CONTEXT,
        kv_shape,
    }
}

/// Qwen2.5-1.5B: 28 layers × 2 KV heads × 128 (≈ 28 KiB per token, shared/rkllm-runtime.md).
const QWEN2_5_1_5B: [u32; 3] = [28, 2, 128];

/// The profile used when none is named.
pub const DEFAULT_PROFILE: &str = "qwen2.5-1.5b";

/// Every profile: `instant` (no delays at all) and one per published model.
pub const PROFILES: [Profile; 8] = [
    Profile {
        name: "instant",
        base_ms: 0.0,
        per_token_ms: 0.0,
        decode_ms: 0.0,
        memory_mb: 0.0,
        context_limit: CONVERTED_CONTEXT,
        // No model: the default profile's shape, so a daemon plans slots as for it.
        kv_shape: QWEN2_5_1_5B,
    },
    published("qwen2-0.5b", 146.0, 41.6, 670.0, [24, 2, 64]),
    published("qwen3-0.6b", 199.0, 32.9, 791.0, [28, 8, 128]),
    published("tinyllama-1.1b", 244.0, 24.4, 1090.0, [22, 4, 64]),
    published("qwen2.5-1.5b", 378.0, 16.7, 1690.0, QWEN2_5_1_5B),
    published("phi3-3.8b", 1017.0, 7.45, 3760.0, [32, 32, 96]),
    // ChatGLM3's `multi_query_group_num` 2 and `kv_channels` 128.
    published("chatglm3-6b", 1353.0, 4.98, 5990.0, [28, 2, 128]),
    // Rockchip publishes Qwen2.5-VL-3B's prefill of 196 tokens (one image):
    // 1120 ms, i.e. 808.6 ms at 128 with the split above; 8.66 tokens/s; no
    // memory figure. Its vision encoder is `rknn-sim`'s (2.93 s per image).
    published("qwen2.5-vl-3b", 808.6, 8.66, 0.0, [36, 2, 128]),
];

/// The profile with this name (ASCII case ignored).
pub fn profile(name: &str) -> Option<Profile> {
    PROFILES.iter().find(|p| p.name.eq_ignore_ascii_case(name)).copied()
}

/// The profile names, for error messages.
pub(crate) fn names() -> String {
    PROFILES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}
