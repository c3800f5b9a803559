//! Throwaway certificates for the TLS tests (shared with the client's
//! tests, which include this file by path).

/// A throwaway CA and a server certificate it signed for `localhost` and
/// `127.0.0.1`, in PEM.
#[derive(Debug)]
pub struct Pki {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl Pki {
    pub fn new() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "colball test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        Pki {
            ca: ca.pem(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// Writes `ca.pem`, `cert.pem` and `key.pem` into a fresh directory.
    pub fn write(&self, tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("colball-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), &self.ca).unwrap();
        std::fs::write(dir.join("cert.pem"), &self.cert).unwrap();
        std::fs::write(dir.join("key.pem"), &self.key).unwrap();
        dir
    }

    /// The coordinator's TLS settings.
    pub fn server(&self) -> tonic::transport::ServerTlsConfig {
        tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(&self.cert, &self.key))
    }

    /// A worker's or client's TLS settings trusting this CA.
    pub fn client(&self) -> tonic::transport::ClientTlsConfig {
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca))
    }
}

impl Default for Pki {
    fn default() -> Pki {
        Pki::new()
    }
}
