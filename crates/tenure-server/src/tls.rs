//! TLS for the server's two ports and for the `tenure://` client (rustls, with
//! the ring provider): [`ServerTls`] is the one place a server's acceptor is
//! built, [`ClientTls`] the one place a client's connector is.
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
//!   client's `timeout_ms`. A certificate that is not trusted or not valid for
//!   the name, or a server that does not answer in TLS, is a permanent error
//!   ([`tenure_core::Error::Unsupported`]) naming the server and what to do.
//!
//! Certificate, key and CA files are read whole, at most [`MAX_PEM_FILE`]
//! bytes, and only if they are regular files (opened without blocking: a FIFO
//! or a device cannot hang a start). Errors name the file and what is wrong
//! with it.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The largest certificate, key or CA file read (a chain of a few certificates
/// is a few KiB; a bundle of every public root about 200 KiB).
pub const MAX_PEM_FILE: u64 = 1024 * 1024;

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// A TLS configuration that cannot be used: which file, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

/// The crypto provider of every TLS configuration here. Given explicitly, not
/// taken from the process default: another crate may have installed another.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's side: its certificate chain and key, ready to accept.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads the certificate chain (`cert`, PEM, leaf first) and its private key
    /// (`key`, PEM: PKCS#8, PKCS#1 or SEC1, unencrypted).
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let cert_pem = read_pem_file("TLS certificate file", cert)?;
        let key_pem = read_pem_file("TLS key file", key)?;
        Self::from_pem(&cert_pem, &key_pem, &cert.display().to_string(), &key.display().to_string())
    }

    /// The same from PEM text; `cert_name` and `key_name` name them in errors.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8], cert_name: &str, key_name: &str) -> Result<Self, TlsError> {
        let certs = certificates("TLS certificate file", cert_name, cert_pem)?;
        let key = private_key(key_name, key_pem)?;
        let config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => TlsError(format!(
                    "TLS key file {key_name}: the private key does not match the certificate in {cert_name} \
                     (the first certificate must be the server's own, signed for this key)"
                )),
                other => TlsError(format!("TLS key file {key_name}: the key cannot be used with {cert_name}: {other}")),
            })?;
        Ok(Self { acceptor: TlsAcceptor::from(Arc::new(config)) })
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
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

/// A new connection to a TLS port, after its handshake (or instead of one).
pub(crate) enum Accepted {
    /// The handshake is done.
    Tls(ServerStream),
    /// The peer's first byte is not a TLS handshake: a plaintext client, to be
    /// told so in its own protocol.
    Plaintext(TcpStream),
    /// The peer left before sending anything.
    Closed,
}

/// Accepts TLS on a new connection. No deadline of its own: the caller times it
/// (a handshake is part of getting to the first request).
pub(crate) async fn accept(tls: &ServerTls, stream: TcpStream) -> Result<Accepted, String> {
    // Peeked, not read: the handshake reads it again.
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(0) => return Ok(Accepted::Closed),
        Ok(_) if first[0] != TLS_HANDSHAKE => return Ok(Accepted::Plaintext(stream)),
        Ok(_) => {}
        Err(e) => return Err(format!("reading the TLS handshake: {e}")),
    }
    match tls.acceptor().accept(stream).await {
        Ok(s) => Ok(Accepted::Tls(ServerStream::Tls(Box::new(s)))),
        Err(e) => Err(format!("TLS handshake: {e}")),
    }
}

