//! Guessing a model's chat-template family when nothing configures one: from
//! the `.rkllm` file's name and from the text of special tokens inside it.
//!
//! Where a `.rkllm` file keeps its tokenizer and the converted template is
//! not documented (docs/runtime.md, "Open points"), so the scan
//! reads a window at each end of the file, where a converter's metadata
//! sits, never the gigabytes of weights between them, and the result always
//! says what was seen and where: a guess that turns out wrong can be traced
//! to its evidence, and "found nothing" is reported as such.

use super::builtin::TemplateFamily;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes read from the start and from the end of the file.
pub const WINDOW: u64 = 16 << 20;
const CHUNK: usize = 1 << 20;

/// A model family the detector knows. Some have no built-in template: naming
/// them still tells the operator what was recognised and what to configure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    Family(TemplateFamily),
    /// Recognised, but no built-in template renders it faithfully.
    Unsupported(&'static str),
}

impl Known {
    fn name(self) -> &'static str {
        match self {
            Known::Family(f) => f.name(),
            Known::Unsupported(name) => name,
        }
    }
}

/// The outcome of detection and the evidence behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// The built-in template to use; `None` leaves the runtime's own.
    pub family: Option<TemplateFamily>,
    /// One sentence: what was found, where, and why this choice.
    pub reason: String,
    /// The file name and the file's tokens pointed at different families.
    pub conflict: bool,
}

/// Special-token text and what it identifies; every marker of a rule must be
/// present. Most specific first: DeepSeek's distills keep the base model's
/// tokens next to their own, Qwen3 adds `<think>` to ChatML.
const TOKEN_RULES: &[(&[&str], Known)] = &[
    (&["<｜User｜>", "<｜Assistant｜>"], Known::Family(TemplateFamily::DeepseekR1)),
    (&["<|start_header_id|>", "<|eot_id|>"], Known::Family(TemplateFamily::Llama3)),
    (&["<start_of_turn>"], Known::Family(TemplateFamily::Gemma)),
    (&["<|im_start|>", "<think>"], Known::Family(TemplateFamily::Qwen3)),
    (&["<|im_start|>"], Known::Family(TemplateFamily::Chatml)),
    (&["[gMASK]", "<|user|>"], Known::Unsupported("chatglm")),
    (&["<|user|>", "<|end|>", "<|assistant|>"], Known::Family(TemplateFamily::Phi3)),
    (&["<|user|>", "<|assistant|>"], Known::Unsupported("zephyr (TinyLlama chat)")),
    (&["<用户>", "<AI>"], Known::Unsupported("minicpm (v1/v2)")),
    (&["[INST]"], Known::Unsupported("llama2/mistral ([INST])")),
];

/// Fragments of a file name (lower case, without `-_. `), the family they
/// name, and the markers that family's tokens would show in the file.
/// Order matters: a distill names its base model too.
const NAME_RULES: &[(&str, Known, &[&str])] = &[
    ("deepseekr1", Known::Family(TemplateFamily::DeepseekR1), &["<｜User｜>"]),
    ("qwen3", Known::Family(TemplateFamily::Qwen3), &["<|im_start|>"]),
    ("qwq", Known::Unsupported("qwq"), &["<|im_start|>"]),
    ("qwen", Known::Family(TemplateFamily::Chatml), &["<|im_start|>"]),
    ("tinyllama", Known::Unsupported("zephyr (TinyLlama chat)"), &["<|user|>"]),
    ("llama3", Known::Family(TemplateFamily::Llama3), &["<|start_header_id|>"]),
    ("llama2", Known::Unsupported("llama2/mistral ([INST])"), &["[INST]"]),
    ("gemma", Known::Family(TemplateFamily::Gemma), &["<start_of_turn>"]),
    ("phi3", Known::Family(TemplateFamily::Phi3), &["<|user|>", "<|end|>"]),
    // MiniCPM 3 and 4 chat in ChatML; the first two had their own markers.
    ("minicpm3", Known::Family(TemplateFamily::Chatml), &["<|im_start|>"]),
    ("minicpm4", Known::Family(TemplateFamily::Chatml), &["<|im_start|>"]),
    ("minicpm", Known::Unsupported("minicpm (v1/v2)"), &["<用户>"]),
    // ChatML plus a `<s>` the built-in chatml does not print.
    ("internlm", Known::Unsupported("internlm"), &["<|im_start|>"]),
    ("chatglm", Known::Unsupported("chatglm"), &["[gMASK]"]),
    ("mistral", Known::Unsupported("llama2/mistral ([INST])"), &["[INST]"]),
];

/// The family a model file's name announces.
fn from_name(file_name: &str) -> Option<(Known, &'static [&'static str])> {
    let squeezed: String =
        file_name.chars().filter(|c| !matches!(c, '-' | '_' | '.' | ' ')).flat_map(char::to_lowercase).collect();
    NAME_RULES.iter().find(|(fragment, ..)| squeezed.contains(fragment)).map(|&(_, known, markers)| (known, markers))
}

