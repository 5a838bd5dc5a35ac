//! What the daemon can know of a model's shape before loading it: the KV
//! cache's bytes per token, which sizes a batch slot (`slot_count.rs`).
//!
//! A `.rkllm` file's header is not documented, and the runtime reports no
//! sizes at init, so the shape comes from the model's Hugging Face
//! `config.json` beside the file (`config.json` in its folder, or
//! `STEM.config.json` when several models share one folder), and for a
//! simulated model from its profile (`rkllm-sim`'s `kv_shape`, the
//! published model's `config.json`). Bytes per token = K and V × layers ×
//! KV heads × head dimension × 2 bytes (fp16, which the runtime's facts
//! assume: *open*; shared/rkllm-runtime.md "Sizes to plan with").

use serde_json::Value;
use std::path::{Path, PathBuf};

/// K and V.
const KV: u64 = 2;
/// fp16.
const BYTES_PER_VALUE: u64 = 2;

/// The KV cache's bytes per token of the model at `model_path` (a file or a
/// `sim:` spec), or why it is not known.
pub fn kv_bytes_per_token(model_path: &str) -> Result<u64, String> {
    if let Some(spec) = model_path.strip_prefix("sim:") {
        let name = spec.split('?').next().filter(|n| !n.is_empty()).unwrap_or(rkllm_sim::DEFAULT_PROFILE);
        return rkllm_sim::profile(name)
            .map(|p| p.kv_bytes_per_token())
            .ok_or_else(|| format!("no simulated profile `{name}`"));
    }
    let path = config_beside(Path::new(model_path))
        .ok_or_else(|| format!("no config.json beside {model_path} (the model's shape is not known)"))?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    shape(&json).ok_or_else(|| {
        format!("{} names no layer count, attention heads and head size this daemon reads", path.display())
    })
}

/// `STEM.config.json`, else `config.json`, in the model's folder.
fn config_beside(model: &Path) -> Option<PathBuf> {
    let dir = model.parent()?;
    let stem = model.file_stem()?.to_string_lossy();
    [dir.join(format!("{stem}.config.json")), dir.join("config.json")].into_iter().find(|p| p.is_file())
}

/// Bytes per token from a `config.json`: its own fields, or (a
/// vision-language model's) those of its `text_config` / `llm_config`.
fn shape(config: &Value) -> Option<u64> {
    let own = |c: &Value| {
        let field = |names: &[&str]| names.iter().find_map(|n| c.get(*n).and_then(Value::as_u64)).filter(|&v| v > 0);
        let layers = field(&["num_hidden_layers", "num_layers", "n_layer"])?;
        let heads = field(&["num_attention_heads", "n_head"]);
        // ChatGLM names its KV groups and head size its own way.
        let kv_heads = field(&["num_key_value_heads", "multi_query_group_num"]).or(heads)?;
        let head_dim = field(&["head_dim", "kv_channels"])
            .or_else(|| Some(field(&["hidden_size", "n_embd"])? / heads?))
            .filter(|&d| d > 0)?;
        Some(KV * layers * kv_heads * head_dim * BYTES_PER_VALUE)
    };
    own(config).or_else(|| ["text_config", "llm_config"].iter().find_map(|k| own(config.get(*k)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_facts_sizes() {
        // shared/rkllm-runtime.md: Qwen2.5-1.5B ≈ 28 KiB/token, Qwen3-1.7B ≈ 112 KiB/token.
        let qwen25 = serde_json::json!({"num_hidden_layers": 28, "num_attention_heads": 12,
            "num_key_value_heads": 2, "hidden_size": 1536});
        assert_eq!(shape(&qwen25), Some(28 * 1024));
        let qwen3 = serde_json::json!({"num_hidden_layers": 28, "num_attention_heads": 16,
            "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 2048});
        assert_eq!(shape(&qwen3), Some(112 * 1024));
        let vl = serde_json::json!({"text_config": qwen25});
        assert_eq!(shape(&vl), Some(28 * 1024));
        assert_eq!(shape(&serde_json::json!({"hidden_size": 1536})), None);
        assert_eq!(kv_bytes_per_token("sim:qwen2.5-1.5b?time_scale=0"), Ok(28 * 1024));
        assert_eq!(kv_bytes_per_token("sim:"), Ok(28 * 1024));
    }

    #[test]
    fn a_config_json_beside_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.rkllm");
        assert!(kv_bytes_per_token(model.to_str().unwrap()).unwrap_err().contains("no config.json"));
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}"#,
        )
        .unwrap();
        assert_eq!(kv_bytes_per_token(model.to_str().unwrap()), Ok(2 * 2 * 4 * 16 * 2));
    }
}
