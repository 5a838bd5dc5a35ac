//! The one path from a validated job to its reply that every generation
//! front end takes: submitted in its queue place, read ahead of its client
//! (`outbox.rs`), a stream's head held until its run starts, and what the
//! reply's headers say of it (`finish.rs`). Each front end then writes the
//! pieces in its own shape.

use super::ceiling::Clamped;
use super::error::ApiError;
use super::finish::Served;
use super::record::{Counting, Record};
use super::reply::{pieces, Piece};
use super::request::Validated;
use super::state::AppState;
use crate::engine::{Job, Place};
use crate::registry::Lease;
use futures_util::StreamExt;
use std::time::Duration;

/// Until when a stream's response head is held.
#[derive(Debug, Clone, Copy)]
pub enum HeadWait {
    /// The run's start, for at most this long (`head_wait_secs`).
    RunStart(Duration),
    /// The first piece of the reply, however long it takes.
    FirstPiece,
}

/// How long a stream's head waits. Without a tokenizer, a prompt that may be
/// longer than the context can be refused by the runtime before its first
/// token: the head then waits for the first piece, so that the refusal is a
/// 400 as when the daemon counts the prompt itself (no keep-alive comments
/// meanwhile). Otherwise until the run starts, for at most `bound`.
pub fn head_wait(v: &Validated, bound: Duration) -> HeadWait {
    if v.checks.size.tokens.is_none() && v.checks.size.may_overflow() {
        HeadWait::FirstPiece
    } else {
        HeadWait::RunStart(bound)
    }
}

/// A submitted job's reply, for any wire shape to write.
pub struct Submitted<S> {
    /// Its pieces, read ahead of the client (`outbox.rs`) and, for a stream,
    /// from when its head may go; `Err` when the request ended before that
    /// (its status: see [`hold_head`]).
    pub pieces: Result<S, ApiError>,
    pub streamed: bool,
    /// What the reply's headers say (`finish.rs`): the job's part, filled in
    /// here; a front end adds its own.
    pub served: Served,
}

/// The one path from a validated job to its reply that every generation
/// endpoint takes (chat and completions, Ollama, Responses, Messages):
/// submitted in its queue place (`leased`: the model and the place), read
/// ahead of its client, and a stream's head held as `wait` says. `clamped`:
/// the token limit the front end lowered to the server's (`ceiling.rs`),
/// which the reply's headers say.
pub async fn submit(
    state: &AppState,
    (model, place): (Lease, Place),
    v: Validated,
    clamped: Option<Clamped>,
    id: &str,
    counting: &Counting,
    wait: HeadWait,
) -> Submitted<impl futures_util::Stream<Item = Piece> + Send + 'static> {
    let streamed = v.stream;
    let template_mode = model.prompter.mode().as_str();
    let tools_dropped = v.checks.tools_dropped;
    let (pieces, ignored) = start(model, place, v, id, counting);
    let pieces = super::outbox::read_ahead(pieces, state.settings.write_timeout);
    let pieces = hold_head(pieces, streamed.then_some(wait)).await;
    let served = Served { template_mode, tools_dropped, ignored, clamped, ..Served::default() };
    Submitted { pieces, streamed, served }
}

/// Holds a stream's response head until its run starts. A request that ends
/// before then — still queued when the daemon stops, or refused by the
/// runtime — is answered with its own status (503 with `Retry-After`), which
/// a proxy retries on another board, instead of a 200 whose stream carries
/// only an error; a daemon that dies meanwhile leaves no response at all,
/// which proxies retry too. Past the bound the head goes out and keep-alive
/// comments tell the client its request is alive. The timeline is the
/// engine's: holding the head moves no instant of it. `None` (a reply that
/// is not streamed) holds nothing: its body reports its own ending.
async fn hold_head(
    pieces: impl futures_util::Stream<Item = Piece> + Send + 'static,
    wait: Option<HeadWait>,
) -> Result<impl futures_util::Stream<Item = Piece> + Send + 'static, ApiError> {
    let mut pieces = Box::pin(pieces);
    let first = match wait {
        None => None,
        Some(HeadWait::RunStart(bound)) => match tokio::time::timeout(bound, pieces.next()).await {
            Ok(Some(Piece::Started)) | Err(_) => None,
            Ok(piece) => piece,
        },
        Some(HeadWait::FirstPiece) => loop {
            match pieces.next().await {
                Some(Piece::Started) => continue,
                piece => break piece,
            }
        },
    };
    match first {
        Some(Piece::Failed(e)) => Err(*e),
        first => Ok(futures_util::stream::iter(first).chain(pieces)),
    }
}

/// Submits a job in its queue place and gives its reply as pieces (holding
/// the lease), with the sampling fields the runtime ignored.
fn start(
    model: Lease,
    place: Place,
    v: Validated,
    id: &str,
    counting: &Counting,
) -> (impl futures_util::Stream<Item = Piece> + Send + 'static, Vec<String>) {
    let Validated { job, stops, rules, checks, .. } = v;
    let job = Job { lora: model.adapter.clone(), ..job };
    let mut generation = model.engine.submit(place, job);
    let record = Record::new(id.to_owned(), model.served_id(), &mut generation, counting, checks.tools_dropped);
    let ignored: Vec<String> = generation.ignored_params.iter().map(|p| (*p).to_owned()).collect();
    if !ignored.is_empty() {
        let params = ignored.join(",");
        tracing::warn!(%id, %params, "runtime ABI 1.2 cannot apply sampling per run; these request fields were ignored");
    }
    let pieces = pieces(generation, record, stops, rules, checks).map(move |piece| {
        // Held until the reply's last piece is read or the reply is dropped.
        let _held = &model;
        piece
    });
    (pieces, ignored)
}
