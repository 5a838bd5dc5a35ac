//! Image URLs fetched for a request, only where the operator allows it
//! (`image_url_hosts`, off by default): a daemon that fetches whatever URL a
//! client names lets that client reach the board's network (SSRF).
//!
//! The rules: `http` and `https` (the certificate checked against the
//! system's CA store for the host's name); a host listed by name or
//! address is fetched whatever it resolves to (the operator trusts it); `*`
//! allows any other host whose every address is public (no loopback,
//! private, link-local, shared, multicast or unspecified address; an IPv6
//! address that carries an IPv4 one, as NAT64, 6to4, Teredo and the
//! IPv4-mapped and -compatible forms do, is judged by that one). The
//! connection goes to the address that was checked (no second lookup a
//! rebinding DNS server could answer differently), redirects are not
//! followed, and the body is bounded by `max_image_bytes` and the whole
//! fetch by a time-out.

use crate::error_text::chain;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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
/// or unspecified ranges. An IPv6 address that carries an IPv4 address
/// ([`embedded_v4`]) is public only if each address it may lead to is.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                // NAT64's local-use prefix (RFC 8215) is not globally
                // reachable, and where it carries the IPv4 address depends
                // on a prefix length only the operator's translator knows.
                || s[..3] == [0x64, 0xff9b, 1])
                && embedded_v4(v6).into_iter().all(is_public_v4)
        }
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
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

/// The IPv4 addresses a connection to `v6` may reach: a translator or
/// tunnel on the way (NAT64, 6to4, Teredo) or the host's own stack
/// (IPv4-mapped, IPv4-compatible) turns these forms into IPv4 traffic, so
/// `64:ff9b::a9fe:a9fe` is 169.254.169.254 as far as SSRF goes. (NAT64's
/// local-use prefix is refused whole in [`is_public`].)
fn embedded_v4(v6: Ipv6Addr) -> Vec<Ipv4Addr> {
    let o = v6.octets();
    let at = |i: [usize; 4]| Ipv4Addr::new(o[i[0]], o[i[1]], o[i[2]], o[i[3]]);
    let s = v6.segments();
    match s[0] {
        // NAT64's well-known prefix (RFC 6052): the last 32 bits.
        0x0064 if s[1] == 0xff9b && s[2..6] == [0; 4] => vec![at([12, 13, 14, 15])],
        // 6to4 (RFC 3056): bits 16-47.
        0x2002 => vec![at([2, 3, 4, 5])],
        // Teredo (RFC 4380): the server in bits 32-63, the client's
        // address inverted in the last 32 bits.
        0x2001 if s[1] == 0 => {
            let client = Ipv4Addr::from(!u32::from(at([12, 13, 14, 15])));
            vec![at([4, 5, 6, 7]), client]
        }
        // IPv4-mapped `::ffff:a.b.c.d` and IPv4-compatible `::a.b.c.d`.
        _ => v6.to_ipv4().into_iter().collect(),
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

    /// Each IPv6 form that carries an IPv4 address, with a private and a
    /// public IPv4 address in it (169.254.169.254 = a9fe:a9fe, 127.0.0.1 =
    /// 7f00:1, 10.0.0.1 = a00:1, 8.8.8.8 = 808:808, 1.1.1.1 = 101:101).
    #[test]
    fn ipv6_forms_that_carry_an_ipv4_address_are_judged_by_it() {
        let cases = [
            // NAT64, well-known prefix.
            ("64:ff9b::a9fe:a9fe", "64:ff9b::808:808"),
            ("64:ff9b::7f00:1", "64:ff9b::101:101"),
            // 6to4.
            ("2002:a9fe:a9fe::", "2002:808:808::1"),
            ("2002:a00:1:1::1", "2002:101:101:1::1"),
            // IPv4-compatible and IPv4-mapped.
            ("::127.0.0.1", "::8.8.8.8"),
            ("::169.254.169.254", "::1.1.1.1"),
            ("::ffff:169.254.169.254", "::ffff:1.1.1.1"),
            // Teredo: the server's address, then the client's (inverted: 10.0.0.1 = f5ff:fffe).
            ("2001:0:a9fe:a9fe::f7f7:f7f7", "2001:0:808:808::f7f7:f7f7"),
            ("2001:0:808:808::f5ff:fffe", "2001:0:808:808::fefe:fefe"),
        ];
        for (private, public) in cases {
            assert!(!is_public(private.parse().unwrap()), "{private}");
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
        // NAT64's local-use prefix: not public whatever it carries, at
        // each prefix length (/96, /64, /56, /48) an operator may give it.
        for local_use in
            ["64:ff9b:1::a9fe:a9fe", "64:ff9b:1::808:808", "64:ff9b:1:0:8:808:800:0", "64:ff9b:1:808:8:800::"]
        {
            assert!(!is_public(local_use.parse().unwrap()), "{local_use}");
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
