//! Webhooks: a job may name a URL (`JobOptions.webhook`, `?webhook=` on
//! the HTTP submit) that the coordinator calls once the job finishes.
//!
//! - Which URLs: only those matching a `--webhook-allow` pattern, checked
//!   at submission, and at each call against the addresses the host
//!   resolves to ([`allow`]: the guard against request forgery).
//! - Signed as the Standard Webhooks convention signs calls, so that its
//!   reference libraries verify them: each call carries `webhook-id` (a
//!   stable id, the same on every try of one delivery), `webhook-timestamp`
//!   (Unix seconds) and `webhook-signature` (`v1,` and the base64 of the
//!   HMAC-SHA256 of `ID.TIMESTAMP.BODY` under the secret). The secret is
//!   written `whsec_` and the base64 of its bytes (`--webhook-secret-file`).
//! - Delivered at least once ([`deliver`]): the call's state is kept with
//!   the job in the store, so a call pending when the coordinator stops is
//!   made after it starts again (by the leader, on a shared store).

pub mod allow;
mod deliver;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// How a coordinator calls webhooks (its `--webhook-*` flags).
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// The URLs it calls (`--webhook-allow`); none: webhooks are off, and
    /// a job naming one is refused.
    pub allow: Vec<allow::Pattern>,
    /// The signing secret (`--webhook-secret-file`), needed with `allow`.
    pub secret: Option<WebhookSecret>,
    /// How long after a job finishes its call is tried again
    /// (`--webhook-retry-hours`).
    pub retry_for: Duration,
    /// The coordinator's HTTP API as the receivers reach it
    /// (`--public-url`, else the `--http` address), for the results URL
    /// in each call's body; `None`: the URL's path alone.
    pub public_url: Option<String>,
}

impl Default for WebhookConfig {
    fn default() -> WebhookConfig {
        WebhookConfig {
            allow: Vec::new(),
            secret: None,
            retry_for: Duration::from_secs(24 * 3600),
            public_url: None,
        }
    }
}

impl WebhookConfig {
    /// Checks a URL a job names: the URL to store, or why it is refused.
    pub fn check(&self, url: &str) -> Result<String, String> {
        allow::check(url, &self.allow).map(|_| url.to_string())
    }
}

/// Counts of the webhook calls a coordinator made (for `/metrics`).
#[derive(Debug, Default)]
pub struct Calls {
    /// Calls answered with a 2xx status.
    pub delivered: std::sync::atomic::AtomicU64,
    /// Calls that failed and are to be made again.
    pub failed: std::sync::atomic::AtomicU64,
    /// Calls given up: tried for `--webhook-retry-hours`, or refused.
    pub given_up: std::sync::atomic::AtomicU64,
}

/// The secret's prefix in its written form.
const PREFIX: &str = "whsec_";

/// A webhook signing secret's bytes (never printed).
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookSecret({} bytes)", self.0.len())
    }
}

/// A secret that cannot be used, and why (its value is not repeated).
#[derive(Debug, thiserror::Error)]
#[error("{where_}: {problem}")]
pub struct SecretError {
    pub where_: String,
    pub problem: String,
}

impl WebhookSecret {
    /// The secret written `whsec_BASE64` (24 to 64 bytes, as the
    /// convention asks), surrounding whitespace aside.
    pub fn parse(text: &str, where_: &str) -> Result<WebhookSecret, SecretError> {
        let fail = |problem: &str| SecretError {
            where_: where_.to_string(),
            problem: problem.to_string(),
        };
        let encoded = text
            .trim()
            .strip_prefix(PREFIX)
            .ok_or_else(|| fail("expected a secret written whsec_ and base64"))?;
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|_| fail("the part after whsec_ is not base64"))?;
        if !(24..=64).contains(&bytes.len()) {
            return Err(fail(&format!(
                "the secret has {} bytes; it needs 24 to 64",
                bytes.len()
            )));
        }
        Ok(WebhookSecret(bytes))
    }

    /// The secret in the file at `path`.
    pub fn read(path: &Path) -> Result<WebhookSecret, SecretError> {
        let where_ = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| SecretError {
            where_: where_.clone(),
            problem: e.to_string(),
        })?;
        WebhookSecret::parse(&text, &where_)
    }

    /// The headers of a call: `webhook-id`, `webhook-timestamp` and
    /// `webhook-signature`.
    pub fn headers(&self, id: &str, unix_secs: i64, body: &[u8]) -> [(&'static str, String); 3] {
        [
            ("webhook-id", id.to_string()),
            ("webhook-timestamp", unix_secs.to_string()),
            ("webhook-signature", self.signature(id, unix_secs, body)),
        ]
    }

    /// `v1,` and the base64 of HMAC-SHA256(`ID.TIMESTAMP.BODY`).
    fn signature(&self, id: &str, unix_secs: i64, body: &[u8]) -> String {
        // Any key length is accepted by HMAC.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(unix_secs.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_signed_as_the_reference_library_signs_them() {
        // The bytes 0..32 as a secret; the expected signature is what the
        // convention's Python library (`standardwebhooks` 1.3.0) computes
        // for the same id, timestamp and body.
        let secret = WebhookSecret::parse(
            "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
            "test",
        )
        .unwrap();
        let headers = secret.headers(
            "msg_j7-5f3a9c21d0b4.done",
            1_796_400_000,
            br#"{"id":"j7-5f3a9c21d0b4","state":"done"}"#,
        );
        assert_eq!(
            headers,
            [
                ("webhook-id", "msg_j7-5f3a9c21d0b4.done".to_string()),
                ("webhook-timestamp", "1796400000".to_string()),
                (
                    "webhook-signature",
                    "v1,wEhXOtWmFS9rAmeM7EJAbx7Ir2cO09wGcwLCJAKYCfY=".to_string()
                ),
            ]
        );
        // Any change to what is signed changes the signature.
        let other = secret.headers("msg_j7-5f3a9c21d0b4.done", 1_796_400_001, b"{}");
        assert_ne!(other[2], headers[2]);
    }

    #[test]
    fn a_secret_that_cannot_be_used_says_why_without_repeating_it() {
        for (text, says) in [
            ("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "whsec_"),
            ("whsec_not base64!", "not base64"),
            ("whsec_AAECAwQF", "6 bytes"),
        ] {
            let e = WebhookSecret::parse(text, "secret.txt").unwrap_err();
            let message = e.to_string();
            assert!(
                message.starts_with("secret.txt: ") && message.contains(says),
                "{message}"
            );
            assert!(!message.contains("AAEC"), "{message}");
        }
        let secret =
            WebhookSecret::parse("whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "x")
                .unwrap();
        assert_eq!(format!("{secret:?}"), "WebhookSecret(32 bytes)");
    }
}
