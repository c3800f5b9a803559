//! Who may call the coordinator: optional shared-secret tokens, checked by
//! tonic interceptors.
//!
//! One token guards the client-facing `Solver` service, another the
//! worker-facing `Workers` service (so a client holding the client token
//! cannot join as a worker). A call carries its token as the metadata
//! `authorization: Bearer <token>`; [`check`] compares it in constant time
//! and refuses a missing or wrong one with UNAUTHENTICATED, whose message
//! says which token is needed and how to pass it, and never echoes what was
//! sent. With no token configured, [`check`] lets every call through.
//!
//! ```
//! use colball_server::auth::{self, Role, Secret};
//! let token = Secret::new("s3cret", "--client-token").unwrap();
//! let guard = auth::check(Some(token), Role::Client);
//! // SolverServer::with_interceptor(service, guard.clone()), or
//! // InterceptedService::new(any_service, guard) for reflection, watch...
//! # let _ = guard;
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use subtle::ConstantTimeEq;
use tonic::service::Interceptor;
use tonic::{Request, Status};

pub use colball_proto::auth::{AUTHORIZATION, Bearer, SCHEME, Secret, SecretError};

/// Which token a service takes: the client token or the worker token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Worker,
}

impl Role {
    fn missing(self) -> &'static str {
        match self {
            Role::Client => {
                "this coordinator requires a client token: pass --token or set COLBALL_TOKEN"
            }
            Role::Worker => {
                "this coordinator requires a worker token: pass --token (or --token-file) or set COLBALL_WORKER_TOKEN"
            }
        }
    }

    fn wrong(self) -> &'static str {
        match self {
            Role::Client => {
                "the client token is wrong: pass the coordinator's --client-token with --token or COLBALL_TOKEN"
            }
            Role::Worker => {
                "the worker token is wrong: pass the coordinator's --worker-token with --token or COLBALL_WORKER_TOKEN"
            }
        }
    }
}

/// Who a client is: the name of the token it presented (`default` for the
/// single `--client-token`). The client check puts it in the request's
/// extensions; without tokens the coordinator uses the peer address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity(pub Arc<str>);

/// The name the single `--client-token` goes by.
pub const DEFAULT_NAME: &str = "default";

/// A `--client-tokens-file` that cannot be used, and where.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read the client tokens file {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error(
        "{path}:{line}: expected `NAME TOKEN` (a name, one space or tab, a token){}",
        .detail
    )]
    BadLine {
        path: String,
        line: usize,
        detail: String,
    },
    #[error("{path}:{line}: the name {name:?} is given twice")]
    DuplicateName {
        path: String,
        line: usize,
        name: String,
    },
}

/// Reads `name token` pairs, one per line; blank lines and lines starting
/// with `#` are skipped, surrounding whitespace is trimmed.
pub fn read_tokens_file(path: &Path) -> Result<NamedTokens, TokenFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TokenFileError::Unreadable {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    let mut tokens: NamedTokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |detail: String| TokenFileError::BadLine {
            path: shown.clone(),
            line: i + 1,
            detail,
        };
        let mut fields = line.split_whitespace();
        let (Some(name), Some(token), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(bad(String::new()));
        };
        let secret = Secret::new(token, "the token").map_err(|e| bad(format!(": {e}")))?;
        if tokens.iter().any(|(n, _)| &**n == name) {
            return Err(TokenFileError::DuplicateName {
                path: shown,
                line: i + 1,
                name: name.to_string(),
            });
        }
        tokens.push((name.into(), secret));
    }
    Ok(tokens)
}

/// Named tokens: `(name, token)` pairs.
pub type NamedTokens = Vec<(Arc<str>, Secret)>;

/// The client tokens a coordinator accepts, by name: the single
/// `--client-token` (named [`DEFAULT_NAME`]) and the pairs of
/// `--client-tokens-file`, which [`TokenSet::reload`] reads again (on
/// SIGHUP). Empty: no token is required.
#[derive(Debug)]
pub struct TokenSet {
    single: Option<Secret>,
    file: Option<PathBuf>,
    tokens: RwLock<Arc<NamedTokens>>,
}

