//! The stream checked against the wire rules clients depend on: one id and
//! `created`, the role on the first token's chunk (not at accept time), a
//! finish reason, usage, `[DONE]` last. Useful against any server.

use super::client::{Event, RequestRecord};
use super::finding::Finding;
use super::measure::{chunks, Figures};

/// Checks one request that got an HTTP 200.
pub fn check(record: &RequestRecord, figures: &Figures) -> Vec<Finding> {
    let mut out = Vec::new();
    if !record.content_type.as_deref().unwrap_or("").starts_with("text/event-stream") {
        out.push(Finding::wire(
            "content_type",
            format!("Content-Type {:?}, not text/event-stream", record.content_type),
        ));
    }
    check_chunks(record, figures, &mut out);
    check_end(record, &mut out);
    if figures.role_chunk_tokenless {
        out.push(Finding::wire(
            "role_chunk_without_token",
            format!(
                "the role chunk carried no token ({} token chunks for {:?} completion_tokens); a role chunk sent at \
                 accept time makes other clients report a false TTFT",
                figures.token_chunks + 1,
                figures.completion_tokens
            ),
        ));
    }
    check_usage(figures, &mut out);
    out
}

fn check_chunks(record: &RequestRecord, figures: &Figures, out: &mut Vec<Finding>) {
    let mut first: Option<(&Option<String>, Option<i64>)> = None;
    let (mut id_changes, mut created_changes) = (0, 0);
    for (index, (_, c)) in chunks(record).enumerate() {
        match first {
            None => {
                first = Some((&c.id, c.created));
                if c.role.as_deref() != Some("assistant") && c.usage.is_none() {
                    out.push(Finding::wire(
                        "first_chunk_without_role",
                        "the first chunk has no delta.role \"assistant\"",
                    ));
                }
            }
            Some((id, created)) => {
                if &c.id != id && id_changes == 0 {
                    id_changes += 1;
                    out.push(Finding::wire("id_changed", format!("id {id:?} became {:?} at chunk {index}", c.id)));
                }
                if c.created != created && created_changes == 0 {
                    created_changes += 1;
                    out.push(Finding::wire(
                        "created_changed",
                        format!("created {created:?} became {:?} at chunk {index}", c.created),
                    ));
                }
            }
        }
        if c.object.as_deref() != Some("chat.completion.chunk") {
            out.push(Finding::wire("object", format!("chunk {index} has object {:?}", c.object)));
        }
        if index > 0 && c.role.is_some() {
            out.push(Finding::wire("role_repeated", format!("chunk {index} repeats the role")));
        }
    }
    if first.is_some() && !chunks(record).any(|(_, c)| c.finish_reason.is_some()) {
        out.push(Finding::wire("no_finish_reason", "no chunk has a non-null finish_reason"));
    }
    if figures.token_chunks == 0 && record.failure.is_none() {
        out.push(Finding::wire("no_tokens", "the stream carried no token"));
    }
}

fn check_end(record: &RequestRecord, out: &mut Vec<Finding>) {
    let not_json: Vec<&str> = record
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::NotJson(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if let Some(first) = not_json.first() {
        out.push(Finding::wire(
            "not_json",
            format!("{} data events were neither JSON nor [DONE], the first: {first:?}", not_json.len()),
        ));
    }
    match record.events.iter().position(|e| matches!(e.event, Event::Done)) {
        None => out.push(Finding::wire("done_missing", "the stream ended without data: [DONE]")),
        Some(at) if at + 1 < record.events.len() => {
            out.push(Finding::wire("data_after_done", format!("{} events after [DONE]", record.events.len() - at - 1)))
        }
        Some(_) => {}
    }
    if let Some(tail) = &record.unterminated {
        let shown: String = tail.chars().take(80).collect();
        out.push(Finding::wire("unterminated_event", format!("the body ended inside an event: {shown:?}")));
    }
}

fn check_usage(figures: &Figures, out: &mut Vec<Finding>) {
    let Some(usage) = &figures.usage else {
        out.push(Finding::wire("usage_missing", "no chunk carried usage (asked with stream_options.include_usage)"));
        return;
    };
    let field = |k: &str| usage[k].as_u64();
    match (field("prompt_tokens"), field("completion_tokens"), field("total_tokens")) {
        (Some(p), Some(c), Some(t)) if p + c != t => out.push(Finding::wire(
            "usage_inconsistent",
            format!("total_tokens {t} ≠ prompt_tokens {p} + completion_tokens {c}"),
        )),
        (Some(_), Some(_), Some(_)) => {}
        _ => out.push(Finding::wire("usage_incomplete", format!("usage lacks a count: {usage}"))),
    }
}
