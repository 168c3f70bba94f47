//! TLS for the server's two ports (rustls, with the ring provider):
//! [`ServerTls`] is the one place a server's acceptor is built. The client's
//! side, [`ClientTls`], and the file readers both use, are in `tenure-client`.
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
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::ServerConfig;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::{self, PemObject};
pub use tenure_client::tls::{ClientTls, MAX_PEM_FILE, TlsError};
use tenure_client::tls::{certificates, pem_why, provider, read_pem_file};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

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
            .map_err(|e| TlsError::new(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => TlsError::new(format!(
                    "TLS key file {key_name}: the private key does not match the certificate in {cert_name} \
                     (the first certificate must be the server's own, signed for this key)"
                )),
                other => {
                    TlsError::new(format!("TLS key file {key_name}: the key cannot be used with {cert_name}: {other}"))
                }
            })?;
        Ok(Self { acceptor: TlsAcceptor::from(Arc::new(config)) })
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
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

/// The first private key in PEM text.
fn private_key(name: &str, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::new(format!(
            "TLS key file {name}: no private key in it (an unencrypted PEM key, \"-----BEGIN PRIVATE KEY-----\" \
             or the RSA or EC kind, expected)"
        )),
        other => TlsError::new(format!("TLS key file {name}: not valid PEM: {}", pem_why(&other))),
    })
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
