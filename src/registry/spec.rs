//! What a registered model is (a [`ModelSpec`], built by the composition
//! root), and finding the models in a models directory ([`discover`]).

use crate::conversation::PromptSettings;
use crate::engine::{EngineSettings, RuntimeSettings};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Everything needed to load one model, fixed at start.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    /// Stable and unique: the file's stem, or the id a `[[models]]` table gives.
    pub id: String,
    /// The `.rkllm` file or `sim:` spec given to `rkllm_init`.
    pub path: String,
    pub runtime: RuntimeSettings,
    pub prompt: PromptSettings,
    /// `model_path` and `disable_runtime_template` are set at load.
    pub engine: EngineSettings,
    /// Embedding pooling and the rerank prompt format.
    pub embed: crate::embed::EmbedSettings,
    /// The model file's size (0 for a `sim:` spec): what the memory budget counts.
    pub size_bytes: u64,
    /// Unix seconds: the file's mtime (for a `sim:` spec, the daemon's start).
    pub modified: u64,
    /// What its loads and runs have shown, shared by every load of this spec.
    pub learned: Arc<Learned>,
}

/// What a model's loads and runs have shown of it, kept across unloads
/// until the registry is rescanned: the OpenAPI document states it
/// (`api::doc_models`), and a request it rules out is refused before a run.
#[derive(Debug, Default)]
pub struct Learned {
    /// The vocabulary of its tokenizer.json (set by a load; none without one).
    pub vocab: OnceLock<usize>,
    /// The width of its hidden states, which its embeddings have (set by
    /// its first embedding run: the runtime tells it no sooner).
    pub embedding_width: OnceLock<usize>,
}

/// A model found in the models directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub id: String,
    pub file: PathBuf,
    /// A chat template of this model's own (`<stem>.chat_template.jinja` or
    /// `<stem>.tokenizer_config.json` beside a file that shares its folder).
    pub chat_template: Option<PathBuf>,
    /// `<stem>.tokenizer.json` beside the file.
    pub tokenizer: Option<PathBuf>,
    /// The first `<stem>*.rknn` beside the file, by name: its vision encoder.
    pub vision_encoder: Option<PathBuf>,
}

/// Every `*.rkllm` in `dir` and in its direct subfolders (one model per
/// folder, with `tokenizer_config.json`, `tokenizer.json` or
/// `chat_template.jinja` beside it), sorted by path. The id is the file's
/// stem; two files with the same stem are an error naming both.
pub fn discover(dir: &Path) -> Result<Vec<Found>, String> {
    let read = |d: &Path| -> Result<Vec<PathBuf>, String> {
        let entries = std::fs::read_dir(d).map_err(|e| format!("models_dir {}: {e}", d.display()))?;
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        Ok(paths)
    };
    let is_model = |p: &Path| p.is_file() && p.extension().is_some_and(|e| e == "rkllm");
    let mut files = Vec::new();
    for path in read(dir)? {
        if path.is_dir() {
            files.extend(read(&path)?.into_iter().filter(|p| is_model(p)));
        } else if is_model(&path) {
            files.push(path);
        }
    }
    let mut found: Vec<Found> = Vec::new();
    for file in files {
        let Some(id) = file.file_stem().map(|s| s.to_string_lossy().into_owned()) else { continue };
        if let Some(other) = found.iter().find(|f| f.id == id) {
            return Err(format!(
                "two models have the id `{id}`: {} and {}; rename one, or give one an id in a [[models]] table",
                other.file.display(),
                file.display()
            ));
        }
        let sidecar = |name: &str| {
            file.with_file_name(format!("{id}.{name}")).is_file().then(|| file.with_file_name(format!("{id}.{name}")))
        };
        let chat_template = sidecar("chat_template.jinja").or_else(|| sidecar("tokenizer_config.json"));
        let tokenizer = sidecar("tokenizer.json");
        let vision_encoder = file.parent().and_then(|d| read(d).ok()).and_then(|siblings| {
            siblings.into_iter().find(|p| {
                p.is_file()
                    && p.extension().is_some_and(|e| e == "rknn")
                    && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(id.as_str()))
            })
        });
        found.push(Found { id, file, chat_template, tokenizer, vision_encoder });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_files_and_folders() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.rkllm"), "x").unwrap();
        std::fs::write(dir.path().join("b.tokenizer.json"), "{}").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        std::fs::create_dir(dir.path().join("qwen")).unwrap();
        std::fs::write(dir.path().join("qwen/Qwen3-1.7B.rkllm"), "x").unwrap();
        let found = discover(dir.path()).unwrap();
        let ids: Vec<_> = found.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["b", "Qwen3-1.7B"]);
        assert_eq!(found[0].tokenizer.as_deref(), Some(dir.path().join("b.tokenizer.json").as_path()));
        assert_eq!(found[1].tokenizer, None);
        assert_eq!(found[0].vision_encoder, None);

        std::fs::write(dir.path().join("qwen/Qwen3-1.7B_vision_rk3588.rknn"), "x").unwrap();
        let found = discover(dir.path()).unwrap();
        assert_eq!(
            found[1].vision_encoder.as_deref(),
            Some(dir.path().join("qwen/Qwen3-1.7B_vision_rk3588.rknn").as_path())
        );

        std::fs::create_dir(dir.path().join("other")).unwrap();
        std::fs::write(dir.path().join("other/b.rkllm"), "x").unwrap();
        let err = discover(dir.path()).unwrap_err();
        assert!(err.contains("b.rkllm") && err.contains("other/b.rkllm"), "{err}");
    }
}
