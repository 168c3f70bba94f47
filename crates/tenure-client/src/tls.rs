//! TLS for the `tenure://` client (rustls, with the ring provider):
//! [`ClientTls`] is the one place a client's connector is built. The server's
//! side (`ServerTls`) is in `tenure-server` and shares the file readers here.
//!
//! - **Server**: `tenure serve --tls-cert FILE --tls-key FILE` (PEM: the
//!   certificate chain, leaf first, and its private key). With them, the lease
//!   port and the HTTP port speak TLS only. The handshake counts within the
//!   deadlines and connection caps a plaintext connection has: on the lease
//!   port it must end before the hello's deadline (and a frame's, from the
//!   accept) while the connection holds a place among those before their hello;
//!   on the HTTP port, before the first request head's deadline. A peer that
//!   speaks plaintext to a TLS port is told so in its own protocol (an error
//!   frame, or an HTTP 400 answer) and closed.
//! - **Client**: `tenure://host:port?tls=true`, trusting the platform's roots,
//!   or only the CAs in `ca_file=PATH`; the name checked against the certificate
//!   is the URL's host, or `server_name=NAME`. The handshake runs under the
//!   client's `timeout`. A certificate that is not trusted or not valid for
//!   the name, or a server that does not answer in TLS, is a permanent error
//!   ([`tenure_core::Error::Unsupported`]) naming the server and what to do.
//!
//! Certificate, key and CA files are read whole, at most [`MAX_PEM_FILE`]
//! bytes, and only if they are regular files (opened without blocking: a FIFO
//! or a device cannot hang a start). Errors name the file and what is wrong
//! with it.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The largest certificate, key or CA file read (a chain of a few certificates
/// is a few KiB; a bundle of every public root about 200 KiB).
pub const MAX_PEM_FILE: u64 = 1024 * 1024;

/// A TLS configuration that cannot be used: which file, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

impl TlsError {
    /// An error saying `why`.
    #[doc(hidden)]
    pub fn new(why: impl Into<String>) -> Self {
        Self(why.into())
    }
}

/// The crypto provider of every TLS configuration here. Given explicitly, not
/// taken from the process default: another crate may have installed another.
#[doc(hidden)]
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client's side: whom it trusts, and the name it checks.
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
    /// Checked instead of the URL's host (`server_name=`).
    server_name: Option<ServerName<'static>>,
    /// Whom it trusts, for errors: "the CA in FILE" or "this machine's roots".
    trust: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").field("trust", &self.trust).field("server_name", &self.server_name).finish()
    }
}

