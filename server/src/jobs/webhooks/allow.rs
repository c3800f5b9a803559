//! Which webhook URLs a coordinator calls (`--webhook-allow`), and the
//! guard against request forgery: a URL a client names is refused at
//! submission unless it matches an allowed pattern, and at delivery the
//! addresses its host resolves to must be public ones, unless the pattern
//! that allowed it names a loopback or private address itself.
//!
//! A pattern is `SCHEME://HOST[:PORT][/PATH]`: the scheme `http` or
//! `https`; the host a name, `*.` and a domain (any name under it), or an
//! IP address (`[...]` for IPv6); the port a number or `*` (any; without
//! one, the scheme's); the path a prefix when it ends with `*`, else the
//! whole path (none: any path). For example `https://hooks.example.com/*`
//! or `http://127.0.0.1:*`.

use std::net::IpAddr;

use axum::http::Uri;

/// The longest URL a job may name.
pub const MAX_URL: usize = 2048;

/// An allowed URL pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    https: bool,
    host: Host,
    /// `None`: any port.
    port: Option<u16>,
    /// `None`: any path; `Some((p, true))`: paths starting with `p`.
    path: Option<(String, bool)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Host {
    Name(String),
    /// Any name under this domain (not the domain itself).
    Under(String),
    Ip(IpAddr),
}

/// The parts of a URL to call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    /// A name, or an IP address.
    pub host: String,
    pub port: u16,
}

/// Whether an address may be called without a pattern naming it: not
/// loopback, private, link-local, unspecified, multicast or reserved.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)) // shared address space
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80) // link-local
        }
    }
}

impl Pattern {
    /// A pattern as `--webhook-allow` writes it.
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let fail = |why: &str| format!("webhook pattern {text:?}: {why}");
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| fail("expected SCHEME://HOST[:PORT][/PATH]"))?;
        let https = match scheme {
            "https" => true,
            "http" => false,
            _ => return Err(fail("the scheme is http or https")),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], Some(&rest[at..])),
            None => (rest, None),
        };
        let (host, port) = split_port(authority).ok_or_else(|| fail("no host"))?;
        let port = match port {
            None => Some(if https { 443 } else { 80 }),
            Some("*") => None,
            Some(p) => Some(p.parse().map_err(|_| fail("the port is a number or *"))?),
        };
        let host = if let Some(domain) = host.strip_prefix("*.") {
            Host::Under(domain.to_ascii_lowercase())
        } else if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Host::Ip(ip)
        } else if host.contains('*') || host.is_empty() {
            return Err(fail("a host is a name, *.DOMAIN or an IP address"));
        } else {
            Host::Name(host.to_ascii_lowercase())
        };
        let path = path.map(|p| match p.strip_suffix('*') {
            Some(prefix) => (prefix.to_string(), true),
            None => (p.to_string(), false),
        });
        Ok(Pattern {
            https,
            host,
            port,
            path,
        })
    }

    /// Whether the pattern allows calling loopback and private addresses:
    /// it names one itself (or `localhost`).
    pub fn allows_private(&self) -> bool {
        match &self.host {
            Host::Ip(ip) => !is_public(*ip),
            Host::Name(name) => name == "localhost",
            Host::Under(_) => false,
        }
    }

    fn matches(&self, https: bool, host: &str, port: u16, path: &str) -> bool {
        let host_matches = match &self.host {
            Host::Name(name) => *name == host,
            Host::Under(domain) => host
                .strip_suffix(domain.as_str())
                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            Host::Ip(ip) => host.trim_matches(['[', ']']).parse::<IpAddr>() == Ok(*ip),
        };
        let path_matches = match &self.path {
            None => true,
            Some((prefix, true)) => path.starts_with(prefix.as_str()),
            Some((whole, false)) => path == whole,
        };
        self.https == https && host_matches && self.port.is_none_or(|p| p == port) && path_matches
    }
}

/// `HOST[:PORT]`, the host with its brackets if IPv6.
fn split_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        return Some((host, rest.strip_prefix(':')));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port))).filter(|(h, _)| !h.is_empty()),
        None => Some((authority, None)).filter(|(h, _)| !h.is_empty()),
    }
}

