//! A reply's pieces, read by a task of their own instead of at the pace of
//! the client's reads.
//!
//! Without it a generation advances only as fast as its client reads: a
//! client that stops reading leaves the runtime's last event unread, and
//! with it the model's one turn held (the next request waited as long as
//! that client did), while the reply piles up in the engine's channel.
//! Here a task reads the pieces ahead into a bounded buffer, so the turn is
//! given back as soon as the runtime finishes. A client that takes nothing
//! for `write_timeout` while pieces wait for it is dropped: its generation
//! is dropped with it (the run aborted if it still goes, as when a client
//! disconnects), and the request is logged as abandoned (499).

use futures_util::{Stream, StreamExt};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Pieces read ahead of the client at most. A piece is one token's text
/// (~100 bytes held), so this holds a whole reply of up to this many tokens
/// (the default `max_new_tokens` is 2048) in ~1.6 MB at most; past it the
/// task stops reading ahead and the run waits for the client (or its
/// time-out).
pub const READ_AHEAD: usize = 16_384;

/// `source` read by a task of its own; the returned stream gives its items
/// in order and ends early if the consumer took nothing for `write_timeout`
/// while items were waiting.
pub fn read_ahead<T: Send + 'static>(
    source: impl Stream<Item = T> + Send + 'static,
    write_timeout: Duration,
) -> impl Stream<Item = T> + Send + 'static {
    // One item in the channel: the buffer that counts is the task's own.
    let (tx, mut rx) = mpsc::channel(1);
    tokio::spawn(pump(source, tx, write_timeout));
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

async fn pump<T>(source: impl Stream<Item = T>, tx: mpsc::Sender<T>, write_timeout: Duration) {
    let mut source = std::pin::pin!(source);
    let mut buffered = VecDeque::new();
    let mut ended = false;
    // Since when the consumer has taken nothing while items wait.
    let mut waiting_since: Option<Instant> = None;
    while !(ended && buffered.is_empty()) {
        let give_up = waiting_since.map(|since| since + write_timeout);
        tokio::select! {
            // In this order: a consumer that went away, then handing over,
            // then reading ahead (so an item is never held back to read more).
            biased;
            () = tx.closed() => return,
            permit = tx.reserve(), if !buffered.is_empty() => {
                let Ok(permit) = permit else { return };
                if let Some(item) = buffered.pop_front() {
                    permit.send(item);
                }
                waiting_since = (!buffered.is_empty()).then(Instant::now);
            }
            item = source.next(), if !ended && buffered.len() < READ_AHEAD => match item {
                Some(item) => {
                    buffered.push_back(item);
                    waiting_since.get_or_insert_with(Instant::now);
                }
                None => ended = true,
            },
            // Disabled without `give_up`: the future is made but never polled.
            () = async { if let Some(at) = give_up { tokio::time::sleep_until(at).await } }, if give_up.is_some() => {
                tracing::warn!(
                    waiting = buffered.len(),
                    "the client read nothing for {} s: its response is dropped",
                    write_timeout.as_secs()
                );
                return;
            }
        }
    }
}
