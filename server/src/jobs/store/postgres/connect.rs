//! Connecting to the database: the URL, the password, TLS, the pool, and
//! the session started beside it.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::broadcast;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::sync::CancellationToken;

use super::super::StoreError;
use super::{Failure, PostgresStore, Session, migrate, session};

/// TLS to the database, used when the URL's `sslmode` is `prefer` or
/// `require`: the server's certificate is always verified (libpq's
/// `verify-full`), against the PEM file `PGSSLROOTCERT` names (libpq's
/// variable), else the web's root authorities.
pub(super) fn tls_connector() -> Result<MakeRustlsConnect, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match std::env::var_os("PGSSLROOTCERT") {
        Some(path) => {
            let shown = std::path::Path::new(&path).display().to_string();
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&path)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| {
                    format!("PGSSLROOTCERT {shown}: not a PEM file of certificates: {e}")
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("PGSSLROOTCERT {shown}: holds no certificate"));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// Where a URL points, for messages: host, port and database, never the
/// password.
pub fn describe(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{:?} on {}:{port}",
        config.get_dbname().unwrap_or("(the user's)"),
        hosts.join(",")
    )
}

impl PostgresStore {
    /// Connects to the database at `url` (its password from the URL, else
    /// `PGPASSWORD`), creates or migrates the schema, and reads the store's
    /// key. A store capped at `cap` bytes.
    pub async fn connect(url: &str, cap: Option<u64>) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_as(url, None, cap).await
    }

    /// [`Self::connect`] with `password` (from `--store-password-file`)
    /// before the URL's and `PGPASSWORD`.
    pub async fn connect_as(
        url: &str,
        password: Option<&str>,
        cap: Option<u64>,
    ) -> Result<PostgresStore, StoreError> {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| StoreError::Open {
            path: "the --store URL".into(),
            reason: format!("not a PostgreSQL URL: {e}"),
        })?;
        if let Some(password) = password {
            config.password(password);
        } else if config.get_password().is_none()
            && let Ok(password) = std::env::var("PGPASSWORD")
        {
            config.password(password);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        // A dead peer is noticed, and a dead leader's lock let go, within
        // about a minute even without a clean close.
        config.keepalives_idle(Duration::from_secs(30));
        let target = describe(&config);
        let open = |reason: Failure| StoreError::Open {
            path: target.clone(),
            reason: reason.0,
        };
        if !url.contains("sslmode=") {
            // As libpq's "disable": a URL that names no sslmode is plain.
            config.ssl_mode(SslMode::Disable);
        }
        let tls = tls_connector().map_err(|reason| StoreError::Open {
            path: target.clone(),
            reason,
        })?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(8)
            .build()
            .map_err(|e| open(e.into()))?;
        let mut client = pool.get().await.map_err(|e| open(e.into()))?;
        let instance = migrate(&mut client).await.map_err(open)?;
        drop(client);
        let wakes = broadcast::channel(1024).0;
        let stop = CancellationToken::new();
        let holder_key = rand::random::<i32>() & i32::MAX;
        let me = Session {
            wakes: wakes.clone(),
            leading: Arc::new(AtomicBool::new(false)),
            alive: Arc::new(AtomicBool::new(false)),
            holder_key,
        };
        let (leading, alive) = (me.leading.clone(), me.alive.clone());
        tokio::spawn(session(config, tls, me, stop.clone()));
        // Its first claims wait for the live lock: give the session a moment.
        let ready = tokio::time::Instant::now() + Duration::from_secs(5);
        while !alive.load(Ordering::Relaxed) && tokio::time::Instant::now() < ready {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(PostgresStore {
            pool,
            instance,
            cap,
            holder: super::super::holder_name(),
            holder_key,
            alive,
            held: Mutex::default(),
            wakes,
            leading,
            _session: stop.drop_guard(),
        })
    }
}
