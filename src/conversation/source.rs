//! Finding and loading a model's chat template and tokenizer at startup.
//!
//! Template, first match wins: the configured `chat_template` file (a
//! `.jinja` file, `tokenizer_config.json` or `chat_template.json`);
//! `chat_template.jinja`, then `tokenizer_config.json`, next to the `.rkllm`
//! file; the built-in `template`; the family detected from the model file
//! (for `sim:` models the built-in `chatml`, the simulator's own template
//! being ChatML); otherwise the runtime's built-in template, into which
//! whole conversations are folded. Tokenizer: the configured `tokenizer`,
//! else `tokenizer.json` next to the `.rkllm` file, else none.

use super::builtin::TemplateFamily;
use super::detect::detect;
use super::prompter::{Choice, Prompter, TemplateMode};
use super::template::{ChatTemplate, TemplateSource};
use serde_json::Value as Json;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("chat template {path}: {message}")]
    Template { path: String, message: String },
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: String, message: String },
}

/// Where a model's chat template and tokenizer come from (the `chat_template`,
/// `template` and `tokenizer` settings); `None` = look beside the model.
#[derive(Debug, Clone, Default)]
pub struct PromptSettings {
    pub chat_template: Option<PathBuf>,
    pub template: Option<TemplateFamily>,
    pub tokenizer: Option<PathBuf>,
    /// A tokenizer that comes with the runtime (the simulator's), shared
    /// with it: used when no file is configured or found.
    pub runtime_tokenizer: Option<&'static tokenizers::Tokenizer>,
}

/// The tokenizer.json file a model's prompts are counted with: the
/// configured one, else `tokenizer.json` beside the model file. (Without
/// either, a runtime may bring its own: `PromptSettings::runtime_tokenizer`.)
pub fn tokenizer_file(config: &PromptSettings, model_path: &str) -> Option<PathBuf> {
    let beside = (!model_path.starts_with("sim:")).then(|| Path::new(model_path).parent()).flatten();
    match &config.tokenizer {
        Some(path) => Some(path.clone()),
        None => beside.map(|d| d.join("tokenizer.json")).filter(|p| p.is_file()),
    }
}

impl Prompter {
    pub fn load(config: &PromptSettings, model_path: &str) -> Result<Prompter, LoadError> {
        let beside = (!model_path.starts_with("sim:")).then(|| Path::new(model_path).parent()).flatten();
        let (source, choice) = choose(config, model_path, beside)?;
        let template = source
            .map(|s| {
                let origin = s.origin.clone();
                ChatTemplate::compile(s).map_err(|e| LoadError::Template { path: origin, message: e.to_string() })
            })
            .transpose()?;
        let tokenizer = match (tokenizer_file(config, model_path), config.runtime_tokenizer) {
            (Some(path), _) => Some(load_tokenizer(&path)?),
            (None, Some(shared)) => Some((Cow::Borrowed(shared), "the simulated runtime's tokenizer.json".to_owned())),
            (None, None) => None,
        };
        Ok(Prompter { template, tokenizer, choice })
    }
}

/// The template by precedence, and why it was chosen.
fn choose(
    config: &PromptSettings,
    model_path: &str,
    beside: Option<&Path>,
) -> Result<(Option<TemplateSource>, Choice), LoadError> {
    let choice = |mode, family: Option<TemplateFamily>, reason: String| Choice {
        mode,
        family: family.map(TemplateFamily::name),
        reason,
        conflict: false,
    };
    if let Some(path) = &config.chat_template {
        let source = from_file(path)?.ok_or_else(|| LoadError::Template {
            path: path.display().to_string(),
            message: "no `chat_template` in this file".into(),
        })?;
        let reason = format!("configured chat_template {}", path.display());
        return Ok((Some(source), choice(TemplateMode::File, None, reason)));
    }
    if let Some(source) = beside.map(beside_model).transpose()?.flatten() {
        let reason = format!("found beside the model: {}", source.origin);
        return Ok((Some(source), choice(TemplateMode::BesideModel, None, reason)));
    }
    if let Some(family) = config.template {
        let reason = format!("configured template = \"{}\"", family.name());
        return Ok((Some(family.source()), choice(TemplateMode::ConfiguredFamily, Some(family), reason)));
    }
    if model_path.starts_with("sim:") {
        let family = TemplateFamily::Chatml;
        let reason = "detected chatml: `sim:` models use the simulator's own ChatML template".to_owned();
        return Ok((Some(family.source()), choice(TemplateMode::DetectedFamily, Some(family), reason)));
    }
    let detection = detect(Path::new(model_path));
    Ok(match detection.family {
        Some(family) => (
            Some(family.source()),
            Choice {
                conflict: detection.conflict,
                ..choice(TemplateMode::DetectedFamily, Some(family), format!("detected {}", detection.reason))
            },
        ),
        None => {
            let reason = format!(
                "{}; the runtime's own template wraps one user message, into which the system prompt, \
                 earlier turns and tool results are folded (docs/api.md)",
                detection.reason
            );
            (None, Choice { conflict: detection.conflict, ..choice(TemplateMode::RuntimeFolded, None, reason) })
        }
    })
}

