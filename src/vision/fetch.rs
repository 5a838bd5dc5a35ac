//! Image URLs fetched for a request, only where the operator allows it
//! (`image_url_hosts`, off by default): a daemon that fetches whatever URL a
//! client names lets that client reach the board's network (SSRF).
//!
//! The rules: `http` and `https` (the certificate checked against the
//! system's CA store for the host's name); a host listed by name or
//! address is fetched whatever it resolves to (the operator trusts it); `*`
//! allows any other host whose every address is public (no loopback,
//! private, link-local, shared, multicast or unspecified address). The
//! connection goes to the address that was checked (no second lookup a
//! rebinding DNS server could answer differently), redirects are not
//! followed, and the body is bounded by `max_image_bytes` and the whole
//! fetch by a time-out.

use crate::error_text::chain;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Where image URLs may be fetched from.
#[derive(Debug, Clone, PartialEq)]
pub struct UrlFetch {
    /// Host names or addresses, `*` for any public host. Empty: nothing.
    pub hosts: Vec<String>,
    pub timeout: Duration,
}

/// Why an image URL was not fetched.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum FetchError {
    /// The URL or its host is not allowed (`image_url_not_allowed`).
    #[error("{0}")]
    NotAllowed(String),
    /// Bigger than `max_image_bytes` (`image_too_large`).
    #[error("{0}")]
    TooLarge(String),
    /// The server did not deliver an image (`invalid_image`).
    #[error("{0}")]
    Failed(String),
}

impl UrlFetch {
    pub fn is_on(&self) -> bool {
        !self.hosts.is_empty()
    }

    /// The bytes at `url`, at most `max_bytes` of them.
    pub async fn get(&self, url: &str, max_bytes: usize) -> Result<Vec<u8>, FetchError> {
        tokio::time::timeout(self.timeout, self.fetch(url, max_bytes)).await.unwrap_or_else(|_| {
            Err(FetchError::Failed(format!("Fetching the image took over {} ms.", self.timeout.as_millis())))
        })
    }

    async fn fetch(&self, url: &str, max_bytes: usize) -> Result<Vec<u8>, FetchError> {
        let parsed =
            reqwest::Url::parse(url).map_err(|e| FetchError::Failed(format!("The image URL is invalid: {e}.")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(FetchError::NotAllowed(
                "Only http and https image URLs are fetched; send the image inline as a base64 `data:` URL.".into(),
            ));
        }
        let host = parsed.host_str().unwrap_or_default().trim_matches(['[', ']']).to_ascii_lowercase();
        let port = parsed.port_or_known_default().unwrap_or(80);
        let listed = self.hosts.iter().any(|h| h.eq_ignore_ascii_case(&host));
        if !listed && !self.hosts.iter().any(|h| h == "*") {
            return Err(FetchError::NotAllowed(format!(
                "Images are not fetched from `{host}`; the server's image_url_hosts does not list it."
            )));
        }
        let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| FetchError::Failed(format!("The image's host `{host}` cannot be resolved: {e}.")))?
            .collect();
        let Some(&address) = addresses.first() else {
            return Err(FetchError::Failed(format!("The image's host `{host}` has no address.")));
        };
        if !listed {
            if let Some(private) = addresses.iter().find(|a| !is_public(a.ip())) {
                return Err(FetchError::NotAllowed(format!(
                    "The image's host `{host}` resolves to {}, which is not a public address; only hosts listed \
                     by name in image_url_hosts may be private.",
                    private.ip()
                )));
            }
        }
        // `resolve` pins the checked address; TLS still checks the
        // certificate against the URL's host name.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .resolve(&host, address)
            .build()
            .map_err(|e| FetchError::Failed(format!("Fetching the image failed: {}.", chain(&e))))?;
        let mut response = client
            .get(parsed)
            .send()
            .await
            .map_err(|e| FetchError::Failed(format!("Fetching the image failed: {}.", chain(&e))))?;
        if !response.status().is_success() {
            return Err(FetchError::Failed(format!(
                "Fetching the image failed: the server answered {} (redirects are not followed).",
                response.status()
            )));
        }
        let too_large = || {
            FetchError::TooLarge(format!(
                "The image is over {max_bytes} bytes; this server takes at most {max_bytes} (max_image_bytes)."
            ))
        };
        if response.content_length().is_some_and(|n| n > max_bytes as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| FetchError::Failed(format!("Reading the image failed: {}.", chain(&e))))?
        {
            if body.len() + chunk.len() > max_bytes {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// An address anyone on the internet could reach: none of the loopback,
/// private, shared (CGNAT), link-local, multicast, broadcast, documentation
/// or unspecified ranges.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_unspecified()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)))
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public(IpAddr::V4(v4)),
            None => {
                let first = v6.segments()[0];
                !(v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || (first & 0xfe00) == 0xfc00
                    || (first & 0xffc0) == 0xfe80)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_anyone_could_reach_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.10",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:192.168.1.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn what_is_not_listed_is_not_fetched() {
        let fetch = |hosts: &[&str]| UrlFetch {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            timeout: Duration::from_secs(5),
        };
        let refused = |r: Result<Vec<u8>, FetchError>| matches!(r, Err(FetchError::NotAllowed(_)));
        assert!(refused(fetch(&["example.com"]).get("ftp://example.com/a.png", 10).await), "ftp");
        assert!(refused(fetch(&["example.com"]).get("http://other.example/a.png", 10).await), "not listed");
        // `*` allows public hosts only: a loopback address is refused before any connection.
        assert!(refused(fetch(&["*"]).get("http://127.0.0.1:9/a.png", 10).await), "loopback");
        assert!(refused(fetch(&["*"]).get("http://[::1]:9/a.png", 10).await), "loopback v6");
    }
}
