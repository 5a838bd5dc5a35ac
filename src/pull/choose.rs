//! Which files of a repository a pull takes: one `.rkllm` for the board's
//! chip and the quantization asked for, the tokenizer, template and
//! Hugging Face `config.json` beside it, and a vision encoder (`.rknn`)
//! when the repository has one.
//!
//! Names are read as words split at `-`, `_`, `.` and `/`, case ignored:
//! a word `rk3588` (or `rk3588s`, the same NPU) marks a file for that chip,
//! a file naming no chip is for any; the quantization (`w8a8`,
//! `w4a16_g128`, …) matches a file whose words hold it in order, or the
//! file's name itself.

use super::hub::Entry;

/// The files to fetch and where each goes in the model's folder.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The model's id: its file's stem (as `models_dir` names it).
    pub id: String,
    /// (the repository's file, its name in the model's folder); the model first.
    pub files: Vec<(Entry, String)>,
}

/// The files the daemon reads beside a model: its tokenizer and template,
/// and the `config.json` whose shape gives `batch = "auto"` the KV cache's
/// size per slot (`engine/model_shape.rs`).
const COMPANIONS: [&str; 4] = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", SHAPE];

/// The model's Hugging Face configuration (`COMPANIONS`).
pub(super) const SHAPE: &str = "config.json";

fn words(name: &str) -> Vec<String> {
    name.split(['-', '_', '.', '/']).filter(|w| !w.is_empty()).map(str::to_ascii_lowercase).collect()
}

/// The chip a word names: `rk` and four digits (`rk3588s` is an RK3588).
fn chip_of(word: &str) -> Option<&str> {
    let chip = word.get(..6)?;
    (chip.starts_with("rk") && chip[2..].bytes().all(|b| b.is_ascii_digit())).then_some(chip)
}

