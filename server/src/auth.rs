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

/// An interceptor that admits calls carrying the expected token (all calls
/// when there is none). Cheap to clone: apply one to several services.
#[derive(Clone, Debug)]
pub struct Check {
    expected: Option<Secret>,
    role: Role,
}

/// The interceptor for a service that takes `role`'s token.
pub fn check(expected: Option<Secret>, role: Role) -> Check {
    Check { expected, role }
}

impl Check {
    /// Whether a token is required.
    pub fn enabled(&self) -> bool {
        self.expected.is_some()
    }
}

impl Interceptor for Check {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix(SCHEME));
        let message = match given {
            None => self.role.missing(),
            // Constant time in the token's content (a length mismatch
            // returns at once; the length is not the secret).
            Some(token) if bool::from(token.as_bytes().ct_eq(expected.expose())) => {
                return Ok(request);
            }
            Some(_) => self.role.wrong(),
        };
        tracing::warn!(peer = ?request.remote_addr(), role = ?self.role, "call refused: {message}");
        Err(Status::unauthenticated(message))
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
