//! An error's whole text. reqwest's own message omits the cause
//! ("error sending request for url …" without `connection refused` or the
//! certificate that was not trusted): clients of other servers — `bench`,
//! image URLs, `pull` — show the chain.

/// The error and its sources, `: `-separated.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
