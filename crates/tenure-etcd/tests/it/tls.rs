//! `etcd://…?tls=true` against real etcd members started here with
//! certificates from a CA made at test time: a private CA, client certificates
//! (`--client-cert-auth`), passwords over TLS with a token that expires, and
//! the clear errors for an untrusted certificate, a name that does not match
//! and a plaintext client. Runs where the etcd test servers run
//! (`TENURE_TEST_ETCD`), since their `etcd` binary is what it starts.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use tenure_conformance::server_from_env;
use tenure_core::{Client, Error, LeaseOptions, OpenOptions};

use common::{Member, open_options};

/// A CA and the files it signed, in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA, a server certificate for `localhost` and 127.0.0.1, and a client
    /// certificate for user `root`.
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        ca.distinguished_name.push(DnType::CommonName, "tenure test CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("CA key")).expect("CA");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write CA");
        let issue = |name: &str, sans: Vec<String>, usage: ExtendedKeyUsagePurpose| {
            let mut params = CertificateParams::new(sans).expect("params");
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, &ca).expect("sign");
            std::fs::write(dir.path().join(format!("{name}.pem")), cert.pem()).expect("write cert");
            std::fs::write(dir.path().join(format!("{name}.key")), key.serialize_pem()).expect("write key");
        };
        issue("server", vec!["localhost".into(), "127.0.0.1".into()], ExtendedKeyUsagePurpose::ServerAuth);
        issue("root", Vec::new(), ExtendedKeyUsagePurpose::ClientAuth);
        Self { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }
}

/// One etcd member speaking TLS on its client port, with the PKI's server
/// certificate; `extra` flags as given.
fn start_tls(pki: &Pki, extra: &[&str]) -> Member {
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
    let mut args = vec!["--cert-file", &cert, "--key-file", &key];
    args.extend_from_slice(extra);
    Member::start("https", &args)
}

fn url(member: &Member, host: &str, query: &str) -> String {
    format!("etcd://{host}:{}/tls-test?{query}", member.port)
}

fn with(params: &[(&str, &Path)]) -> OpenOptions {
    let mut opts = open_options();
    opts.params = params.iter().map(|(k, v)| (k.to_string(), v.to_string_lossy().into_owned())).collect();
    opts
}

async fn open(url: &str, opts: &OpenOptions) -> tenure_core::Result<std::sync::Arc<dyn tenure_core::LeaseStore>> {
    common::open(url, opts).await
}

/// Acquires, checks the token, releases: the store works end to end.
async fn round_trip(store: std::sync::Arc<dyn tenure_core::LeaseStore>) {
    let client = Client::new(store);
    let lease = client.try_acquire("over-tls", &LeaseOptions::default()).await.expect("acquire over TLS");
    assert!(lease.token() > 0);
    lease.release().await.expect("release over TLS");
}