/// Answers a plaintext client on a TLS port with `answer` (in its own protocol)
/// and closes. What the client sent is read and dropped first, up to
/// [`MAX_DRAINED`] bytes, until it closes: closing on unread bytes would reset
/// the connection, and the client could lose the answer. No deadline of its
/// own: the caller times it.
pub(crate) async fn refuse_plaintext(mut stream: TcpStream, answer: &[u8]) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    if stream.write_all(answer).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < MAX_DRAINED {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

/// Most bytes of a plaintext client's request read (and dropped) before it is
/// closed: a hello, or an HTTP request head, fits.
const MAX_DRAINED: usize = 64 * 1024;

/// A server's connection: plaintext, or TLS over TCP.
pub(crate) enum ServerStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl ServerStream {
    /// A write without waiting, on a plaintext socket; a TLS stream says
    /// `WouldBlock` (its writes go through [`tokio::io::AsyncWriteExt`], then a flush).
    pub(crate) fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.try_write(buf),
            Self::Tls(_) => Err(std::io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl crate::spin::TryRead for ServerStream {
    fn try_read_buf(&mut self, buf: &mut bytes::BytesMut) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.try_read_buf(buf),
            Self::Tls(s) => crate::spin::read_now(s, buf),
        }
    }
}

impl AsyncRead for ServerStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Reads a PEM file whole: only a regular file, at most [`MAX_PEM_FILE`] bytes.
fn read_pem_file(what: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
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
fn certificates(what: &str, name: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
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

/// The first private key in PEM text.
fn private_key(name: &str, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError(format!(
            "TLS key file {name}: no private key in it (an unencrypted PEM key, \"-----BEGIN PRIVATE KEY-----\" \
             or the RSA or EC kind, expected)"
        )),
        other => TlsError(format!("TLS key file {name}: not valid PEM: {}", pem_why(&other))),
    })
}

/// A PEM error without the file's bytes in it (a key file's would be secret).
fn pem_why(e: &pem::Error) -> String {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line".into(),
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed".into(),
        pem::Error::Base64Decode(_) => "a section is not valid base64".into(),
        pem::Error::Io(e) => e.to_string(),
        pem::Error::NoItemsFound => "nothing in it".into(),
        _ => "malformed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(cert: &[u8], key: &[u8]) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (c, k) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&c, cert).expect("write");
        std::fs::write(&k, key).expect("write");
        (dir, c, k)
    }

    fn pair(name: &str) -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec![name.to_string()]).expect("cert");
        (c.cert.pem(), c.signing_key.serialize_pem())
    }

    fn err(cert: &Path, key: &Path) -> String {
        ServerTls::from_files(cert, key).expect_err("refused").to_string()
    }

    #[test]
    fn a_certificate_and_its_key_are_accepted() {
        let (cert, key) = pair("lease.test");
        let (_dir, c, k) = files(cert.as_bytes(), key.as_bytes());
        assert!(ServerTls::from_files(&c, &k).is_ok());
    }

    #[test]
    fn bad_files_are_refused_naming_the_file_and_the_fault() {
        let (cert, key) = pair("lease.test");
        let (dir, c, k) = files(cert.as_bytes(), key.as_bytes());
        let missing = dir.path().join("nope.pem");
        let e = err(&missing, &k);
        assert!(e.contains("TLS certificate file") && e.contains("nope.pem") && e.contains("no such file"), "{e}");
        let e = err(&c, &missing);
        assert!(e.contains("TLS key file") && e.contains("no such file"), "{e}");
        // Not PEM at all, and PEM of the wrong kind (the files swapped).
        std::fs::write(dir.path().join("junk"), b"hello, not a certificate\n").expect("write");
        let e = err(&dir.path().join("junk"), &k);
        assert!(e.contains("junk") && e.contains("no certificate"), "{e}");
        let e = err(&k, &c);
        assert!(e.contains("no certificate"), "{e}");
        let e = err(&c, &c);
        assert!(e.contains("TLS key file") && e.contains("no private key"), "{e}");
        // Broken base64 inside the markers.
        std::fs::write(dir.path().join("bad"), b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n")
            .expect("write");
        let e = err(&dir.path().join("bad"), &k);
        assert!(e.contains("not valid PEM"), "{e}");
        // Another certificate's key.
        let (_, other_key) = pair("lease.test");
        std::fs::write(dir.path().join("other.key"), other_key).expect("write");
        let e = err(&c, &dir.path().join("other.key"));
        assert!(e.contains("does not match the certificate"), "{e}");
        // A directory, and a file over the cap.
        let e = err(dir.path(), &k);
        assert!(e.contains("not a regular file"), "{e}");
        let big = dir.path().join("big.pem");
        std::fs::write(&big, vec![b'a'; usize::try_from(MAX_PEM_FILE).expect("fits") + 1]).expect("write");
        let e = err(&big, &k);
        assert!(e.contains("larger than"), "{e}");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from(0o600)).expect("mkfifo");
        let e = ClientTls::new(Some(&fifo), None).expect_err("refused").to_string();
        assert!(e.contains("CA file") && e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn client_options_are_checked() {
        let (cert, _) = pair("lease.test");
        let (_dir, c, _) = files(cert.as_bytes(), b"");
        assert!(ClientTls::new(Some(&c), Some("lease.test")).is_ok());
        let e = ClientTls::new(Some(&c), Some("not a name!")).expect_err("refused").to_string();
        assert!(e.contains("server_name="), "{e}");
    }
}
