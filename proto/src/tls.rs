//! TLS settings from PEM files, for the coordinator (certificate and key)
//! and for its workers and clients (the CA to trust), with errors that name
//! the file.
//!
//! Plaintext stays the default: TLS is on when the coordinator is given a
//! certificate, and a worker or client dials an `https://` URL. It trusts
//! the public certificate authorities (Mozilla's list, compiled in from
//! `webpki-roots`, so no system store is read) and the private CA given
//! with `--ca`, if any.
//!
//! [`check_url`] refuses a URL that is not `http://` or `https://` before
//! anything is dialled.

use std::path::Path;

use thiserror::Error;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig, Uri};

/// A TLS setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {reason}")]
    Unreadable {
        what: &'static str,
        path: String,
        reason: String,
    },
    #[error("{what} {path} is not PEM: expected a `-----BEGIN {label}-----` block")]
    NotPem {
        what: &'static str,
        path: String,
        label: &'static str,
    },
    #[error("{what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error("bad coordinator URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error(
        "--ca or --tls-domain is given but {url} is not an https:// URL: use https:// to talk TLS, or drop them"
    )]
    CaWithoutHttps { url: String },
}

/// The coordinators' URLs in `list`: one, or several comma-separated
/// (coordinators sharing one job store), blanks around each ignored; none
/// when it names none.
pub fn url_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(String::from)
        .collect()
}

/// Checks a coordinator URL: `http://HOST:PORT` or `https://HOST:PORT`.
/// Returns whether it is `https://`.
pub fn check_url(url: &str) -> Result<bool, TlsError> {
    let bad = |reason: String| TlsError::BadUrl {
        url: url.to_string(),
        reason,
    };
    let uri: Uri = url
        .parse()
        .map_err(|e| bad(format!("not a valid URL ({e})")))?;
    let Some(scheme) = uri.scheme_str().map(str::to_ascii_lowercase) else {
        return Err(bad(format!(
            "no scheme: write http://{url} (or https://{url} for TLS)"
        )));
    };
    if scheme != "http" && scheme != "https" {
        return Err(bad(format!(
            "the scheme must be http:// or https://, not {scheme}://"
        )));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host".to_string()));
    }
    Ok(scheme == "https")
}

fn read_pem(path: &Path, what: &'static str, label: &'static str) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| TlsError::Unreadable {
        what,
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let found = text.lines().any(|l| {
        l.trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
            .is_some_and(|l| l.ends_with(label))
    });
    if !found {
        return Err(TlsError::NotPem {
            what,
            path: path.display().to_string(),
            label,
        });
    }
    Ok(bytes)
}

/// The coordinator's TLS settings from its certificate chain and private
/// key (PEM). The files are checked here; tonic parses them when the
/// server starts.
pub fn server_config(cert: &Path, key: &Path) -> Result<ServerTlsConfig, TlsError> {
    let cert_pem = read_pem(cert, "certificate file", "CERTIFICATE")?;
    let key_pem = read_pem(key, "key file", "PRIVATE KEY")?;
    let config = ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem));
    // Build it once now so that a certificate or key that does not parse
    // is reported with the files' names rather than at the first call.
    tonic::transport::Server::builder()
        .tls_config(config.clone())
        .map_err(|e| TlsError::Invalid {
            what: format!("certificate {} with key {}", cert.display(), key.display()),
            reason: error_chain(&e),
        })?;
    Ok(config)
}

/// The TLS settings of an `https://` URL without `--ca`: the public
/// certificate authorities.
pub fn public_roots() -> ClientTlsConfig {
    ClientTlsConfig::new().with_webpki_roots()
}

/// A worker's or client's TLS settings: the public certificate authorities
/// and, with `ca`, the private CA in that file (PEM); `domain` overrides
/// the name checked in the coordinator's certificate (default: the URL's
/// host).
pub fn client_config(ca: Option<&Path>, domain: Option<&str>) -> Result<ClientTlsConfig, TlsError> {
    let mut config = public_roots();
    if let Some(ca) = ca {
        let pem = read_pem(ca, "CA file", "CERTIFICATE")?;
        config = config.ca_certificate(Certificate::from_pem(pem));
    }
    if let Some(domain) = domain {
        config = config.domain_name(domain);
    }
    Ok(config)
}

