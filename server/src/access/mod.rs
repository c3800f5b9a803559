//! Access at the edge: who may call the coordinator and how much at once.
//! The client tokens (checked by [`crate::auth`]'s interceptors, read again
//! on SIGHUP), the worker token, and each client's requests in flight
//! ([`per_client`]). The gRPC and HTTP services consult it before a request
//! reaches the scheduler or the jobs; neither of those knows of it.

pub mod per_client;

use std::sync::Arc;

use colball_proto::Secret;

use crate::auth::{TokenFileError, TokenSet};
use crate::coordinator::config::AccessConfig;
use crate::error::ServerError;
use per_client::{PerClient, Slot};

/// See the module documentation.
#[derive(Debug)]
pub struct Access {
    tokens: Arc<TokenSet>,
    worker_token: Option<Secret>,
    tls: Option<tonic::transport::ServerTlsConfig>,
    per_client: Arc<PerClient>,
}

impl Access {
    /// Access as `config` sets it (reading the client tokens file).
    pub fn new(config: &AccessConfig) -> Result<Access, TokenFileError> {
        Ok(Access {
            tokens: TokenSet::new(
                config.client_token.clone(),
                config.client_tokens_file.clone(),
            )?,
            worker_token: config.worker_token.clone(),
            tls: config.tls.clone(),
            per_client: PerClient::new(config.max_requests_per_client),
        })
    }

    /// The client tokens (the gRPC interceptor and the HTTP endpoint's
    /// `/api` check them).
    pub fn tokens(&self) -> &Arc<TokenSet> {
        &self.tokens
    }

    /// Reads the client tokens file again (SIGHUP); on an error the tokens
    /// in use stay.
    pub fn reload_tokens(&self) -> Result<usize, TokenFileError> {
        self.tokens.reload()
    }

    /// The token workers must send, if any.
    pub fn worker_token(&self) -> Option<Secret> {
        self.worker_token.clone()
    }

    /// TLS for the gRPC port, if any.
    pub fn tls(&self) -> Option<&tonic::transport::ServerTlsConfig> {
        self.tls.as_ref()
    }

    /// A place among `client`'s requests in flight, held until dropped, or
    /// RESOURCE_EXHAUSTED when it has `--max-batches-per-client` already.
    pub(crate) fn slot(&self, client: &str) -> Result<Slot, ServerError> {
        self.per_client.acquire(client)
    }
}