/// The special-token texts found in the file, with the offset of the first
/// occurrence of each.
#[derive(Debug, Default)]
struct Found(Vec<(&'static str, u64)>);

impl Found {
    fn has(&self, marker: &str) -> bool {
        self.0.iter().any(|(m, _)| *m == marker)
    }

    fn rule(&self) -> Option<(&'static [&'static str], Known)> {
        TOKEN_RULES.iter().find(|(markers, _)| markers.iter().all(|m| self.has(m))).copied()
    }

    fn describe(&self, markers: &[&str]) -> String {
        let shown: Vec<String> =
            self.0.iter().filter(|(m, _)| markers.contains(m)).map(|(m, at)| format!("`{m}` at byte {at}")).collect();
        shown.join(", ")
    }
}

fn all_markers() -> impl Iterator<Item = &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    TOKEN_RULES.iter().flat_map(|(markers, _)| markers.iter().copied()).filter(move |m| {
        let new = !seen.contains(m);
        if new {
            seen.push(m);
        }
        new
    })
}

/// Reads the first and last [`WINDOW`] bytes of `path` (all of a smaller
/// file) and notes where each marker first occurs.
fn scan(path: &Path) -> std::io::Result<(Found, u64)> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let markers: Vec<&'static str> = all_markers().collect();
    let longest = markers.iter().map(|m| m.len()).max().unwrap_or(0);
    let ranges = if len <= 2 * WINDOW { vec![(0, len)] } else { vec![(0, WINDOW), (len - WINDOW, len)] };
    let mut found = Found::default();
    for (start, end) in ranges {
        file.seek(SeekFrom::Start(start))?;
        scan_range(&mut (&mut file).take(end - start), start, &markers, longest, &mut found)?;
    }
    Ok((found, len))
}

/// Chunked search; each chunk keeps the previous one's last `longest - 1`
/// bytes so a marker across the boundary is still seen.
fn scan_range(
    reader: &mut impl Read,
    base: u64,
    markers: &[&'static str],
    longest: usize,
    found: &mut Found,
) -> std::io::Result<()> {
    let keep = longest.saturating_sub(1);
    let mut buf = vec![0u8; keep + CHUNK];
    let mut carried = 0;
    let mut offset = base;
    loop {
        let n = reader.read(&mut buf[carried..])?;
        if n == 0 {
            return Ok(());
        }
        let filled = carried + n;
        let window = &buf[..filled];
        let window_base = offset - carried as u64;
        // Every marker starts with `<` or `[`: only those bytes need a look.
        for (i, _) in window.iter().enumerate().filter(|(_, &b)| b == b'<' || b == b'[') {
            for m in markers {
                if window[i..].starts_with(m.as_bytes()) && !found.has(m) {
                    found.0.push((m, window_base + i as u64));
                }
            }
        }
        offset += n as u64;
        carried = keep.min(filled);
        buf.copy_within(filled - carried..filled, 0);
    }
}

/// Detects the family of the model at `path`. Tokens found in the file
/// confirm or overrule the file name; the name alone still counts (the
/// tokens' place in the file is an *open* question, so finding none is not
/// evidence against it).
pub fn detect(path: &Path) -> Detection {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let by_name = from_name(&name);
    let (found, len) = match scan(path) {
        Ok(scanned) => scanned,
        Err(e) => {
            let reason = match by_name {
                Some((known, _)) => {
                    format!("{} from the file name `{name}`; the file could not be read ({e})", known.name())
                }
                None => format!(
                    "nothing recognised: the file name `{name}` names no known family and the file could not be read ({e})"
                ),
            };
            return decide(by_name.map(|(known, _)| known), reason, false);
        }
    };
    let scanned = if len > 2 * WINDOW {
        format!("the first and last {} MiB of the file", WINDOW >> 20)
    } else {
        "the whole file".to_owned()
    };
    match (by_name, found.rule()) {
        // The name is kept when the markers of its family are there and the
        // tokens say nothing more specific (qwen3's name with ChatML's
        // tokens: `<think>` may lie outside the scanned windows; but a
        // DeepSeek distill renamed `qwen2.5` shows `<｜User｜>` too).
        (Some((named, expected)), Some((markers, tokens)))
            if expected.iter().all(|m| found.has(m))
                && (named == tokens || markers.iter().all(|m| expected.contains(m))) =>
        {
            decide(
            Some(named),
            format!(
                "{} from the file name `{name}`, confirmed by the special tokens in the file ({})",
                named.name(),
                    found.describe(expected)
                ),
                false,
            )
        }
        (Some((named, _)), Some((markers, tokens))) => decide(
            Some(tokens),
            format!(
                "{} from the special tokens in the file ({}); the file name `{name}` suggests {}, which they contradict",
                tokens.name(),
                found.describe(markers),
                named.name()
            ),
            true,
        ),
        (None, Some((markers, tokens))) => decide(
            Some(tokens),
            format!("{} from the special tokens in the file ({})", tokens.name(), found.describe(markers)),
            false,
        ),
        (Some((named, _)), None) => decide(
            Some(named),
            format!("{} from the file name `{name}`; no special-token text found in {scanned} to confirm it", named.name()),
            false,
        ),
        (None, None) => decide(
            None,
            format!("nothing recognised: the file name `{name}` names no known family and no special-token text was found in {scanned}"),
            false,
        ),
    }
}

fn decide(known: Option<Known>, reason: String, conflict: bool) -> Detection {
    match known {
        Some(Known::Family(family)) => Detection { family: Some(family), reason, conflict },
        Some(Known::Unsupported(_)) => Detection {
            family: None,
            reason: format!("{reason}; no built-in template for it, set `template` or `chat_template`"),
            conflict,
        },
        None => Detection { family: None, reason, conflict },
    }
}

#[cfg(test)]
#[path = "detect_tests.rs"]
mod tests;