/// Checks `url` ([`check_url`]) and applies TLS settings to an endpoint
/// for it: an `https://` URL gets `tls`, or the public authorities
/// without; settings for an `http://` URL are an error. `ca_file` names
/// the CA in errors.
pub fn secure(
    endpoint: Endpoint,
    url: &str,
    tls: Option<&ClientTlsConfig>,
    ca_file: Option<&Path>,
) -> Result<Endpoint, TlsError> {
    let https = check_url(url)?;
    let public = public_roots();
    match (https, tls) {
        (false, None) => Ok(endpoint),
        (false, Some(_)) => Err(TlsError::CaWithoutHttps { url: url.into() }),
        (true, tls) => endpoint
            .tls_config(tls.unwrap_or(&public).clone())
            .map_err(|e| TlsError::Invalid {
                what: match ca_file {
                    Some(f) => format!("CA file {}", f.display()),
                    None => "the TLS settings".into(),
                },
                reason: error_chain(&e),
            }),
    }
}

/// An error and its sources as one reason, `: `-separated: each text only
/// once (a wrapper often repeats its source's), and without the generic
/// wrappers of tonic and hyper (`transport error`, `tcp connect error`,
/// `dns error`, `client error (Connect)`) when something more specific
/// follows.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut texts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        texts.push(s.to_string());
        source = s.source();
    }
    join_reasons(texts)
}

/// Joins reasons as [`error_chain`] does.
pub fn join_reasons(texts: Vec<String>) -> String {
    let generic = |t: &str| {
        t.starts_with("client error (")
            || t.strip_suffix(" error")
                .is_some_and(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == ' '))
    };
    let specific: Vec<&String> = texts.iter().filter(|t| !generic(t)).collect();
    let kept: Vec<&String> = if specific.is_empty() {
        texts.last().into_iter().collect()
    } else {
        specific
    };
    let mut text = String::new();
    for t in kept {
        if t.is_empty() || text.contains(t.as_str()) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(t);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("colball-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn files_that_are_not_pem_are_named() {
        let junk = temp("junk.pem", "not a certificate\n");
        let e = client_config(Some(&junk), None).unwrap_err();
        assert!(e.to_string().contains("junk.pem"), "{e}");
        assert!(e.to_string().contains("BEGIN CERTIFICATE"), "{e}");
        let e = server_config(&junk, &junk).unwrap_err();
        assert!(e.to_string().contains("certificate file"), "{e}");
        let e = client_config(Some(Path::new("no/such/ca.pem")), None).unwrap_err();
        assert!(e.to_string().contains("no/such/ca.pem"), "{e}");
    }

    #[test]
    fn a_pem_block_of_garbage_is_refused_naming_the_files() {
        let cert = temp(
            "bad-cert.pem",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let key = temp(
            "bad-key.pem",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        );
        let e = server_config(&cert, &key).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("bad-cert.pem") && text.contains("bad-key.pem"),
            "{text}"
        );
    }

    #[test]
    fn https_needs_no_ca_and_a_ca_needs_https() {
        let endpoint = || Endpoint::from_static("http://127.0.0.1:1");
        assert!(secure(endpoint(), "http://127.0.0.1:1", None, None).is_ok());
        assert!(secure(endpoint(), "https://127.0.0.1:1", None, None).is_ok());
        assert!(secure(endpoint(), "HTTPS://127.0.0.1:1", None, None).is_ok());
        let tls = ClientTlsConfig::new();
        let e = secure(endpoint(), "http://127.0.0.1:1", Some(&tls), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--ca or --tls-domain is given but http://127.0.0.1:1 is not an https:// URL: use https:// to talk TLS, or drop them"
        );
    }

    #[test]
    fn only_http_and_https_urls_with_a_host_are_coordinator_urls() {
        let reason = |url: &str| check_url(url).unwrap_err().to_string();
        assert_eq!(check_url("http://127.0.0.1:50051"), Ok(false));
        assert_eq!(check_url("https://coordinator.example:443"), Ok(true));
        assert_eq!(
            reason("127.0.0.1:50051"),
            "bad coordinator URL \"127.0.0.1:50051\": no scheme: write http://127.0.0.1:50051 (or https://127.0.0.1:50051 for TLS)"
        );
        assert_eq!(
            reason("ftp://x"),
            "bad coordinator URL \"ftp://x\": the scheme must be http:// or https://, not ftp://"
        );
        assert!(reason("http://bad host").contains("not a valid URL"));
        assert!(reason("http://").starts_with("bad coordinator URL \"http://\": "));
    }

    #[test]
    fn reasons_drop_generic_wrappers_and_repeats() {
        let texts = |t: &[&str]| join_reasons(t.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            texts(&[
                "transport error",
                "tcp connect error",
                "Connection refused (os error 111)"
            ]),
            "Connection refused (os error 111)"
        );
        assert_eq!(
            texts(&[
                "transport error",
                "dns error",
                "dns error",
                "failed to lookup"
            ]),
            "failed to lookup"
        );
        assert_eq!(
            texts(&["h2 protocol error: stream closed", "stream closed"]),
            "h2 protocol error: stream closed"
        );
        assert_eq!(texts(&["transport error"]), "transport error");
    }
}