impl TokenSet {
    pub fn new(
        single: Option<Secret>,
        file: Option<PathBuf>,
    ) -> Result<Arc<TokenSet>, TokenFileError> {
        let set = TokenSet {
            single,
            file,
            tokens: RwLock::new(Arc::new(Vec::new())),
        };
        set.reload()?;
        Ok(Arc::new(set))
    }

    /// Reads the tokens file again; on an error the tokens in use stay.
    /// Returns how many tokens are accepted now.
    pub fn reload(&self) -> Result<usize, TokenFileError> {
        let mut tokens = Vec::new();
        if let Some(single) = &self.single {
            tokens.push((Arc::from(DEFAULT_NAME), single.clone()));
        }
        if let Some(path) = &self.file {
            tokens.extend(read_tokens_file(path)?);
        }
        let n = tokens.len();
        *self.tokens.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tokens);
        Ok(n)
    }

    pub fn is_empty(&self) -> bool {
        self.current().is_empty()
    }

    fn current(&self) -> Arc<NamedTokens> {
        self.tokens
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The name of the token equal to `given`. Every token is compared, in
    /// constant time in its content, whichever matches.
    pub fn find(&self, given: &[u8]) -> Option<Arc<str>> {
        let mut found = None;
        for (name, secret) in self.current().iter() {
            if bool::from(given.ct_eq(secret.expose())) {
                found = Some(name.clone());
            }
        }
        found
    }
}

/// What a check compares with.
#[derive(Clone, Debug)]
enum Expected {
    One(Option<Secret>),
    Set(Arc<TokenSet>),
}

/// An interceptor that admits calls carrying an expected token (all calls
/// when there is none). Cheap to clone: apply one to several services.
#[derive(Clone, Debug)]
pub struct Check {
    expected: Expected,
    role: Role,
}

/// The interceptor for a service that takes `role`'s token.
pub fn check(expected: Option<Secret>, role: Role) -> Check {
    Check {
        expected: Expected::One(expected),
        role,
    }
}

/// The interceptor for the client-facing services: any token of `set`,
/// whose name it records as the call's [`Identity`].
pub fn check_clients(set: Arc<TokenSet>) -> Check {
    Check {
        expected: Expected::Set(set),
        role: Role::Client,
    }
}

impl Check {
    /// Whether a token is required.
    pub fn enabled(&self) -> bool {
        match &self.expected {
            Expected::One(one) => one.is_some(),
            Expected::Set(set) => !set.is_empty(),
        }
    }

    /// Checks a bearer token taken from a request (`None`: none sent):
    /// the token's name, or the refusal's message.
    pub fn verify(&self, given: Option<&str>) -> Result<Option<Arc<str>>, &'static str> {
        if !self.enabled() {
            return Ok(None);
        }
        let Some(token) = given else {
            return Err(self.role.missing());
        };
        let found = match &self.expected {
            // Constant time in the token's content (a length mismatch
            // returns at once; the length is not the secret).
            Expected::One(Some(one)) => {
                bool::from(token.as_bytes().ct_eq(one.expose())).then(|| Arc::from(DEFAULT_NAME))
            }
            Expected::One(None) => None,
            Expected::Set(set) => set.find(token.as_bytes()),
        };
        found.map(Some).ok_or(self.role.wrong())
    }
}

