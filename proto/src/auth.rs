//! Shared-secret tokens on the wire: the [`Secret`] type both ends hold,
//! and the client side of the check ([`Bearer`], which adds the token to
//! every call). The coordinator's side is `colball_server::auth`.
//!
//! A token travels as the gRPC metadata `authorization: Bearer <token>`,
//! marked sensitive so HTTP/2 header compression never indexes it. Tokens
//! are never logged: [`Secret`]'s `Debug` prints `[redacted]` and it has no
//! `Display`.

use std::fmt;
use std::path::Path;

use thiserror::Error;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The metadata key a token travels in.
pub const AUTHORIZATION: &str = "authorization";

/// The scheme before the token in [`AUTHORIZATION`].
pub const SCHEME: &str = "Bearer ";

/// A shared-secret token. Cheap to clone; prints as `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(std::sync::Arc<str>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Why a token was not accepted as configured.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SecretError {
    #[error("{what} is empty")]
    Empty { what: String },
    #[error(
        "{what} holds a character that cannot travel in gRPC metadata (allowed: printable ASCII, no spaces)"
    )]
    BadCharacter { what: String },
    #[error("cannot read {what}: {reason}")]
    Unreadable { what: String, reason: String },
}

impl Secret {
    /// A token from text, less surrounding whitespace (a final newline
    /// from `echo`, `$(cat file)` or a Secret, a stray space). `what`
    /// names where it came from (for example `--client-token`) in the
    /// error; the token itself is never quoted.
    pub fn new(token: &str, what: &str) -> Result<Secret, SecretError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(SecretError::Empty { what: what.into() });
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(SecretError::BadCharacter { what: what.into() });
        }
        Ok(Secret(token.into()))
    }

    /// A token from a file: its contents less surrounding whitespace (the
    /// final newline `echo` or a Kubernetes Secret volume writes).
    pub fn from_file(path: &Path) -> Result<Secret, SecretError> {
        let what = format!("token file {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| SecretError::Unreadable {
            what: what.clone(),
            reason: e.to_string(),
        })?;
        Secret::new(&text, &what)
    }

    /// The token from a flag's value or a file named by another flag (the
    /// flags' environment variables are the caller's parser's business);
    /// `None` when neither is given. `flag` names the value's flag.
    pub fn from_sources(
        value: Option<&str>,
        file: Option<&Path>,
        flag: &str,
    ) -> Result<Option<Secret>, SecretError> {
        match (value, file) {
            (Some(v), _) => Secret::new(v, flag).map(Some),
            (None, Some(path)) => Secret::from_file(path).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The token's bytes, for the constant-time comparison.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The secret as text, for the one place that must hand it on (a
    /// database URL to its driver).
    pub fn expose_str(&self) -> &str {
        &self.0
    }

    /// The `authorization` metadata value carrying this token, marked
    /// sensitive.
    pub fn header(&self) -> AsciiMetadataValue {
        // `new` allows only printable ASCII, which is always a valid value.
        let mut value = MetadataValue::try_from(format!("{SCHEME}{}", self.0))
            .unwrap_or_else(|_| MetadataValue::from_static(""));
        value.set_sensitive(true);
        value
    }
}

/// A client interceptor that adds the token, when there is one, to every
/// call.
#[derive(Clone, Debug, Default)]
pub struct Bearer {
    header: Option<AsciiMetadataValue>,
}

impl Bearer {
    pub fn new(token: Option<&Secret>) -> Bearer {
        Bearer {
            header: token.map(Secret::header),
        }
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(header) = &self.header {
            request.metadata_mut().insert(AUTHORIZATION, header.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2", "--token").unwrap();
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert!(!format!("{:?}", Some(s)).contains("hunter2"));
    }

    #[test]
    fn bad_tokens_are_named_by_source_not_quoted() {
        let e = Secret::new("", "--client-token").unwrap_err();
        assert_eq!(e.to_string(), "--client-token is empty");
        let e = Secret::new("abc def", "--token").unwrap_err();
        assert!(e.to_string().contains("--token"), "{e}");
        assert!(!e.to_string().contains("abc"), "{e}");
    }

    #[test]
    fn surrounding_whitespace_is_dropped_inner_whitespace_refused() {
        for raw in ["tok\n", " tok", "\ttok\r\n", "tok  \n\n"] {
            assert_eq!(
                Secret::new(raw, "--token").unwrap().expose(),
                b"tok",
                "{raw:?}"
            );
        }
        let e = Secret::new(" \n", "COLBALL_TOKEN").unwrap_err();
        assert_eq!(e.to_string(), "COLBALL_TOKEN is empty");
        assert!(Secret::new("to k\n", "--token").is_err());
    }

    #[test]
    fn files_lose_surrounding_whitespace() {
        let dir = std::env::temp_dir().join(format!("colball-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        std::fs::write(&path, "abc\r\n").unwrap();
        let s = Secret::from_file(&path).unwrap();
        assert_eq!(s.expose(), b"abc");
        std::fs::write(&path, "\n").unwrap();
        let e = Secret::from_file(&path).unwrap_err();
        assert!(e.to_string().contains("is empty"), "{e}");
        let e = Secret::from_file(&dir.join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(Secret::from_sources(None, None, "--token"), Ok(None));
    }

    #[test]
    fn bearer_adds_a_sensitive_header() {
        let s = Secret::new("tok", "--token").unwrap();
        let r = Bearer::new(Some(&s)).call(Request::new(())).unwrap();
        let v = r.metadata().get(AUTHORIZATION).unwrap();
        assert_eq!(v.to_str().unwrap(), "Bearer tok");
        assert!(v.is_sensitive());
        let r = Bearer::new(None).call(Request::new(())).unwrap();
        assert!(r.metadata().get(AUTHORIZATION).is_none());
    }
}
