//! A certificate authority made at test time (rcgen), its certificates in
//! files, and a plain rustls client for the HTTP port.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use tenure_server::ServerTls;

/// A test CA, with its certificate in `ca_file` and every file it issues in `dir`.
pub struct TestCa {
    pub dir: tempfile::TempDir,
    pub ca_file: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
    issued: AtomicUsize,
}

impl TestCa {
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: two test CAs are strangers, not namesakes.
        let name = format!("tenure test CA {:016x}", rand::random::<u64>());
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, issuer.pem()).expect("write the CA");
        Self { dir, ca_file, issuer, issued: AtomicUsize::new(0) }
    }

    /// A server certificate for `names` (DNS names or IP addresses) and its
    /// key, written to files: (certificate chain, key).
    pub fn issue(&self, names: &[&str]) -> (PathBuf, PathBuf) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name.push(DnType::CommonName, "tenure test server");
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let (cert_file, key_file) =
            (self.dir.path().join(format!("server{n}.pem")), self.dir.path().join(format!("server{n}.key")));
        std::fs::write(&cert_file, cert.pem()).expect("write the certificate");
        std::fs::write(&key_file, key.serialize_pem()).expect("write the key");
        (cert_file, key_file)
    }

    /// The server side of a certificate for `names`.
    pub fn server(&self, names: &[&str]) -> ServerTls {
        let (cert, key) = self.issue(names);
        ServerTls::from_files(&cert, &key).expect("server TLS")
    }

    /// The server side of a certificate for 127.0.0.1 and localhost.
    pub fn loopback(&self) -> ServerTls {
        self.server(&["127.0.0.1", "localhost"])
    }

    /// URL parameters of a client that trusts this CA.
    pub fn query(&self) -> String {
        format!("tls=true&ca_file={}", self.ca_file.display())
    }

    /// A plain rustls client that trusts this CA (for the HTTP port).
    pub fn connector(&self) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuer.der().clone()).expect("trust the CA");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }
}