impl Interceptor for Check {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let given = request
            .metadata()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix(SCHEME));
        match self.verify(given) {
            Ok(None) => Ok(request),
            Ok(Some(name)) => {
                request.extensions_mut().insert(Identity(name));
                Ok(request)
            }
            Err(message) => {
                tracing::warn!(peer = %crate::telemetry::addr(request.remote_addr()), role = ?self.role, "call refused: {message}");
                Err(Status::unauthenticated(message))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn with(header: Option<&str>) -> Request<()> {
        let mut r = Request::new(());
        if let Some(h) = header {
            r.metadata_mut().insert(AUTHORIZATION, h.parse().unwrap());
        }
        r
    }

    #[test]
    fn no_token_admits_everything() {
        let mut c = check(None, Role::Client);
        assert!(!c.enabled());
        assert!(c.call(with(None)).is_ok());
        assert!(c.call(with(Some("Bearer x"))).is_ok());
    }

    #[test]
    fn a_token_is_required_and_never_echoed() {
        let secret = Secret::new("right-token", "--client-token").unwrap();
        let mut c = check(Some(secret.clone()), Role::Client);
        assert!(c.call(with(Some("Bearer right-token"))).is_ok());
        let mut authorised = Request::new(());
        authorised
            .metadata_mut()
            .insert(AUTHORIZATION, secret.header());
        assert!(c.call(authorised).is_ok());

        let missing = c.call(with(None)).unwrap_err();
        assert_eq!(missing.code(), Code::Unauthenticated);
        assert!(missing.message().contains("requires a client token"));
        assert!(missing.message().contains("COLBALL_TOKEN"));

        for bad in [
            "Bearer wrong-token",
            "Bearer right-token2",
            "Bearer ",
            "right-token",
            "Basic right-token",
        ] {
            let e = c.call(with(Some(bad))).unwrap_err();
            assert_eq!(e.code(), Code::Unauthenticated, "{bad}");
            assert!(!e.message().contains("wrong-token"), "{}", e.message());
            assert!(!e.message().contains("right-token"), "{}", e.message());
        }
    }

    #[test]
    fn named_tokens_identify_their_clients_and_reload() {
        let dir = std::env::temp_dir().join(format!("colball-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(&path, "# graders\nalice  tok-a\n\nbob\ttok-b \n").unwrap();
        let set =
            TokenSet::new(Some(Secret::new("tok-d", "x").unwrap()), Some(path.clone())).unwrap();
        let mut c = check_clients(set.clone());
        let name = |c: &mut Check, h: &str| {
            c.call(with(Some(h)))
                .map(|r| r.extensions().get::<Identity>().map(|i| i.0.to_string()))
        };
        assert_eq!(
            name(&mut c, "Bearer tok-a").unwrap().as_deref(),
            Some("alice")
        );
        assert_eq!(
            name(&mut c, "Bearer tok-b").unwrap().as_deref(),
            Some("bob")
        );
        assert_eq!(
            name(&mut c, "Bearer tok-d").unwrap().as_deref(),
            Some(DEFAULT_NAME)
        );
        assert_eq!(
            name(&mut c, "Bearer tok-c").unwrap_err().code(),
            Code::Unauthenticated
        );
        // A reload takes bob's token away and gives carol one.
        std::fs::write(&path, "alice tok-a\ncarol tok-c\n").unwrap();
        assert_eq!(set.reload().unwrap(), 3);
        assert!(name(&mut c, "Bearer tok-b").is_err());
        assert_eq!(
            name(&mut c, "Bearer tok-c").unwrap().as_deref(),
            Some("carol")
        );
        // A bad file is refused with its line, and the tokens stay.
        std::fs::write(&path, "alice tok-a\ndave\n").unwrap();
        let e = set.reload().unwrap_err();
        assert!(e.to_string().contains(":2:"), "{e}");
        assert!(name(&mut c, "Bearer tok-c").is_ok());
        std::fs::write(&path, "a x\na y\n").unwrap();
        assert!(matches!(
            set.reload(),
            Err(TokenFileError::DuplicateName { line: 2, .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_worker_message_names_the_worker_token() {
        let mut c = check(
            Some(Secret::new("w", "--worker-token").unwrap()),
            Role::Worker,
        );
        let e = c.call(with(Some("Bearer v"))).unwrap_err();
        assert!(
            e.message().contains("worker token is wrong"),
            "{}",
            e.message()
        );
        let e = c.call(with(None)).unwrap_err();
        assert!(
            e.message().contains("COLBALL_WORKER_TOKEN"),
            "{}",
            e.message()
        );
    }
}
