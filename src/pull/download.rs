//! One file's download: into `NAME.partial` beside its place, resumed
//! from what a killed or cut pull left there (an HTTP `Range` request),
//! checked against the Hub's digest and size, then renamed into place —
//! so the models directory never holds a file that was not verified.
//!
//! Writing and hashing run on a blocking thread: a 2 GB file must not
//! hold the daemon's one async thread (every stream's).

use super::hub::{checked, Digest, Entry, Hub};
use super::PullError;
use crate::error_text::chain;
use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::{CONTENT_RANGE, RANGE};
use reqwest::{StatusCode, Url};
use ring::digest::{Context, SHA1_FOR_LEGACY_USE_ONLY, SHA256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;

/// Bytes of `entry` on disk so far, as a download goes.
pub type OnBytes<'a> = dyn FnMut(u64) + Send + 'a;

/// The running digest of a file's content.
struct Hasher(Context);

impl Hasher {
    fn new(digest: &Digest, size: u64) -> Hasher {
        match digest {
            Digest::Sha256(_) => Hasher(Context::new(&SHA256)),
            Digest::GitBlob(_) => {
                let mut c = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
                c.update(format!("blob {size}\0").as_bytes());
                Hasher(c)
            }
        }
    }

    fn hex(self) -> String {
        self.0.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Hashes a file's first `len` bytes (blocking).
fn hash_prefix(file: &mut File, hasher: &mut Hasher, len: u64) -> std::io::Result<()> {
    file.seek(SeekFrom::Start(0))?;
    let mut left = len;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = file.read(&mut buf[..want])?;
        if n == 0 {
            break;
        }
        hasher.0.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(())
}

fn io(path: &Path, e: std::io::Error) -> PullError {
    PullError::Disk(format!("{}: {e}", path.display()))
}

fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    dest.with_file_name(name)
}

/// Whether `dest` holds `entry` already (its size and digest; blocking).
fn is_current(dest: &Path, entry: &Entry) -> std::io::Result<bool> {
    let Ok(meta) = std::fs::metadata(dest) else { return Ok(false) };
    if meta.len() != entry.size {
        return Ok(false);
    }
    let mut hasher = Hasher::new(&entry.digest, entry.size);
    hash_prefix(&mut File::open(dest)?, &mut hasher, entry.size)?;
    Ok(hasher.hex() == entry.digest.hex())
}

/// `entry` at `dest`, fetched from `url` unless `dest` holds it already.
/// `Ok(false)`: it was there.
pub async fn fetch(
    hub: &Hub,
    url: Url,
    entry: &Entry,
    dest: &Path,
    on_bytes: &mut OnBytes<'_>,
) -> Result<bool, PullError> {
    let (d, e) = (dest.to_owned(), entry.clone());
    if blocking(move || is_current(&d, &e)).await.map_err(|e| io(dest, e))? {
        on_bytes(entry.size);
        return Ok(false);
    }
    let partial = partial_path(dest);
    // Open the partial file and hash what it holds (blocking: it can be GBs).
    let (p, e) = (partial.clone(), entry.clone());
    let (file, hasher, have) = blocking(move || -> std::io::Result<_> {
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&p)?;
        let mut have = file.metadata()?.len();
        if have > e.size {
            file.set_len(0)?;
            have = 0;
        }
        let mut hasher = Hasher::new(&e.digest, e.size);
        hash_prefix(&mut file, &mut hasher, have)?;
        Ok((file, hasher, have))
    })
    .await
    .map_err(|e| io(&partial, e))?;
    on_bytes(have);

    let mut writer = Writer::start(file, hasher, have);
    if have < entry.size {
        let mut request = hub.get(url);
        if have > 0 {
            request = request.header(RANGE, format!("bytes={have}-"));
        }
        let response = request.send().await.map_err(|e| PullError::Hub(format!("{}: {}", entry.path, chain(&e))))?;
        let response = checked(response, &entry.path).await?;
        let resumed = response.status() == StatusCode::PARTIAL_CONTENT;
        if have > 0 && !resumed {
            // The server sent the whole file: start the partial one over.
            tracing::info!(file = %entry.path, "the server does not resume downloads: fetching the whole file again");
            writer.restart(Hasher::new(&entry.digest, entry.size));
        }
        if resumed {
            let start = response.headers().get(CONTENT_RANGE).and_then(|v| v.to_str().ok()).and_then(range_start);
            if start != Some(have) {
                return Err(PullError::Hub(format!(
                    "{}: asked for the bytes from {have}, the server sent {:?}",
                    entry.path,
                    response.headers().get(CONTENT_RANGE)
                )));
            }
        }
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|e| PullError::Hub(format!("{}: the download broke off: {}", entry.path, chain(&e))))?;
            let done = writer.write(chunk).await?;
            if done > entry.size {
                break;
            }
            on_bytes(done);
        }
    }
    let (hasher, written) = writer.finish().await.map_err(|e| io(&partial, e))?;
    if written != entry.size {
        let message = format!("{}: {written} bytes arrived of {}", entry.path, entry.size);
        if written > entry.size {
            let _ = std::fs::remove_file(&partial);
        }
        return Err(PullError::Hub(message));
    }
    let got = hasher.hex();
    if got != entry.digest.hex() {
        // Bytes that do not match are no use for a resume either.
        let _ = std::fs::remove_file(&partial);
        return Err(PullError::Corrupt(format!(
            "{}: the downloaded file's digest is {got}, the Hub's is {}; it was removed: pull again",
            entry.path,
            entry.digest.hex()
        )));
    }
    std::fs::rename(&partial, dest).map_err(|e| io(dest, e))?;
    Ok(true)
}

