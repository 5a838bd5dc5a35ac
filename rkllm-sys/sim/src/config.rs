//! The simulator's configuration, read from the `model_path` given to
//! `rkllm_init` and from `RKLLM_SIM_*` environment variables.

use crate::generate::SplitChars;
use crate::profile::{self, Profile, DEFAULT_PROFILE};
use std::path::{Path, PathBuf};

/// A `model_path` starting with this selects a simulated model by profile.
pub const SCHEME: &str = "sim:";

/// Every key accepted after `?` in a `sim:` path (and as `RKLLM_SIM_<KEY>`).
pub const KEYS: [&str; 28] = [
    "time_scale",
    "reply_tokens",
    "seed",
    "fail_init",
    "error_after",
    "prefill_extra_ms",
    "script",
    "record",
    "hang_after",
    "hang_ms",
    "hang_runs",
    "kv_size_skew",
    "eos_in_cache",
    "batch_abort_ignored",
    "cache_lies",
    "image_cache_lies",
    "batch_history_lies",
    "batch_perf_last",
    "cache_file_ms",
    "init_ms",
    "abort_lag",
    "reentrant_abort",
    "split_chars",
    "context_limit",
    "short_batch",
    "batch_cache",
    "abort_unsaved",
    "slot_cost",
];

/// Largest accepted `time_scale`, so that every delay fits a `Duration`.
const MAX_TIME_SCALE: f64 = 1000.0;
/// Largest accepted `prefill_extra_ms` (one hour).
const MAX_PREFILL_EXTRA_MS: f64 = 3_600_000.0;

#[derive(Debug, Clone)]
pub(crate) struct SimConfig {
    pub profile: Profile,
    pub time_scale: f64,
    pub reply_tokens: Option<usize>,
    pub seed: u64,
    /// Which init failure to simulate (see `fail_init_line`).
    pub fail_init: Option<String>,
    pub error_after: Option<usize>,
    pub prefill_extra_ms: f64,
    pub script: Option<PathBuf>,
    pub record: Option<PathBuf>,
    /// After this many generated tokens the run hangs for good (a wedged runtime).
    pub hang_after: Option<usize>,
    /// With `hang_after`: the hang ends after this long (a runtime that
    /// comes back; not scaled). `None`: for good.
    pub hang_ms: Option<u64>,
    /// With `hang_after`: only the model's first N runs hang (a runtime
    /// that comes back and then serves). `None`: every run.
    pub hang_runs: Option<usize>,
    /// Added to every size `rkllm_get_kv_cache_size` reports (a fault).
    pub kv_size_skew: i32,
    /// A reply that ends by EOS leaves the EOS token in the KV cache.
    pub eos_in_cache: bool,
    /// A fault: a batched run ignores `rkllm_abort` and decodes every slot to its end.
    pub batch_abort_ignored: bool,
    /// A loaded prompt cache spares no prefill (a fault).
    pub cache_lies: bool,
    /// A loaded prompt cache spares no multimodal run's prefill (a fault).
    pub image_cache_lies: bool,
    /// A batched run that keeps history prefills the slots' cached tokens
    /// again (a fault).
    pub batch_history_lies: bool,
    /// A batched run's FINISH carries `perf` in the last result, not the
    /// first (a fault: a runtime that contradicts rkllmd's reading).
    pub batch_perf_last: bool,
    /// Milliseconds per 1000 tokens to save or load a prompt-cache file.
    pub cache_file_ms: f64,
    /// `rkllm_init` takes this long (not scaled: a slow model load).
    pub init_ms: f64,
    /// Tokens a run still delivers after an abort (a runtime that notices it late).
    pub abort_lag: usize,
    /// `rkllm_abort` called from inside the result callback deadlocks.
    pub reentrant_abort_deadlocks: bool,
    /// How a character split over tokens is delivered.
    pub split_chars: SplitChars,
    /// The context the model was converted for (else the profile's).
    pub context_limit: Option<u32>,
    /// A batched run may leave slots without input (a token input of no
    /// ids): those slots prefill and decode nothing and keep their
    /// KV cache (`short_batch=accept`); else such a run is refused.
    pub short_batch: bool,
    /// A batched run may save a prompt-cache file: every slot's prompt KV
    /// in one file, restored slot by slot (`batch_cache=slots`); else such
    /// a run is refused (`batch_cache=refuse`).
    pub batch_cache: bool,
    /// A run aborted before its first token (in its prefill) leaves no
    /// prompt-cache file, as a runtime that saves at the prefill's end and
    /// stops at an abort before it would (the manual leaves it open).
    pub abort_unsaved: bool,
    /// What a batch step costs per active slot beyond the first, as a share
    /// of a single step (decode is memory-bound: little; the manual does
    /// not say how little).
    pub slot_cost: f64,
}