fn beside_model(dir: &Path) -> Result<Option<TemplateSource>, LoadError> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return from_file(&jinja);
    }
    let config = dir.join("tokenizer_config.json");
    if config.is_file() {
        return from_file(&config);
    }
    Ok(None)
}

fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: path.display().to_string(), source })
}

/// A `.json` file holds `chat_template` (a string, or named templates as in
/// `tokenizer_config.json`) and maybe the special tokens; anything else is
/// the template text, with special tokens from a `tokenizer_config.json`
/// beside it. `Ok(None)`: a JSON file without a template.
fn from_file(path: &Path) -> Result<Option<TemplateSource>, LoadError> {
    let shown = path.display().to_string();
    let bad = |message: String| LoadError::Template { path: shown.clone(), message };
    let text = read(path)?;
    if path.extension().is_some_and(|e| e == "json") {
        let json: Json = serde_json::from_str(&text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
        let (default, tool_use) = match json.get("chat_template") {
            None | Some(Json::Null) => return Ok(None),
            Some(Json::String(t)) => (t.clone(), None),
            Some(Json::Array(named)) => {
                let find = |name: &str| {
                    named.iter().find(|n| n["name"] == name).and_then(|n| n["template"].as_str()).map(str::to_owned)
                };
                let default = find("default").ok_or_else(|| bad("named chat templates without `default`".into()))?;
                (default, find("tool_use"))
            }
            Some(_) => return Err(bad("`chat_template` must be a string or a list of named templates".into())),
        };
        let (bos_token, eos_token) = special_tokens(&json);
        return Ok(Some(TemplateSource { origin: shown, default, tool_use, bos_token, eos_token }));
    }
    let sibling: Option<PathBuf> = path.parent().map(|d| d.join("tokenizer_config.json")).filter(|p| p.is_file());
    let (bos_token, eos_token) = match sibling {
        Some(p) => {
            let json: Json = serde_json::from_str(&read(&p)?).map_err(|e| LoadError::Template {
                path: p.display().to_string(),
                message: format!("invalid JSON: {e}"),
            })?;
            special_tokens(&json)
        }
        None => Default::default(),
    };
    Ok(Some(TemplateSource { origin: shown, default: text, tool_use: None, bos_token, eos_token }))
}

/// `bos_token`/`eos_token`: a string or `{"content": …}`; absent = "".
fn special_tokens(config: &Json) -> (String, String) {
    let token = |key: &str| {
        let v = &config[key];
        v.as_str().or_else(|| v["content"].as_str()).unwrap_or_default().to_owned()
    };
    (token("bos_token"), token("eos_token"))
}

fn load_tokenizer(path: &Path) -> Result<(Cow<'static, tokenizers::Tokenizer>, String), LoadError> {
    let origin = path.display().to_string();
    let tokenizer: tokenizers::Tokenizer = read(path)?
        .parse()
        .map_err(|e: tokenizers::Error| LoadError::Tokenizer { path: origin.clone(), message: e.to_string() })?;
    Ok((Cow::Owned(tokenizer), origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_config_with_named_templates_and_token_objects() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer_config.json");
        let config = serde_json::json!({
            "bos_token": {"content": "<s>", "lstrip": false},
            "eos_token": "</s>",
            "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]
        });
        std::fs::write(&path, config.to_string()).unwrap();
        let s = from_file(&path).unwrap().unwrap();
        assert_eq!((s.default.as_str(), s.tool_use.as_deref()), ("D", Some("T")));
        assert_eq!((s.bos_token.as_str(), s.eos_token.as_str()), ("<s>", "</s>"));
        std::fs::write(&path, "{\"eos_token\": \"x\"}").unwrap();
        assert!(from_file(&path).unwrap().is_none());
    }

    #[test]
    fn a_jinja_file_takes_special_tokens_from_its_neighbour() {
        let dir = tempfile::tempdir().unwrap();
        let jinja = dir.path().join("chat_template.jinja");
        std::fs::write(&jinja, "{{ bos_token }}").unwrap();
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"bos_token": "<|begin_of_text|>"}"#).unwrap();
        let s = beside_model(dir.path()).unwrap().unwrap();
        assert_eq!(s.bos_token, "<|begin_of_text|>");
        assert_eq!(s.default, "{{ bos_token }}");
    }
}
