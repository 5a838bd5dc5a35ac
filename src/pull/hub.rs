//! The two Hugging Face routes a pull needs, as the Hub documents them:
//! the repository's file list (`GET /api/models/OWNER/NAME/tree/REVISION`,
//! each file with its size, its Git blob id and, for LFS/Xet files, its
//! SHA-256) and a file's bytes (`GET /OWNER/NAME/resolve/REVISION/PATH`,
//! which redirects large files to a CDN and honours `Range`).

use super::PullError;
use crate::error_text::chain;
use reqwest::header::{HeaderMap, LINK};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use std::time::Duration;

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// One file of a repository.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Its path in the repository (`/`-separated).
    pub path: String,
    pub size: u64,
    pub digest: Digest,
}

/// What a file's bytes are checked against.
#[derive(Debug, Clone, PartialEq)]
pub enum Digest {
    /// An LFS (or Xet) file: the SHA-256 of its content, hex.
    Sha256(String),
    /// A file in Git itself: its blob id, SHA-1 of `blob SIZE\0` + content, hex.
    GitBlob(String),
}

impl Digest {
    /// `sha256:HEX` or `sha1:HEX` (a Git blob id), as progress names a file.
    pub fn named(&self) -> String {
        match self {
            Digest::Sha256(h) => format!("sha256:{h}"),
            Digest::GitBlob(h) => format!("sha1:{h}"),
        }
    }

    pub fn hex(&self) -> &str {
        match self {
            Digest::Sha256(h) | Digest::GitBlob(h) => h,
        }
    }
}

#[derive(Deserialize)]
struct TreeItem {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    oid: String,
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    oid: String,
    size: u64,
}

/// The Hub a pull talks to: `HF_ENDPOINT` (a mirror) or huggingface.co,
/// with `HF_TOKEN` for gated and private repositories.
pub struct Hub {
    endpoint: Url,
    token: Option<String>,
    pub(super) http: reqwest::Client,
}

impl Hub {
    /// `HF_ENDPOINT` and `HF_TOKEN` (or the older `HUGGING_FACE_HUB_TOKEN`),
    /// as the Hub's own clients read them.
    pub fn from_env() -> Result<Hub, PullError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let endpoint = var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        let token = var("HF_TOKEN").or_else(|| var("HUGGING_FACE_HUB_TOKEN"));
        Hub::new(&endpoint, token)
    }

    pub fn new(endpoint: &str, token: Option<String>) -> Result<Hub, PullError> {
        let endpoint = Url::parse(endpoint.trim_end_matches('/'))
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| PullError::Setup(format!("HF_ENDPOINT `{endpoint}` is not an http(s) URL")))?;
        // reqwest drops the Authorization header when a redirect leaves the
        // Hub's host (large files are served from a CDN): the token goes to
        // the Hub only. No overall time-out: a 2 GB file takes minutes; a
        // stalled connection is ended by the read time-out.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("rkllmd/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| PullError::Setup(format!("HTTP client: {e}")))?;
        Ok(Hub { endpoint, token, http })
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.endpoint.clone();
        url.path_segments_mut().expect("an http(s) URL has a path").pop_if_empty().extend(segments);
        url
    }

    pub(super) fn get(&self, url: Url) -> reqwest::RequestBuilder {
        let request = self.http.get(url);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Every file of `repo` at `revision`, in all its folders.
    pub async fn files(&self, repo: &str, revision: &str) -> Result<Vec<Entry>, PullError> {
        let (owner, name) = repo.split_once('/').expect("a parsed name is OWNER/NAME");
        let mut url = self.url(&["api", "models", owner, name, "tree", revision]);
        url.query_pairs_mut().append_pair("recursive", "true");
        let mut entries = Vec::new();
        // The list comes in pages, each naming the next in a `Link` header.
        let mut next = Some(url);
        while let Some(url) = next.take() {
            let response =
                self.get(url).send().await.map_err(|e| PullError::Hub(format!("listing {repo}: {}", chain(&e))))?;
            let response = checked(response, repo).await?;
            next = next_page(response.headers());
            let items: Vec<TreeItem> =
                response.json().await.map_err(|e| PullError::Hub(format!("the file list of {repo}: {}", chain(&e))))?;
            entries.extend(items.into_iter().filter(|i| i.kind == "file").map(|i| match i.lfs {
                Some(lfs) => Entry { path: i.path, size: lfs.size, digest: Digest::Sha256(lfs.oid) },
                None => Entry { path: i.path, size: i.size, digest: Digest::GitBlob(i.oid) },
            }));
        }
        Ok(entries)
    }

    /// Where a file's bytes are.
    pub fn file_url(&self, repo: &str, revision: &str, path: &str) -> Url {
        let (owner, name) = repo.split_once('/').expect("a parsed name is OWNER/NAME");
        let mut segments = vec![owner, name, "resolve", revision];
        segments.extend(path.split('/'));
        self.url(&segments)
    }
}

/// The response if it is a success, else the Hub's refusal in words that say what to do.
pub(super) async fn checked(response: reqwest::Response, repo: &str) -> Result<reqwest::Response, PullError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    // The Hub says why in `X-Error-Message` (and a JSON `error`).
    let said = response.headers().get("x-error-message").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let said = match said {
        Some(s) => s,
        None => response.text().await.unwrap_or_default().chars().take(300).collect(),
    };
    Err(match status {
        StatusCode::UNAUTHORIZED => PullError::Denied(format!(
            "{repo} needs a Hugging Face token (gated or private): set HF_TOKEN ({status}: {said})"
        )),
        StatusCode::FORBIDDEN => PullError::Denied(format!(
            "HF_TOKEN may not read {repo}: accept the model's terms on its page, or use a token with access ({status}: {said})"
        )),
        StatusCode::NOT_FOUND => {
            PullError::NotFound(format!("{repo}: no such repository, revision or file on the Hub ({status}: {said})"))
        }
        _ => PullError::Hub(format!("{repo}: the Hub answered {status}: {said}")),
    })
}

/// The `rel="next"` target of a `Link` header.
fn next_page(headers: &HeaderMap) -> Option<Url> {
    let link = headers.get(LINK)?.to_str().ok()?;
    link.split(',').find(|part| part.contains("rel=\"next\"")).and_then(|part| {
        let url = part.split(';').next()?.trim().strip_prefix('<')?.strip_suffix('>')?;
        Url::parse(url).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_a_mirrors_path_and_encode_each_part() {
        let hub = Hub::new("https://mirror.example/hf/", None).unwrap();
        assert_eq!(
            hub.file_url("o/r", "refs/pr/1", "rk3588/m.rkllm").as_str(),
            "https://mirror.example/hf/o/r/resolve/refs%2Fpr%2F1/rk3588/m.rkllm"
        );
        assert!(Hub::new("ftp://x", None).is_err());
    }

    #[test]
    fn the_next_page_is_read_from_link() {
        let mut headers = HeaderMap::new();
        headers.insert(LINK, "<https://h/api/models/o/r/tree/main?cursor=abc>; rel=\"next\"".parse().unwrap());
        assert_eq!(next_page(&headers).unwrap().as_str(), "https://h/api/models/o/r/tree/main?cursor=abc");
        headers.insert(LINK, "<https://h/x>; rel=\"prev\"".parse().unwrap());
        assert_eq!(next_page(&headers), None);
    }
}