/// `bytes START-END/TOTAL` → START.
fn range_start(value: &str) -> Option<u64> {
    value.strip_prefix("bytes ")?.split('-').next()?.trim().parse().ok()
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
}

enum Piece {
    Chunk(Bytes),
    Restart(Hasher),
}

/// The blocking side of a download: appends what arrives and hashes it.
/// The channel is short, so a slow disk slows the download, not memory.
struct Writer {
    /// `None` once finished: the thread then syncs the file and ends.
    tx: Option<mpsc::Sender<Piece>>,
    done: tokio::task::JoinHandle<std::io::Result<(Hasher, u64)>>,
    written: u64,
}

impl Writer {
    fn start(mut file: File, mut hasher: Hasher, have: u64) -> Writer {
        let (tx, mut rx) = mpsc::channel::<Piece>(8);
        let done = tokio::task::spawn_blocking(move || {
            let mut written = have;
            file.seek(SeekFrom::Start(have))?;
            while let Some(w) = rx.blocking_recv() {
                match w {
                    Piece::Chunk(bytes) => {
                        file.write_all(&bytes)?;
                        hasher.0.update(&bytes);
                        written += bytes.len() as u64;
                    }
                    Piece::Restart(fresh) => {
                        file.set_len(0)?;
                        file.seek(SeekFrom::Start(0))?;
                        hasher = fresh;
                        written = 0;
                    }
                }
            }
            file.sync_all()?;
            Ok((hasher, written))
        });
        Writer { tx: Some(tx), done, written: have }
    }

    fn restart(&mut self, hasher: Hasher) {
        self.written = 0;
        // The channel is empty here (nothing was written since the start).
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(Piece::Restart(hasher));
        }
    }

    /// Bytes written once this chunk is.
    async fn write(&mut self, bytes: Bytes) -> Result<u64, PullError> {
        self.written += bytes.len() as u64;
        let Some(tx) = &self.tx else { return Ok(self.written) };
        if tx.send(Piece::Chunk(bytes)).await.is_err() {
            // The writer stopped on an error: `finish` says which.
            return Err(match self.finish_now().await {
                Err(e) => PullError::Disk(e.to_string()),
                Ok(_) => PullError::Disk("the file writer stopped".into()),
            });
        }
        Ok(self.written)
    }

    async fn finish_now(&mut self) -> std::io::Result<(Hasher, u64)> {
        (&mut self.done).await.unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
    }

    async fn finish(mut self) -> std::io::Result<(Hasher, u64)> {
        self.tx = None;
        self.finish_now().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_the_hubs() {
        // `git hash-object` of "hello\n" and the SHA-256 of "hello\n".
        let mut git = Hasher::new(&Digest::GitBlob(String::new()), 6);
        git.0.update(b"hello\n");
        assert_eq!(git.hex(), "ce013625030ba8dba906f756967f9e9ca394464a");
        let mut sha = Hasher::new(&Digest::Sha256(String::new()), 6);
        sha.0.update(b"hello\n");
        assert_eq!(sha.hex(), "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
        assert_eq!(range_start("bytes 100-199/200"), Some(100));
        assert_eq!(range_start("bytes */200"), None);
    }
}