impl ClientTls {
    /// Trusts the CA certificates in `ca_file` (PEM), or without one the
    /// platform's trusted roots (`SSL_CERT_FILE` and `SSL_CERT_DIR` are
    /// honoured); checks `server_name` instead of the host it connects to, if given.
    pub fn new(ca_file: Option<&Path>, server_name: Option<&str>) -> Result<Self, TlsError> {
        let mut roots = RootCertStore::empty();
        let trust = match ca_file {
            Some(path) => {
                let name = path.display().to_string();
                let pem = read_pem_file("CA file", path)?;
                for (i, cert) in certificates("CA file", &name, &pem)?.into_iter().enumerate() {
                    roots.add(cert).map_err(|e| {
                        TlsError(format!("CA file {name}: certificate {} cannot be trusted as a CA: {e}", i + 1))
                    })?;
                }
                format!("the CA in {name}")
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    let why = found.errors.first().map(|e| format!(" ({e})")).unwrap_or_default();
                    return Err(TlsError(format!(
                        "tls=true: no trusted root certificates found on this machine{why}; \
                         give the CA that signed the server's certificate with ca_file=PATH"
                    )));
                }
                "this machine's trusted roots".to_string()
            }
        };
        let server_name = server_name
            .map(|n| {
                ServerName::try_from(n.to_string())
                    .map_err(|_| TlsError(format!("server_name={n}: not a DNS name or an IP address")))
            })
            .transpose()?;
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self { connector: TlsConnector::from(Arc::new(config)), server_name, trust })
    }

    /// The TLS handshake with the server at `addr` (`host:port` as in the URL)
    /// over `tcp`. No deadline of its own: the caller times it.
    pub(crate) async fn connect(
        &self,
        addr: &str,
        tcp: TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, HandshakeError> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
                ServerName::try_from(host.to_string()).map_err(|_| {
                    HandshakeError::Permanent(format!(
                        "{host:?} is not a name a certificate can be checked against; set server_name=NAME"
                    ))
                })?
            }
        };
        let shown = name.to_str().into_owned();
        self.connector.connect(name, tcp).await.map_err(|e| self.explain(&e, &shown))
    }

    /// What a failed handshake means, and what to do about it.
    fn explain(&self, e: &std::io::Error, name: &str) -> HandshakeError {
        use HandshakeError::{Permanent, Transient};
        let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) else {
            return match e.kind() {
                std::io::ErrorKind::UnexpectedEof => Transient(
                    "the server closed the connection during the TLS handshake (is it serving TLS? \
                     it needs --tls-cert and --tls-key)"
                        .into(),
                ),
                _ => Transient(format!("TLS handshake: {e}")),
            };
        };
        match tls {
            // A bad signature: a trusted CA of the same name did not sign it.
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer | CertificateError::BadSignature) => {
                Permanent(format!(
                    "the server's certificate is not signed by a CA this client trusts ({}): \
                     give the CA that signed it with ca_file=PATH",
                    self.trust
                ))
            }
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => Permanent(format!(
                "the server's certificate is not valid for the name {name:?} ({tls}): connect by a name \
                 the certificate lists, or set server_name=NAME to one of them"
            )),
            rustls::Error::InvalidCertificate(_) => Permanent(format!("the server's certificate was refused: {tls}")),
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => Permanent(
                "the server did not answer in TLS: it is not serving TLS (drop tls=true, or start it \
                 with --tls-cert and --tls-key)"
                    .into(),
            ),
            rustls::Error::AlertReceived(alert) => {
                Permanent(format!("the server refused the TLS handshake (alert: {alert:?})"))
            }
            other => Permanent(format!("TLS handshake: {other}")),
        }
    }
}

/// Why a client's TLS handshake failed.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    /// Trying again will not help until something is changed: the message says what.
    Permanent(String),
    /// The connection failed during the handshake; another may succeed.
    Transient(String),
}

/// Reads a PEM file whole: only a regular file, at most [`MAX_PEM_FILE`] bytes.
#[doc(hidden)]
pub fn read_pem_file(what: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let fail = |why: String| TlsError(format!("{what} {}: {why}", path.display()));
    tenure_core::limits::read_small_file(path, MAX_PEM_FILE).map_err(|e| {
        fail(match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            std::io::ErrorKind::InvalidData => format!("larger than {} KiB: not a PEM file", MAX_PEM_FILE / 1024),
            _ => e.to_string(),
        })
    })
}

/// The certificates in PEM text (at least one).
#[doc(hidden)]
pub fn certificates(what: &str, name: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut certs = Vec::new();
    for cert in CertificateDer::pem_slice_iter(pem) {
        certs.push(cert.map_err(|e| TlsError(format!("{what} {name}: not valid PEM: {}", pem_why(&e))))?);
    }
    if certs.is_empty() {
        return Err(TlsError(format!(
            "{what} {name}: no certificate in it (PEM, \"-----BEGIN CERTIFICATE-----\", expected)"
        )));
    }
    Ok(certs)
}

/// A PEM error without the file's bytes in it (a key file's would be secret).
#[doc(hidden)]
pub fn pem_why(e: &pem::Error) -> String {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line".into(),
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed".into(),
        pem::Error::Base64Decode(_) => "a section is not valid base64".into(),
        pem::Error::Io(e) => e.to_string(),
        pem::Error::NoItemsFound => "nothing in it".into(),
        _ => "malformed".into(),
    }
}