fn needs_etcd() -> bool {
    server_from_env("TENURE_TEST_ETCD").is_some()
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_over_tls_with_a_private_ca_and_clear_errors_for_untrusted_or_plaintext() {
    if !needs_etcd() {
        return;
    }
    let (pki, stranger) = (Pki::new(), Pki::new());
    let etcd = start_tls(&pki, &[]);
    let ca = pki.path("ca.pem");

    let store = open(&url(&etcd, "127.0.0.1", "tls=true"), &with(&[("ca_file", &ca)])).await.expect("open over TLS");
    round_trip(store).await;
    // The name in the certificate is checked: localhost is in it, and server_name overrides the host.
    open(&url(&etcd, "localhost", "tls=true"), &with(&[("ca_file", &ca)])).await.expect("by name");
    let mut by_server_name = with(&[("ca_file", &ca)]);
    by_server_name.params.insert("server_name".into(), "localhost".into());
    open(&url(&etcd, "127.0.0.1", "tls=true"), &by_server_name)
        .await
        .expect("server_name names the certificate's host");

    let started = Instant::now();
    let untrusted = open(&url(&etcd, "127.0.0.1", "tls=true"), &with(&[("ca_file", &stranger.path("ca.pem"))]))
        .await
        .expect_err("a certificate from another CA");
    let text = untrusted.to_string();
    assert!(matches!(untrusted, Error::InvalidStore { .. }), "a setting to fix, not an outage: {untrusted:?}");
    assert!(text.contains("127.0.0.1") && text.contains("certificate") && text.contains("ca_file="), "{text}");

    let mut wrong_name = with(&[("ca_file", &ca)]);
    wrong_name.params.insert("server_name".into(), "etcd.example".into());
    let e = open(&url(&etcd, "127.0.0.1", "tls=true"), &wrong_name).await.expect_err("a name not in the certificate");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");

    let e = open(&url(&etcd, "127.0.0.1", "timeout=2s"), &open_options()).await.expect_err("plaintext to a TLS port");
    assert!(e.to_string().contains("127.0.0.1") && e.to_string().contains("add tls=true"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(30), "the refusals took {:?}", started.elapsed());

    // And TLS to a member that speaks plain HTTP (the test servers' etcd).
    let plain = server_from_env("TENURE_TEST_ETCD").expect("checked above");
    let url = format!("etcd://{}/tls-test?tls=true&timeout=2s", plain.trim_start_matches("http://"));
    let e = open(&url, &with(&[("ca_file", &ca)])).await.expect_err("TLS to a plaintext port");
    assert!(e.to_string().contains("drop tls=true"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn client_certificates_are_presented_when_etcd_asks_for_them() {
    if !needs_etcd() {
        return;
    }
    let pki = Pki::new();
    let ca = pki.path("ca.pem");
    let trusted_ca = ca.to_string_lossy().into_owned();
    let etcd = start_tls(&pki, &["--client-cert-auth", "--trusted-ca-file", &trusted_ca]);
    let url = url(&etcd, "127.0.0.1", "tls=true&timeout=3s");

    let e = open(&url, &with(&[("ca_file", &ca)])).await.expect_err("no client certificate");
    assert!(e.to_string().contains("127.0.0.1") && e.to_string().contains("cert_file="), "{e}");

    let (cert, key) = (pki.path("root.pem"), pki.path("root.key"));
    let store = open(&url, &with(&[("ca_file", &ca), ("cert_file", &cert), ("key_file", &key)]))
        .await
        .expect("open with a client certificate");
    round_trip(store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn passwords_go_over_tls_and_an_expired_token_is_renewed() {
    if !needs_etcd() {
        return;
    }
    let pki = Pki::new();
    let ca = pki.path("ca.pem");
    // etcd's simple tokens expire after --auth-token-ttl seconds unused.
    let etcd = start_tls(&pki, &["--auth-token-ttl", "1"]);
    let endpoint = format!("https://127.0.0.1:{}", etcd.port);
    let etcdctl = |args: &[&str]| {
        let out = Command::new("etcdctl")
            .args(["--endpoints", &endpoint, "--cacert"])
            .arg(&ca)
            .arg("--command-timeout=5s")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .expect("run etcdctl");
        assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    etcdctl(&["user", "add", "root:pw"]);
    etcdctl(&["auth", "enable"]);

    let url = url(&etcd, "127.0.0.1", "tls=true&user=root");
    let mut opts = with(&[("ca_file", &ca)]);
    opts.params.insert("password".into(), "pw".into());
    let store = open(&url, &opts).await.expect("open with a password over TLS");
    let client = Client::new(store);
    let lease = client.try_acquire("auth", &LeaseOptions::default()).await.expect("acquire");
    // Unused for longer than the token's TTL: the next request re-authenticates.
    tokio::time::sleep(Duration::from_secs(3)).await;
    lease.release().await.expect("release with a renewed token");

    opts.params.insert("password".into(), "wrong".into());
    match open(&url, &opts).await {
        Err(Error::InvalidStore { reason, .. }) => assert!(reason.contains("etcd refused"), "{reason}"),
        other => panic!("a wrong password must be refused as a configuration error: {other:?}"),
    }
}
