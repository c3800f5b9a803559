//! TLS settings from PEM files, for the coordinator (certificate and key)
//! and for its workers and clients (the CA to trust), with errors that name
//! the file.
//!
//! Plaintext stays the default: TLS is on when the coordinator is given a
//! certificate, and a worker or client dials an `https://` URL with the CA
//! that signed it (no system roots are built in).

use std::path::Path;

use thiserror::Error;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

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
    #[error(
        "{url} is an https:// URL but no CA is given: pass --ca FILE (the CA certificate that signed the coordinator's, PEM)"
    )]
    NoCa { url: String },
    #[error(
        "--ca is given but {url} is not an https:// URL: use https:// to talk TLS, or drop --ca"
    )]
    CaWithoutHttps { url: String },
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

/// A worker's or client's TLS settings: trust the CA in `ca` (PEM);
/// `domain` overrides the name checked in the coordinator's certificate
/// (default: the URL's host).
pub fn client_config(ca: &Path, domain: Option<&str>) -> Result<ClientTlsConfig, TlsError> {
    let pem = read_pem(ca, "CA file", "CERTIFICATE")?;
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
    if let Some(domain) = domain {
        config = config.domain_name(domain);
    }
    Ok(config)
}

/// Applies the TLS settings to an endpoint for `url`: `https://` needs a
/// CA, a CA needs `https://`. `ca_file` names the CA in errors.
pub fn secure(
    endpoint: Endpoint,
    url: &str,
    tls: Option<&ClientTlsConfig>,
    ca_file: Option<&Path>,
) -> Result<Endpoint, TlsError> {
    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    match (https, tls) {
        (false, None) => Ok(endpoint),
        (true, None) => Err(TlsError::NoCa { url: url.into() }),
        (false, Some(_)) => Err(TlsError::CaWithoutHttps { url: url.into() }),
        (true, Some(tls)) => endpoint
            .tls_config(tls.clone())
            .map_err(|e| TlsError::Invalid {
                what: match ca_file {
                    Some(f) => format!("CA file {}", f.display()),
                    None => "the TLS settings".into(),
                },
                reason: error_chain(&e),
            }),
    }
}

/// An error and its sources, `: `-separated (tonic's transport errors say
/// little at the top).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
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
        let e = client_config(&junk, None).unwrap_err();
        assert!(e.to_string().contains("junk.pem"), "{e}");
        assert!(e.to_string().contains("BEGIN CERTIFICATE"), "{e}");
        let e = server_config(&junk, &junk).unwrap_err();
        assert!(e.to_string().contains("certificate file"), "{e}");
        let e = client_config(Path::new("no/such/ca.pem"), None).unwrap_err();
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
    fn https_and_a_ca_go_together() {
        let endpoint = || Endpoint::from_static("http://127.0.0.1:1");
        assert!(secure(endpoint(), "http://127.0.0.1:1", None, None).is_ok());
        let e = secure(endpoint(), "https://127.0.0.1:1", None, None).unwrap_err();
        assert!(e.to_string().contains("--ca"), "{e}");
        let tls = ClientTlsConfig::new();
        let e = secure(endpoint(), "http://127.0.0.1:1", Some(&tls), None).unwrap_err();
        assert!(e.to_string().contains("https://"), "{e}");
    }
}
