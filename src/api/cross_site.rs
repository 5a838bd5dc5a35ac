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
//!   (`*`: any). A request that carries the listener's API key skips this
//!   check: a rebinding page cannot know the key, so a keyed daemon behind
//!   a proxy with a DNS name serves its clients without `allowed_hosts`,
//!   while what it serves without the key (health, docs, metrics) stays
//!   out of such a page's reach (docs/reliability.md, "Browsers");
//! - an `Origin`, which browsers send with every cross-origin request and
//!   with same-origin POSTs, must be the server's own (`http(s)://` + the
//!   `Host`), or one of `cors_origins` (`*`: any).
//!
//! Clients that are not browsers send no `Origin` and an address or a
//! configured name as `Host`, and pass. Before both, the `Host` itself is
//! held to RFC 9112: more than one, or one that is not `name[:port]` with a
//! numeric port, is 400 (a lenient parse would check one name and let a
//! proxy or the application read another).

use super::auth::Key;
use super::error::{ApiError, Refuse};
use super::state::AppState;
use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::middleware::Next;
use axum::response::Response;
use std::net::{IpAddr, Ipv6Addr};

/// Name suffixes that only resolve on this machine or the local network.
const LOCAL_SUFFIXES: [&str; 3] = [".localhost", ".local", ".internal"];

/// What the checks need on one listener: the daemon's settings and the
/// listener's own key.
#[derive(Clone)]
pub struct Guard {
    pub state: AppState,
    pub key: Key,
}

pub async fn check(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    match allowed(&guard, &req) {
        Ok(()) => next.run(req).await,
        Err(e) => Refuse::of(&req).with(e),
    }
}

/// Refuses a request under a foreign host name or from a foreign origin.
fn allowed(guard: &Guard, req: &Request) -> Result<(), ApiError> {
    let settings = &guard.state.settings;
    let host = host(req)?;
    if let Some(host) = host.filter(|_| !guard.key.carried_by(req.headers())) {
        if !host_allowed(host, &settings.allowed_hosts) {
            let or_key = if guard.key.is_set() { ", or send the API key" } else { "" };
            return Err(ApiError::cross_site(
                "host_not_allowed",
                format!(
                    "This server does not answer to the host name `{host}` (DNS rebinding protection): \
                     add it to `allowed_hosts` (--allowed-hosts, RKLLMD_ALLOWED_HOSTS) to use it{or_key}."
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
    Ok(())
}

/// The host the request names: HTTP/2's `:authority` (or an absolute
/// request target's), else the one `Host` header; 400 when it breaks RFC
/// 9112 (section 3.2: a request with more than one `Host`, or an invalid
/// one, gets 400).
fn host(req: &Request) -> Result<Option<&str>, ApiError> {
    let mut headers = req.headers().get_all(HOST).iter();
    let header = headers.next();
    if headers.next().is_some() {
        return Err(ApiError::invalid_host("more than one Host header"));
    }
    let host = match (req.uri().authority(), header) {
        (Some(authority), _) => authority.as_str(),
        (None, Some(value)) => value.to_str().map_err(|_| ApiError::invalid_host("not visible ASCII"))?,
        (None, None) => return Ok(None),
    };
    host_syntax(host).map_err(ApiError::invalid_host)?;
    Ok(Some(host))
}

/// RFC 3986's `host [ ":" port ]`: an IPv6 address in brackets or a name
/// (letters, digits and `-._~%!$&'()*+,;=`), and a port of digits (empty
/// allowed, as `port = *DIGIT` says) that fits a port number.
fn host_syntax(host: &str) -> Result<(), &'static str> {
    let port = match host.strip_prefix('[') {
        Some(rest) => {
            let (address, after) = rest.split_once(']').ok_or("an IPv6 address without its `]`")?;
            address.parse::<Ipv6Addr>().map_err(|_| "not an IPv6 address in the brackets")?;
            match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or("text after the `]`")?),
            }
        }
        None => {
            let (name, port) = host.split_once(':').map_or((host, None), |(n, p)| (n, Some(p)));
            if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(&b)) {
                return Err("the name has a character a host name cannot have");
            }
            port
        }
    };
    match port {
        Some(p) if !p.bytes().all(|b| b.is_ascii_digit()) => Err("the port is not a number"),
        Some(p) if !p.is_empty() && p.parse::<u16>().is_err() => Err("the port is over 65535"),
        _ => Ok(()),
    }
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

    #[test]
    fn host_syntax_is_rfc_3986() {
        for ok in ["127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:8080", "llm.example.lan", "rkllmd.llm:8080", "h:"] {
            assert_eq!(host_syntax(ok), Ok(()), "{ok}");
        }
        for bad in [
            "127.0.0.1:abc",
            "localhost:1:evil.example",
            "localhost:99999",
            "[::1]x",
            "[::1",
            "[evil.example]:80",
            "a b",
            "evil.example/x",
            "user@evil.example",
            "localhost:-1",
        ] {
            assert!(host_syntax(bad).is_err(), "{bad}");
        }
    }
}