#[derive(Debug)]
pub(crate) enum ConfigError {
    /// A plain path that is not a file: fails like the vendor runtime.
    NoModelFile(String),
    /// Anything else, as the text after `E rkllm: `.
    Invalid(String),
}

/// Reads the configuration. `env` looks up an environment variable (an
/// empty value counts as unset); a key in the path wins over the variable.
pub(crate) fn parse(model_path: &str, env: impl Fn(&str) -> Option<String>) -> Result<SimConfig, ConfigError> {
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
    let (profile_name, spec) = match model_path.strip_prefix(SCHEME) {
        Some(rest) => {
            let (name, query) = rest.split_once('?').unwrap_or((rest, ""));
            (Some(name).filter(|n| !n.is_empty()).map(str::to_owned), parse_query(query)?)
        }
        None if Path::new(model_path).is_file() => (None, Vec::new()),
        None => return Err(ConfigError::NoModelFile(model_path.to_owned())),
    };
    let profile_name = profile_name.or_else(|| env("RKLLM_SIM_PROFILE")).unwrap_or_else(|| DEFAULT_PROFILE.to_owned());
    let profile = profile::profile(&profile_name).ok_or_else(|| {
        ConfigError::Invalid(format!("simulator: unknown profile \"{profile_name}\" (known: {})", profile::names()))
    })?;
    let value = |key: &str| {
        let from_spec = spec.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        from_spec.or_else(|| env(&format!("RKLLM_SIM_{}", key.to_ascii_uppercase())))
    };
    Ok(SimConfig {
        profile,
        time_scale: number(&value, "time_scale", 1.0, MAX_TIME_SCALE)?,
        reply_tokens: optional(&value, "reply_tokens")?,
        seed: optional(&value, "seed")?.unwrap_or(0),
        fail_init: value("fail_init"),
        error_after: optional(&value, "error_after")?,
        prefill_extra_ms: number(&value, "prefill_extra_ms", 0.0, MAX_PREFILL_EXTRA_MS)?,
        script: value("script").map(PathBuf::from),
        record: value("record").map(PathBuf::from),
        hang_after: optional(&value, "hang_after")?,
        hang_ms: optional(&value, "hang_ms")?,
        hang_runs: optional(&value, "hang_runs")?,
        kv_size_skew: match value("kv_size_skew") {
            Some(v) => v.trim().parse().map_err(|_| invalid("kv_size_skew", &v, "an integer"))?,
            None => 0,
        },
        eos_in_cache: switch(&value, "eos_in_cache")?,
        batch_abort_ignored: switch(&value, "batch_abort_ignored")?,
        cache_lies: switch(&value, "cache_lies")?,
        image_cache_lies: switch(&value, "image_cache_lies")?,
        batch_history_lies: switch(&value, "batch_history_lies")?,
        batch_perf_last: switch(&value, "batch_perf_last")?,
        cache_file_ms: number(&value, "cache_file_ms", DEFAULT_CACHE_FILE_MS, MAX_PREFILL_EXTRA_MS)?,
        init_ms: number(&value, "init_ms", 0.0, MAX_PREFILL_EXTRA_MS)?,
        abort_lag: optional(&value, "abort_lag")?.unwrap_or(0),
        reentrant_abort_deadlocks: match value("reentrant_abort").as_deref().map(str::trim) {
            None | Some("ok") => false,
            Some("deadlock") => true,
            Some(v) => return Err(invalid("reentrant_abort", v, "ok or deadlock")),
        },
        split_chars: match value("split_chars") {
            None => SplitChars::default(),
            Some(v) => SplitChars::parse(v.trim())
                .ok_or_else(|| invalid("split_chars", &v, "bytes, repeat, empty, null, raw or lost"))?,
        },
        context_limit: optional(&value, "context_limit")?,
        short_batch: match value("short_batch").as_deref().map(str::trim) {
            None | Some("refuse") => false,
            Some("accept") => true,
            Some(v) => return Err(invalid("short_batch", v, "accept or refuse")),
        },
        batch_cache: match value("batch_cache").as_deref().map(str::trim) {
            None | Some("slots") => true,
            Some("refuse") => false,
            Some(v) => return Err(invalid("batch_cache", v, "slots or refuse")),
        },
        abort_unsaved: switch(&value, "abort_unsaved")?,
        slot_cost: number(&value, "slot_cost", DEFAULT_SLOT_COST, MAX_SLOT_COST)?,
    })
}

/// A batch step's extra cost per active slot beyond the first: 8 active
/// slots take 2.05× a single step.
const DEFAULT_SLOT_COST: f64 = 0.15;
/// Largest accepted `slot_cost`: a step of 8 slots at 8× a single one, as if nothing were shared.
const MAX_SLOT_COST: f64 = 1.0;