/// Whether a file is for `chip` (`None`: the board is not known, any file is).
fn for_chip(path: &str, chip: Option<&str>) -> bool {
    let chips: Vec<String> = words(path).iter().filter_map(|w| chip_of(w).map(str::to_owned)).collect();
    chips.is_empty() || chip.is_none_or(|c| chips.iter().any(|named| named == c))
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn folder(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn stem(path: &str) -> &str {
    let name = file_name(path);
    name.rsplit_once('.').map_or(name, |(stem, _)| stem)
}

/// Whether `tag` is the file's name, with or without `.rkllm`.
fn is_named(path: &str, tag: &str) -> bool {
    stem(path).eq_ignore_ascii_case(tag) || file_name(path).eq_ignore_ascii_case(tag)
}

/// Whether `tag`'s words stand in `path`'s name in a row.
fn has_tag(path: &str, tag: &str) -> bool {
    let (name, tag) = (words(file_name(path)), words(tag));
    !tag.is_empty() && name.windows(tag.len()).any(|w| w == tag.as_slice())
}

fn listing(entries: &[&Entry]) -> String {
    entries.iter().map(|e| e.path.as_str()).collect::<Vec<_>>().join(", ")
}

/// The files to pull from `entries` (a repository's), for `chip` (the
/// board's, `None` when unknown) and `tag` (the quantization or file asked for).
pub fn choose(repo: &str, entries: &[Entry], tag: Option<&str>, chip: Option<&str>) -> Result<Choice, String> {
    let models: Vec<&Entry> = entries.iter().filter(|e| e.path.to_ascii_lowercase().ends_with(".rkllm")).collect();
    if models.is_empty() {
        return Err(format!(
            "{repo} has no .rkllm file: convert the model with rkllm-toolkit, or pull a repository of converted models"
        ));
    }
    let fitting: Vec<&Entry> = models.iter().copied().filter(|e| for_chip(&e.path, chip)).collect();
    if fitting.is_empty() {
        return Err(format!(
            "{repo} has no .rkllm file for {} (it has: {}); pull with --chip to take another chip's file",
            chip.unwrap_or("this board"),
            listing(&models)
        ));
    }
    let model = match tag {
        Some(tag) => {
            // A file's own name wins over the files whose names hold the tag.
            let named: Vec<&Entry> = fitting.iter().copied().filter(|e| is_named(&e.path, tag)).collect();
            let tagged = if named.is_empty() {
                fitting.iter().copied().filter(|e| has_tag(&e.path, tag)).collect()
            } else {
                named
            };
            match tagged.as_slice() {
                [one] => *one,
                [] => {
                    return Err(format!("no .rkllm file of {repo} matches `{tag}`; there are: {}", listing(&fitting)))
                }
                several => {
                    return Err(format!(
                        "several .rkllm files of {repo} match `{tag}`: {}; name one (REPO:FILE_NAME)",
                        listing(several)
                    ))
                }
            }
        }
        None => match fitting.as_slice() {
            [one] => *one,
            several => {
                // W8A8 is the quantization RK3588/RK3576 models are usually converted with.
                let w8a8: Vec<&Entry> = several.iter().copied().filter(|e| has_tag(&e.path, "w8a8")).collect();
                match w8a8.as_slice() {
                    [one] => *one,
                    _ => {
                        return Err(format!(
                            "{repo} has several .rkllm files for {}: {}; add the quantization or file name (REPO:w8a8, REPO:FILE_NAME)",
                            chip.unwrap_or("this board"),
                            listing(several)
                        ))
                    }
                }
            }
        },
    };
    let id = stem(&model.path).to_owned();
    // The id names the model's folder: never empty or hidden (`.rkllm`).
    if id.is_empty() || id.starts_with('.') {
        return Err(format!("{repo}: `{}` is no model file name rkllmd can serve as an id", model.path));
    }
    let mut files = vec![(model.clone(), file_name(&model.path).to_owned())];
    // Each companion from the model's own folder, else the repository's top.
    let near = |name: &str| {
        [folder(&model.path), ""].iter().find_map(|dir| {
            let path = if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") };
            entries.iter().find(|e| e.path == path)
        })
    };
    files.extend(COMPANIONS.iter().filter_map(|name| near(name).map(|e| (e.clone(), (*name).to_owned()))));
    // The vision encoder: the first `.rknn` for the chip, by path. It is
    // saved under the model's stem, which is how `models_dir` pairs them.
    let mut encoders: Vec<&Entry> =
        entries.iter().filter(|e| e.path.to_ascii_lowercase().ends_with(".rknn") && for_chip(&e.path, chip)).collect();
    encoders.sort_by(|a, b| a.path.cmp(&b.path));
    if let Some(encoder) = encoders.first() {
        let name = file_name(&encoder.path);
        let local = if name.starts_with(id.as_str()) { name.to_owned() } else { format!("{id}.{name}") };
        files.push(((*encoder).clone(), local));
    }
    Ok(Choice { id, files })
}

/// The board's chip from the device tree (`rockchip,rk3588`), lower case;
/// `None` off a Rockchip board.
pub fn board_chip() -> Option<String> {
    let compatible = std::fs::read("/proc/device-tree/compatible").ok()?;
    chip_in_compatible(&compatible)
}

fn chip_in_compatible(compatible: &[u8]) -> Option<String> {
    compatible
        .split(|&b| b == 0)
        .filter_map(|s| std::str::from_utf8(s).ok()?.strip_prefix("rockchip,"))
        .find_map(|name| chip_of(&name.to_ascii_lowercase()).map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pull::hub::Digest;

    fn entries(paths: &[&str]) -> Vec<Entry> {
        paths.iter().map(|p| Entry { path: (*p).into(), size: 1, digest: Digest::GitBlob("0".into()) }).collect()
    }

    fn chosen(c: &Choice) -> Vec<(&str, &str)> {
        c.files.iter().map(|(e, local)| (e.path.as_str(), local.as_str())).collect()
    }

    #[test]
    fn the_chips_file_and_its_companions() {
        let repo = entries(&[
            "README.md",
            "tokenizer.json",
            "tokenizer_config.json",
            "Qwen2.5-1.5B_W8A8_RK3588.rkllm",
            "Qwen2.5-1.5B_W8A8_RK3576.rkllm",
            "rk3576/vision_rk3576.rknn",
            "vision_rk3588.rknn",
        ]);
        let c = choose("o/r", &repo, None, Some("rk3588")).unwrap();
        assert_eq!(c.id, "Qwen2.5-1.5B_W8A8_RK3588");
        assert_eq!(
            chosen(&c),
            vec![
                ("Qwen2.5-1.5B_W8A8_RK3588.rkllm", "Qwen2.5-1.5B_W8A8_RK3588.rkllm"),
                ("tokenizer.json", "tokenizer.json"),
                ("tokenizer_config.json", "tokenizer_config.json"),
                ("vision_rk3588.rknn", "Qwen2.5-1.5B_W8A8_RK3588.vision_rk3588.rknn"),
            ]
        );
        let err = choose("o/r", &repo, None, None).unwrap_err();
        assert!(err.contains("several") && err.contains("REPO:w8a8"), "{err}");
        assert!(choose("o/r", &repo, None, Some("rk3562")).unwrap_err().contains("no .rkllm file for rk3562"));
    }

    #[test]
    fn the_quantization_matches_whole_words() {
        let repo = entries(&["m-rk3588-w4a16.rkllm", "m-rk3588-w4a16_g128.rkllm", "m-rk3588-w8a8.rkllm"]);
        let pick = |tag| choose("o/r", &repo, Some(tag), Some("rk3588")).map(|c| c.id);
        assert_eq!(pick("w8a8").unwrap(), "m-rk3588-w8a8");
        assert_eq!(pick("W4A16_G128").unwrap(), "m-rk3588-w4a16_g128");
        assert!(pick("w4a16").unwrap_err().contains("several"));
        assert_eq!(pick("m-rk3588-w4a16").unwrap(), "m-rk3588-w4a16");
        assert!(pick("w8").unwrap_err().contains("matches"));
        // With no tag and several files, W8A8 is taken.
        assert_eq!(choose("o/r", &repo, None, Some("rk3588")).unwrap().id, "m-rk3588-w8a8");
    }

    #[test]
    fn companions_come_from_the_models_folder_first() {
        let repo = entries(&["tokenizer.json", "rk3588/model.rkllm", "rk3588/tokenizer.json", "rk3588s/x.rknn"]);
        let c = choose("o/r", &repo, None, Some("rk3588")).unwrap();
        assert_eq!(
            chosen(&c),
            vec![
                ("rk3588/model.rkllm", "model.rkllm"),
                ("rk3588/tokenizer.json", "tokenizer.json"),
                ("rk3588s/x.rknn", "model.x.rknn")
            ]
        );
        assert!(choose("o/r", &entries(&["a.gguf"]), None, None).unwrap_err().contains("no .rkllm"));
    }

    #[test]
    fn the_chip_is_read_from_the_device_tree() {
        assert_eq!(chip_in_compatible(b"radxa,rock-5b\0rockchip,rk3588\0"), Some("rk3588".into()));
        assert_eq!(chip_in_compatible(b"rockchip,rk3576-evb1\0rockchip,rk3576\0"), Some("rk3576".into()));
        assert_eq!(chip_in_compatible(b"raspberrypi,5-model-b\0brcm,bcm2712\0"), None);
    }
}
