//! The settings of LoRA adapters and prompt-cache files: `NAME=PATH[:SCALE]`
//! and the checks shared by the top level (for `--model`) and `[[models]]`.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::str::FromStr;

/// One `NAME=PATH[:SCALE]`: a LoRA adapter served as model id `MODEL:NAME`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LoraArg {
    pub name: String,
    pub path: String,
    pub scale: f32,
}

impl FromStr for LoraArg {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("lora `{text}`: {why} (expected NAME=PATH[:SCALE])");
        let (name, rest) = text.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let name = name.trim();
        if name.is_empty() || name.contains(':') || name.chars().any(char::is_whitespace) {
            return Err(bad("the name must be non-empty, without `:` or spaces (it becomes part of the model id)"));
        }
        // A last `:NUMBER` is the scale; any other `:` belongs to the path.
        let (path, scale) = match rest.rsplit_once(':').map(|(p, s)| (p, s.trim().parse::<f32>())) {
            Some((path, Ok(scale))) => (path, scale),
            _ => (rest, 1.0),
        };
        if path.is_empty() {
            return Err(bad("no path"));
        }
        if !scale.is_finite() {
            return Err(bad("the scale must be a finite number"));
        }
        Ok(LoraArg { name: name.to_owned(), path: path.to_owned(), scale })
    }
}

impl TryFrom<String> for LoraArg {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<LoraArg> for String {
    fn from(a: LoraArg) -> String {
        format!("{}={}:{}", a.name, a.path, a.scale)
    }
}

/// One model's adapters and prompt cache are consistent: unique adapter
/// names, and a prompt-cache file with exactly one prefix (text or file).
pub(super) fn check(
    model: &str,
    lora: &[LoraArg],
    cache: Option<&PathBuf>,
    prefix: Option<&String>,
    prefix_file: Option<&PathBuf>,
) -> Result<(), String> {
    for (i, a) in lora.iter().enumerate() {
        if lora[..i].iter().any(|b| b.name == a.name) {
            return Err(format!("{model}: the LoRA adapter name `{}` is given twice", a.name));
        }
    }
    if cache.is_some() && !lora.is_empty() {
        // The file holds the base model's keys and values for the prefix;
        // whether the runtime would also match it against an adapter's run
        // (a wrong answer, silently) is not known: refused until a board says.
        return Err(format!(
            "{model}: a prompt cache and LoRA adapters cannot be combined (docs/api.md, prompt-cache files)"
        ));
    }
    match (cache, prefix.is_some(), prefix_file.is_some()) {
        (Some(_), true, false) | (Some(_), false, true) | (None, false, false) => Ok(()),
        (Some(_), true, true) => {
            Err(format!("{model}: give prompt_cache_prefix or prompt_cache_prefix_file, not both"))
        }
        (Some(_), false, false) => Err(format!(
            "{model}: prompt_cache needs the prefix it caches (prompt_cache_prefix or prompt_cache_prefix_file)"
        )),
        (None, _, _) => Err(format!("{model}: a prompt-cache prefix needs prompt_cache (the file to keep it in)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_args() {
        let a: LoraArg = "style=/m/style.rkllm:0.5".parse().unwrap();
        assert_eq!((a.name.as_str(), a.path.as_str(), a.scale), ("style", "/m/style.rkllm", 0.5));
        let b: LoraArg = "x=/m/a:b.rkllm".parse().unwrap();
        assert_eq!((b.path.as_str(), b.scale), ("/m/a:b.rkllm", 1.0), "a `:` that is no number is the path's");
        assert_eq!(String::from(a.clone()).parse::<LoraArg>(), Ok(a));
        for bad in ["style", "=/m/x", "a:b=/m/x", "s=", "s=:0.5", "s=/m/x:inf"] {
            assert!(bad.parse::<LoraArg>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_prompt_cache_needs_exactly_one_prefix() {
        let file = Some(PathBuf::from("/c"));
        let text = Some("p".to_owned());
        assert!(check("m", &[], file.as_ref(), text.as_ref(), None).is_ok());
        assert!(check("m", &[], file.as_ref(), None, None).is_err());
        assert!(check("m", &[], file.as_ref(), text.as_ref(), file.as_ref()).is_err());
        assert!(check("m", &[], None, text.as_ref(), None).is_err());
        let twice = ["a=/x".parse().unwrap(), "a=/y".parse().unwrap()];
        assert!(check("m", &twice, None, None, None).is_err());
    }
}
