//! `rkllmd pull` and Ollama's `/api/pull`: a converted model from a
//! Hugging Face repository into the models directory, as
//! `MODELS_DIR/ID/ID.rkllm` with the tokenizer, template, `config.json` and
//! vision encoder the repository has beside it (`models_dir` serves that
//! layout).
//!
//! `hub` speaks to the Hub, `choose` picks the files (the board's chip, the
//! quantization asked for), `download` fetches each one resumably and
//! verifies it. `cli` is the command's progress bar; the HTTP route is
//! `api::ollama::pull`.

mod choose;
pub mod cli;
mod download;
mod hub;

pub use choose::{board_chip, Choice};
pub use hub::{Digest, Entry, Hub};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The name is not `[hf.co/]OWNER/NAME[:TAG]`.
    #[error("{0}")]
    Name(String),
    /// No such repository, revision or file; no file fits the chip or tag.
    #[error("{0}")]
    NotFound(String),
    /// A gated or private repository without a (good) token.
    #[error("{0}")]
    Denied(String),
    /// Another pull of the same model is writing its folder.
    #[error("{0}")]
    Busy(String),
    /// The Hub failed, or a download broke off (a new pull resumes it).
    #[error("{0}")]
    Hub(String),
    /// A file arrived whole but its digest is not the Hub's.
    #[error("{0}")]
    Corrupt(String),
    #[error("{0}")]
    Disk(String),
    #[error("{0}")]
    Setup(String),
}

/// What to pull, from a name like Ollama's for Hugging Face models:
/// `[hf.co/]OWNER/NAME[:TAG]`, TAG the quantization or a file's name.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub repo: String,
    pub tag: Option<String>,
}

impl Wanted {
    pub fn parse(name: &str) -> Result<Wanted, PullError> {
        let bad = |why: &str| {
            PullError::Name(format!(
                "`{name}` {why}: name a Hugging Face repository as OWNER/NAME, hf.co/OWNER/NAME or OWNER/NAME:QUANTIZATION"
            ))
        };
        let trimmed = name.trim();
        let rest = trimmed.strip_prefix("https://").or_else(|| trimmed.strip_prefix("http://")).unwrap_or(trimmed);
        let rest = ["hf.co/", "huggingface.co/"].iter().find_map(|p| rest.strip_prefix(p)).unwrap_or(rest);
        let (repo, tag) = match rest.split_once(':') {
            Some((repo, tag)) => (repo, Some(tag)),
            None => (rest, None),
        };
        // The Hub's rule for names: letters, digits, `-`, `_`, `.`; no `--` or `..`.
        let part_ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 96
                && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && !p.starts_with(['-', '.'])
                && !p.contains("--")
                && !p.contains("..")
        };
        match repo.split_once('/') {
            Some((owner, model)) if part_ok(owner) && part_ok(model) => {}
            _ => return Err(bad("is not a repository name")),
        }
        // Ollama's clients add `:latest` to a name without a tag.
        let tag = tag.filter(|t| *t != "latest");
        if tag.is_some_and(|t| t.is_empty() || t.contains(['/', '\\']) || t.chars().any(char::is_control)) {
            return Err(bad("has a tag that is not a quantization or file name"));
        }
        Ok(Wanted { repo: repo.to_owned(), tag: tag.map(str::to_owned) })
    }
}

pub struct Options {
    /// The repository's branch, tag or commit.
    pub revision: String,
    /// Files for this chip (`rk3588`, …); `None`: any.
    pub chip: Option<String>,
}

impl Options {
    /// The `main` revision, for this board's chip.
    pub fn for_this_board() -> Options {
        Options { revision: "main".into(), chip: board_chip() }
    }
}

/// What a pull reports as it goes.
pub enum Event<'a> {
    /// The files chosen, before any is fetched.
    Chosen(&'a Choice),
    /// `completed` bytes of the `index`-th file are on disk (at most every
    /// [`PROGRESS_EVERY`], and once at its start and end).
    Bytes { index: usize, completed: u64 },
    /// The `index`-th file is verified and in place; `fetched: false` when
    /// the folder held it already.
    Placed { index: usize, fetched: bool },
}

const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// A pulled model.
#[derive(Debug)]
pub struct Pulled {
    pub id: String,
    pub model: PathBuf,
    /// Files downloaded (the others were there already).
    pub fetched: usize,
}

/// Pulls `wanted` into `models_dir/ID/`. Dropping the future stops it;
/// what it had downloaded stays for the next pull to resume.
pub async fn pull(
    hub: &Hub,
    wanted: &Wanted,
    options: &Options,
    models_dir: &Path,
    on: &mut (dyn FnMut(Event) + Send),
) -> Result<Pulled, PullError> {
    let entries = hub.files(&wanted.repo, &options.revision).await?;
    let choice = choose::choose(&wanted.repo, &entries, wanted.tag.as_deref(), options.chip.as_deref())
        .map_err(PullError::NotFound)?;
    on(Event::Chosen(&choice));
    if !choice.files.iter().any(|(_, local)| local == choose::SHAPE) {
        tracing::warn!(
            repo = %wanted.repo,
            model = %choice.id,
            "the repository has no config.json beside the model: batch = \"auto\" cannot size a slot's KV cache and \
             serves it with 1 slot; put the original model's config.json in {}",
            models_dir.join(&choice.id).display()
        );
    }
    let dir = models_dir.join(&choice.id);
    std::fs::create_dir_all(&dir).map_err(|e| PullError::Disk(format!("{}: {e}", dir.display())))?;
    // One pull per folder at a time; the kernel lets go of the lock when
    // its holder dies, so a killed pull never blocks the next.
    let lock_path = dir.join(".pull.lock");
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| PullError::Disk(format!("{}: {e}", lock_path.display())))?;
    if lock.try_lock().is_err() {
        return Err(PullError::Busy(format!("{} is being pulled already (into {})", choice.id, dir.display())));
    }
    let mut fetched = 0;
    for (index, (entry, local)) in choice.files.iter().enumerate() {
        let url = hub.file_url(&wanted.repo, &options.revision, &entry.path);
        let mut last: Option<Instant> = None;
        let mut on_bytes = |completed: u64| {
            if last.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) || completed == entry.size {
                last = Some(Instant::now());
                on(Event::Bytes { index, completed });
            }
        };
        let was_fetched = download::fetch(hub, url, entry, &dir.join(local), &mut on_bytes).await?;
        fetched += usize::from(was_fetched);
        on(Event::Placed { index, fetched: was_fetched });
    }
    drop(lock);
    Ok(Pulled { id: choice.id.clone(), model: dir.join(&choice.files[0].1), fetched })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_ollama_and_the_hub_write_them() {
        let w = |repo: &str, tag: Option<&str>| Wanted { repo: repo.into(), tag: tag.map(Into::into) };
        assert_eq!(Wanted::parse("o/r").unwrap(), w("o/r", None));
        assert_eq!(Wanted::parse("hf.co/o/r:w8a8").unwrap(), w("o/r", Some("w8a8")));
        assert_eq!(Wanted::parse("https://huggingface.co/o/r.x-1").unwrap(), w("o/r.x-1", None));
        assert_eq!(Wanted::parse("hf.co/o/r:latest").unwrap(), w("o/r", None));
        for bad in ["r", "o/r/x", "../r", "o/..", "o/r:", "o/r:a/b", "hf.co/o", "o/-r", "o/a--b", "o r/x"] {
            assert!(matches!(Wanted::parse(bad), Err(PullError::Name(_))), "{bad}");
        }
    }
}