/// Saving or loading a prompt-cache file: Qwen2.5-1.5B's KV is ~28 KiB per
/// token (shared/rkllm-runtime.md), 1000 tokens ≈ 28 MiB, read or written
/// on tmpfs at a few GB/s: ~10 ms.
const DEFAULT_CACHE_FILE_MS: f64 = 10.0;

fn switch(value: &impl Fn(&str) -> Option<String>, key: &str) -> Result<bool, ConfigError> {
    match value(key).as_deref().map(str::trim) {
        None | Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => Err(invalid(key, v, "0 or 1")),
    }
}

/// `key=value&key=value`; values are taken literally (no percent-decoding),
/// so they cannot contain `&`.
fn parse_query(query: &str) -> Result<Vec<(String, String)>, ConfigError> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if KEYS.contains(&key) {
                Ok((key.to_owned(), value.to_owned()))
            } else {
                Err(ConfigError::Invalid(format!(
                    "simulator: unknown key \"{key}\" in model path (known: {})",
                    KEYS.join(", ")
                )))
            }
        })
        .collect()
}

fn invalid(key: &str, value: &str, expected: &str) -> ConfigError {
    ConfigError::Invalid(format!("simulator: {key}={value:?} is not {expected}"))
}

fn optional<T: std::str::FromStr>(
    value: &impl Fn(&str) -> Option<String>,
    key: &str,
) -> Result<Option<T>, ConfigError> {
    value(key).map(|v| v.trim().parse().map_err(|_| invalid(key, &v, "a non-negative integer"))).transpose()
}

fn number(value: &impl Fn(&str) -> Option<String>, key: &str, default: f64, max: f64) -> Result<f64, ConfigError> {
    let Some(v) = value(key) else {
        return Ok(default);
    };
    match v.trim().parse::<f64>() {
        Ok(n) if (0.0..=max).contains(&n) => Ok(n),
        _ => Err(invalid(key, &v, &format!("a number from 0 to {max}"))),
    }
}

/// The line `rkllm_init` prints for `fail_init=KIND`: one of the failures
/// users meet on boards, `npu_memory` for any unknown kind.
pub(crate) fn fail_init_line(kind: &str) -> &'static str {
    match kind {
        "driver" => "E rkllm: Your rknpu driver version is too low, please upgrade to 0.9.7",
        "platform" => "E rkllm: Platform error: must be either RK3588, RK3576, RV1126B, or RK3562",
        "magic" => "E rkllm: invalid rknn llm model magic",
        "tensors" => "E rkllm: wrong number of tensors",
        _ => "E rkllm: failed to malloc npu memory!",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn sim_path_with_keys() {
        let c = parse("sim:qwen2-0.5b?time_scale=0.5&reply_tokens=7&seed=3", no_env).unwrap();
        assert_eq!(c.profile.name, "qwen2-0.5b");
        assert_eq!((c.time_scale, c.reply_tokens, c.seed), (0.5, Some(7), 3));
    }

    #[test]
    fn spec_wins_over_env_and_env_fills_the_rest() {
        let env = |k: &str| match k {
            "RKLLM_SIM_SEED" => Some("9".to_owned()),
            "RKLLM_SIM_REPLY_TOKENS" => Some("5".to_owned()),
            "RKLLM_SIM_PROFILE" => Some("instant".to_owned()),
            _ => None,
        };
        let c = parse("sim:?seed=1", env).unwrap();
        assert_eq!((c.seed, c.reply_tokens, c.profile.name), (1, Some(5), "instant"));
        let c = parse("sim:phi3-3.8b", env).unwrap();
        assert_eq!(c.profile.name, "phi3-3.8b");
    }

    #[test]
    fn bad_keys_values_and_paths() {
        let err = |p: &str| match parse(p, no_env) {
            Err(ConfigError::Invalid(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(err("sim:instant?colour=red").contains("\"colour\""));
        assert!(err("sim:instant?time_scale=-1").contains("time_scale"));
        assert!(err("sim:instant?seed=x").contains("seed"));
        assert!(err("sim:gpt-5").contains("unknown profile"));
        assert!(err("sim:instant?eos_in_cache=yes").contains("eos_in_cache"));
        assert!(err("sim:instant?kv_size_skew=1.5").contains("kv_size_skew"));
        assert_eq!(parse("sim:instant?kv_size_skew=-2&eos_in_cache=1", no_env).unwrap().kv_size_skew, -2);
        assert!(matches!(parse("/no/such/model.rkllm", no_env), Err(ConfigError::NoModelFile(_))));
    }
}