/// Checks a URL a client named against the allowed patterns: where to
/// call, and whether private addresses may be called there; or why it is
/// refused.
pub fn check(url: &str, allowed: &[Pattern]) -> Result<(Target, bool), String> {
    if url.len() > MAX_URL {
        return Err(format!(
            "the webhook URL has {} bytes, more than {MAX_URL}",
            url.len()
        ));
    }
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("the webhook URL {url:?} does not parse: {e}"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(format!("the webhook URL {url:?} is not http or https")),
    };
    let authority = uri
        .authority()
        .ok_or_else(|| format!("the webhook URL {url:?} has no host"))?;
    if authority.as_str().contains('@') {
        return Err(format!(
            "the webhook URL {url:?} carries a user or password; put credentials in the path or a query instead"
        ));
    }
    let host = authority.host().to_ascii_lowercase();
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path = uri.path();
    let Some(pattern) = allowed.iter().find(|p| p.matches(https, &host, port, path)) else {
        return Err(if allowed.is_empty() {
            "webhooks are off on this coordinator (no --webhook-allow)".to_string()
        } else {
            format!("the webhook URL {url:?} matches no --webhook-allow pattern")
        });
    };
    Ok((Target { https, host, port }, pattern.allows_private()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(list: &[&str]) -> Vec<Pattern> {
        list.iter().map(|p| Pattern::parse(p).unwrap()).collect()
    }

    #[test]
    fn urls_are_called_only_where_a_pattern_allows() {
        let allowed = patterns(&[
            "https://hooks.example.com/*",
            "http://127.0.0.1:*",
            "https://*.grader.example.org/done",
        ]);
        for url in [
            "https://hooks.example.com/",
            "https://hooks.example.com/a/b?x=1",
            "https://HOOKS.example.com:443/a",
            "http://127.0.0.1:8080/hook",
            "https://eu.grader.example.org/done",
        ] {
            assert!(check(url, &allowed).is_ok(), "{url}");
        }
        for (url, says) in [
            ("http://hooks.example.com/", "matches no"),
            ("https://hooks.example.com:8443/", "matches no"),
            ("https://evil.com/?https://hooks.example.com/", "matches no"),
            ("https://hooks.example.com.evil.com/", "matches no"),
            ("https://grader.example.org/done", "matches no"),
            ("https://eu.grader.example.org/other", "matches no"),
            ("http://127.0.0.2:8080/", "matches no"),
            ("https://user:pw@hooks.example.com/", "user or password"),
            ("ftp://hooks.example.com/", "not http or https"),
            ("not a url", "does not parse"),
        ] {
            let e = check(url, &allowed).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
        }
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL));
        assert!(check(&long, &allowed).unwrap_err().contains("bytes"));
        assert!(
            check("https://hooks.example.com/", &[])
                .unwrap_err()
                .contains("off")
        );
    }

    #[test]
    fn only_a_pattern_naming_a_private_address_lets_it_be_called() {
        let allowed = patterns(&[
            "http://127.0.0.1:*",
            "https://hooks.example.com/*",
            "http://localhost:9000",
        ]);
        assert!(check("http://127.0.0.1:1/", &allowed).unwrap().1);
        assert!(check("http://localhost:9000/", &allowed).unwrap().1);
        assert!(!check("https://hooks.example.com/x", &allowed).unwrap().1);
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "2606:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn a_pattern_that_cannot_be_used_is_named() {
        for (text, says) in [
            ("hooks.example.com", "SCHEME://"),
            ("ftp://x/", "http or https"),
            ("https://:80/", "no host"),
            ("https://x:port/", "number or *"),
            ("https://a*b.com/", "a host is"),
        ] {
            let e = Pattern::parse(text).unwrap_err();
            assert!(e.contains(says) && e.contains(text), "{text}: {e}");
        }
        assert_eq!(Pattern::parse("https://[::1]:*").unwrap().port, None);
    }
}
