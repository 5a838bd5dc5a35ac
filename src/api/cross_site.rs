//! Who may call the daemon from a web browser. Without an API key (the
//! default) any page the user opens could otherwise drive it: requests that
//! need no CORS preflight (a `text/plain` POST to the Ollama routes, a
//! bodiless `POST /v1/models/ID/unload`) run cross-site, and DNS rebinding
//! (a name of the attacker's that resolves to this machine) lets the page
//! read the answers too. As Ollama does, two checks on every request:
//!
//! - `Host` must be a name this server answers to: an IP address (a
//!   rebinding attack needs a name of its own), a name without a dot (the
//!   machine's, a container's: a public DNS name has one), a
//!   `.localhost`/`.local`/`.internal` name, or one of `allowed_hosts`
//!   (`*`: any);
//! - an `Origin`, which browsers send with every cross-origin request and
//!   with same-origin POSTs, must be the server's own (`http(s)://` + the
//!   `Host`), or one of `cors_origins` (`*`: any).
//!
//! Clients that are not browsers send no `Origin` and an address or a
//! configured name as `Host`, and pass.

use super::error::ApiError;
use super::AppState;
use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::middleware::Next;
use axum::response::Response;
use std::net::IpAddr;

/// Name suffixes that only resolve on this machine or the local network.
const LOCAL_SUFFIXES: [&str; 3] = [".localhost", ".local", ".internal"];

pub async fn check(State(state): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    let settings = &state.settings;
    // HTTP/2 carries the authority in the URI, HTTP/1.1 in the header.
    let host = req.uri().authority().map(|a| a.as_str()).or_else(|| req.headers().get(HOST)?.to_str().ok());
    if let Some(host) = host {
        if !host_allowed(host, &settings.allowed_hosts) {
            return Err(ApiError::cross_site(
                "host_not_allowed",
                format!(
                    "This server does not answer to the host name `{host}` (DNS rebinding protection): \
                     add it to `allowed_hosts` (--allowed-hosts) to use it."
                ),
            ));
        }
    }
    if let Some(origin) = req.headers().get(ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, host, &settings.cors_origins) {
            return Err(ApiError::cross_site(
                "origin_not_allowed",
                format!(
                    "Requests from the web origin `{origin}` are not allowed: add it to `cors_origins` \
                     (--cors-origins) to call this server from that page."
                ),
            ));
        }
    }
    Ok(next.run(req).await)
}

fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = strip_port(host).to_ascii_lowercase();
    let name = name.trim_end_matches('.');
    name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok()
        || !name.contains('.')
        || LOCAL_SUFFIXES.iter().any(|suffix| name.ends_with(suffix))
        || allowed.iter().any(|a| a == "*" || a.eq_ignore_ascii_case(name))
}

/// `host:port` → `host` (`[v6]:port` → `[v6]`).
fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(colon) if !host[colon..].contains(']') => &host[..colon],
        _ => host,
    }
}

fn origin_allowed(origin: &str, host: Option<&str>, cors_origins: &[String]) -> bool {
    let same_origin = || {
        let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        authority.zip(host).is_some_and(|(a, h)| a.eq_ignore_ascii_case(h))
    };
    cors_origins.iter().any(|o| o == "*" || o.eq_ignore_ascii_case(origin)) || same_origin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins() {
        let none: &[String] = &[];
        for ok in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "10.0.0.7",
            "localhost:8080",
            "rkllmd",
            "a.localhost",
            "rock5b.local",
            "x.internal",
        ] {
            assert!(host_allowed(ok, none), "{ok}");
        }
        for bad in ["evil.example", "evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.example"] {
            assert!(!host_allowed(bad, none), "{bad}");
        }
        assert!(host_allowed("Board.Example:80", &["board.example".into()]));
        assert!(host_allowed("anything", &["*".into()]));
        assert!(origin_allowed("http://127.0.0.1:8080", Some("127.0.0.1:8080"), none));
        assert!(!origin_allowed("http://evil.example", Some("127.0.0.1:8080"), none));
        assert!(!origin_allowed("null", Some("127.0.0.1:8080"), none));
        assert!(origin_allowed("http://webui.local", Some("x"), &["http://webui.local".into()]));
    }
}
