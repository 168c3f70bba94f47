//! `tenure serve` with TLS, as processes, with a CA made at test time: `tenure
//! lock` and `tenure status` over `tenure://…?tls=true&ca_file=…`, the HTTP
//! port over TLS, a plaintext client told to use TLS; certificate files that
//! are missing or do not fit together refused at start; and the auth token
//! kept off the network without TLS, by the server and by the client.
#![cfg(feature = "server")]

use crate::common;
use crate::serve_common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{LIMIT, run, tenure};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serve_common::serve;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A CA made for the test, and a server certificate for 127.0.0.1 and
/// localhost that it signed, in files.
struct Pki {
    dir: tempfile::TempDir,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "tenure CLI test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.pem"), issuer.pem()).expect("write");
        let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("params");
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &issuer).expect("sign");
        std::fs::write(dir.path().join("server.pem"), cert.pem()).expect("write");
        std::fs::write(dir.path().join("server.key"), key.serialize_pem()).expect("write");
        Self { dir, issuer }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// GET `path` over TLS from `addr`, trusting `pki`'s CA: the status line and body.
async fn https_get(pki: &Pki, addr: &str, path: &str) -> (String, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.issuer.der().clone()).expect("trust the CA");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut s = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("handshake");
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut buf = Vec::new();
        // The server may close without close_notify once the answer is sent.
        let _ = s.read_to_end(&mut buf).await;
        buf
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), exchange).await.expect("an answer in time");
    let answer = text(&buf);
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

#[tokio::test]
async fn lock_and_status_over_tls_and_the_http_port_over_tls() {
    let pki = Pki::new();
    let (cert, key) = (pki.arg("server.pem"), pki.arg("server.key"));
    let server = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--max-lease",
        "2s",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    assert!(server.url.ends_with("?tls=true"), "the banner says how to connect: {}", server.url);
    let url = format!("{}&ca_file={}", server.url, pki.arg("ca.pem"));
    // Waits through the restart quarantine (2 s + 1 s), then runs the command.
    let out = run(
        tenure().args([
            "lock",
            &url,
            "tls/job",
            "--ttl",
            "2s",
            "--timeout",
            "30s",
            "--",
            "sh",
            "-c",
            "echo ran $TENURE_TOKEN",
        ]),
        LIMIT,
    );
    assert!(out.status.success(), "tenure lock over TLS: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("ran "), "{}", text(&out.stdout));
    let out = run(tenure().args(["status", &url, "--all"]), LIMIT);
    assert!(out.status.success(), "tenure status over TLS: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("tls/job"), "{}", text(&out.stdout));
    // The same with the settings as --store-opt.
    let opts = ["--store-opt", "tls=true", "--store-opt", &format!("ca_file={}", pki.arg("ca.pem"))];
    let out = run(tenure().args(["status", &format!("tenure://{}", server.addr), "--all"]).args(opts), LIMIT);
    assert!(out.status.success(), "tenure status with --store-opt: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("tls/job"), "{}", text(&out.stdout));
    // A plaintext client is told what to do, at once.
    let started = Instant::now();
    let out = run(tenure().args(["status", &format!("tenure://{}", server.addr)]), LIMIT);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("speaks TLS only") && text(&out.stderr).contains("tls=true"),
        "{}",
        text(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    // A client that does not trust the CA is told to give it.
    let out = run(tenure().args(["status", &server.url]), LIMIT);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("ca_file=PATH"), "{}", text(&out.stderr));
    // The HTTP port speaks TLS.
    let http = server.http.clone().expect("an HTTP port");
    let (status, body) = https_get(&pki, &http, "/healthz").await;
    assert!(status.starts_with("HTTP/1.1 200") && body.trim() == "ok", "{status} {body}");
    let (status, body) = https_get(&pki, &http, "/status.json").await;
    assert!(status.starts_with("HTTP/1.1 200") && body.contains("tls/job"), "{status} {body}");
}

fn refused_at_start(args: &[&str]) -> String {
    let out = run(tenure().arg("serve").args(args), LIMIT);
    // Exit 64, a usage error: the flags or the files they name are the user's to fix.
    assert_eq!(out.status.code(), Some(64), "tenure serve {args:?}: {}", text(&out.stderr));
    text(&out.stderr)
}

#[test]
fn certificate_files_that_are_missing_or_do_not_fit_are_refused_at_start() {
    let pki = Pki::new();
    let other = Pki::new();
    let listen = ["--listen", "127.0.0.1:0"];
    let missing = pki.arg("missing.pem");
    let (cert, key, other_key) = (pki.arg("server.pem"), pki.arg("server.key"), other.arg("server.key"));
    let cases: [(&[&str], &[&str]); 5] = [
        (&["--tls-cert", &missing, "--tls-key", &key], &["TLS certificate file", "missing.pem", "no such file"]),
        (&["--tls-cert", &key, "--tls-key", &key], &["TLS certificate file", "no certificate"]),
        (&["--tls-cert", &cert, "--tls-key", &cert], &["TLS key file", "no private key"]),
        (&["--tls-cert", &cert, "--tls-key", &other_key], &["does not match the certificate"]),
        (&["--tls-cert", &cert], &["--tls-key"]),
    ];
    for (args, says) in cases {
        let err = refused_at_start(&[&listen[..], args].concat());
        for s in says {
            assert!(err.contains(s), "{args:?}: {err}");
        }
    }
}

#[test]
fn the_auth_token_travels_only_over_tls_or_within_the_machine() {
    let pki = Pki::new();
    let token = pki.path("token");
    std::fs::write(&token, "s3cret\n").expect("write");
    let token = token.display().to_string();
    // Refused before it binds anything.
    let err = refused_at_start(&["--listen", "0.0.0.0:0", "--auth-token-file", &token]);
    assert!(
        err.contains("--auth-token-file without TLS")
            && err.contains("--tls-cert")
            && err.contains("--allow-plaintext-auth"),
        "{err}"
    );
    // On loopback the token does not leave the machine: the server starts, and
    // a client with the token is served.
    let server = serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s", "--auth-token-file", &token]);
    let url = format!("tenure://{}?auth_token=s3cret", server.addr);
    let out = run(tenure().args(["lock", &url, "token/job", "--ttl", "2s", "--timeout", "30s", "--", "true"]), LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A client does not send its token in plaintext off the machine (TEST-NET-1:
    // refused before any packet is sent).
    let started = Instant::now();
    let out = run(tenure().args(["lock", "tenure://192.0.2.1:7777?auth_token=s3cret", "x", "--", "true"]), LIMIT);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("refusing to send the auth token in plaintext") && err.contains("allow_plaintext_auth=true"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}
