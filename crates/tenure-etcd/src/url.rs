//! `etcd://host:port[,host:port…]/prefix[?key=value&…]`, parsed with errors that
//! say what is wrong and how to write it instead.
//!
//! - Endpoints: one or more `host:port`, comma-separated; the port defaults to
//!   2379; IPv6 hosts are bracketed (`[::1]:2379`). They are members of one
//!   cluster: the client balances requests over them and fails over between them.
//! - Prefix: the key prefix every lease lives under, validated like a lease name
//!   (so it can never be empty, contain `..` or escape into another prefix).
//! - Settings, from the URL's query or from `--store-opt key=value` (the latter
//!   win): see [`Settings`], read in the one spelling every store uses (see
//!   [`tenure_core::store_url`]):
//!
//! | setting | spelling | default |
//! |---|---|---|
//! | `timeout`, `connect_timeout` | a duration with a unit, 1ms to 1h: `timeout=5s` | `5s`, `3s` |
//! | `tls`, `allow_plaintext_auth` | `true` or `false` | `false` |
//! | `ca_file`, `cert_file`, `key_file` | a path | — |
//! | `user`, `password`, `server_name` | text | — |
//!
//! `timeout_ms=500` is refused with `timeout=500ms`, a bare `timeout=5` with
//! the units to write, and a flag written `1`, `yes` or `on` with `true`.
//!
//! Credentials are never taken from the URL itself (URLs end up in logs and
//! process lists): `user=` names the etcd user and the password comes from
//! `password=` or, better, the `TENURE_ETCD_PASSWORD` environment variable.
//! A password is sent only over TLS, or to loopback addresses (written as
//! addresses: `127.0.0.1`, `[::1]`), unless `allow_plaintext_auth=true`.
//!
//! TLS: `tls=true` speaks TLS to every endpoint, trusting the platform's roots
//! or the CA certificates in `ca_file=PATH`; `cert_file=` and `key_file=` give
//! a client certificate (etcd's `--client-cert-auth`); `server_name=` is the
//! name checked in the server's certificate when it is not the endpoint's host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure_core::{Error, LeaseName, Result, StoreUrl};

/// The port etcd clients use when none is given.
pub const DEFAULT_PORT: u16 = 2379;
/// Environment variable the etcd password is read from when `user` is set and
/// `password` is not.
pub const PASSWORD_ENV: &str = "TENURE_ETCD_PASSWORD";

/// How to reach etcd and behave there, besides the endpoints and prefix.
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    /// etcd user and password (`user=`, `password=` or `TENURE_ETCD_PASSWORD`).
    pub credentials: Option<(String, String)>,
    /// Longest wait for any one etcd request (`timeout=`, default 5s).
    pub request_timeout: Duration,
    /// Longest wait for a connection to an endpoint (`connect_timeout=`, default 3s).
    pub connect_timeout: Duration,
    /// TLS to every endpoint (`tls=true` and the files it uses).
    pub tls: Option<Tls>,
}

/// What `tls=true` uses: file names, read when connecting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// CA certificates (PEM) to trust instead of the platform's roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate chain (PEM) and its key.
    pub client: Option<(PathBuf, PathBuf)>,
    /// The name to check in the server's certificate.
    pub server_name: Option<String>,
}

/// The most a certificate or key file may hold.
const MAX_PEM_BYTES: u64 = 1 << 20;

impl Tls {
    /// Reads the files, size-capped, without following a FIFO or device.
    ///
    /// # Errors
    /// Which file cannot be read, and why.
    pub fn read(&self) -> std::result::Result<crate::rpc::TlsFiles, String> {
        let ca = self.ca_file.as_deref().map(|p| pem("ca_file", p)).transpose()?;
        let identity = match &self.client {
            Some((cert, key)) => Some((pem("cert_file", cert)?, pem("key_file", key)?)),
            None => None,
        };
        Ok(crate::rpc::TlsFiles { ca, identity, server_name: self.server_name.clone() })
    }
}

fn pem(key: &str, path: &Path) -> std::result::Result<Vec<u8>, String> {
    let out = tenure_core::limits::read_small_file(path, MAX_PEM_BYTES).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => format!("{key}={}: not a regular file", path.display()),
        std::io::ErrorKind::InvalidData => {
            format!("{key}={}: larger than 1 MiB, which no certificate or key is", path.display())
        }
        _ => format!("{key}={}: cannot read it: {e}", path.display()),
    })?;
    if !out.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(format!("{key}={}: not PEM (no -----BEGIN line)", path.display()));
    }
    Ok(out)
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("user", &self.credentials.as_ref().map(|(u, _)| u))
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            credentials: None,
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            tls: None,
        }
    }
}

/// A parsed `etcd://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdUrl {
    /// `http://host:port` of each endpoint, in the order given.
    pub endpoints: Vec<String>,
    /// The key prefix, without a trailing `/`.
    pub prefix: String,
    /// Everything else.
    pub settings: Settings,
}

impl EtcdUrl {
    /// Parses `url`, with `params` (from `--store-opt`) overriding its query.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] naming the URL and what is wrong with it.
    pub fn parse(url: &str, params: &BTreeMap<String, String>) -> Result<Self> {
        Self::parse_with_env(url, params, |v| std::env::var(v).ok())
    }

    fn parse_with_env(
        url: &str,
        params: &BTreeMap<String, String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        Self::from_url_with_env(&StoreUrl::parse(url, params)?, env)
    }

    /// The endpoints, prefix and settings of a parsed `etcd://` URL.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] naming the URL and what is wrong with it.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        Self::from_url_with_env(url, |v| std::env::var(v).ok())
    }

    fn from_url_with_env(url: &StoreUrl, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        // The reason is redacted too: tenure's own wording never says
        // "password=", so the redaction cannot eat it.
        let invalid = |reason: String| url.invalid(redacted(&reason));
        if url.scheme() != "etcd" {
            return Err(invalid(
                "expected etcd://host:port[,host:port…]/prefix, e.g. etcd://127.0.0.1:2379/locks".into(),
            ));
        }
        if url.user().is_some() {
            return Err(invalid(format!(
                "credentials in the URL are not supported (they would show in logs); \
                 use --store-opt user=NAME and the {PASSWORD_ENV} environment variable"
            )));
        }
        if url.hosts().is_empty() {
            return Err(invalid("no endpoint: expected etcd://host:port[,host:port…]/prefix".into()));
        }
        let hosts: Vec<(String, u16)> =
            url.hosts().iter().map(|h| (h.host.clone(), h.port.unwrap_or(DEFAULT_PORT))).collect();
        if let Some(twice) = hosts.iter().enumerate().find(|(i, h)| hosts[..*i].contains(h)) {
            return Err(invalid(format!("endpoint {}:{} is listed twice", twice.1.0, twice.1.1)));
        }

        let path = url.path_str("key prefix")?;
        let prefix = path.strip_prefix('/').unwrap_or(path).trim_end_matches('/');
        if prefix.is_empty() {
            return Err(invalid(
                "no key prefix: leases need a prefix of their own, e.g. etcd://127.0.0.1:2379/locks".into(),
            ));
        }
        if let Err(Error::InvalidName { reason, .. }) = LeaseName::new(prefix) {
            return Err(invalid(format!("key prefix {prefix:?} {reason}")));
        }

        let (settings, allow_plaintext_auth) = settings(url, env)?;
        let plaintext_password = settings.credentials.is_some() && settings.tls.is_none() && !allow_plaintext_auth;
        if plaintext_password && let Some((host, _)) = hosts.iter().find(|(host, _)| !is_loopback(host)) {
            return Err(invalid(format!(
                "a password would cross the network in plain text to {host}: use tls=true, \
                 or allow_plaintext_auth=true on a network you trust"
            )));
        }
        let scheme = if settings.tls.is_some() { "https" } else { "http" };
        let endpoints = hosts.iter().map(|(host, port)| format!("{scheme}://{host}:{port}")).collect();
        Ok(Self { endpoints, prefix: prefix.to_string(), settings })
    }

    /// The endpoints as `host:port`, for messages.
    pub fn endpoints_display(&self) -> String {
        let bare = |e: &str| e.split_once("://").map_or(e, |(_, rest)| rest).to_string();
        self.endpoints.iter().map(|e| bare(e)).collect::<Vec<_>>().join(",")
    }
}

/// `url` as it may be shown: with the value of any `password=` in its query
/// replaced by `***`.
pub fn redacted(url: &str) -> String {
    // Every `password=` value, wherever it is (after a second `?`, in a
    // malformed pair): a URL that fails to parse is shown in its error.
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(at) = rest.find("password=") {
        let (before, after) = rest.split_at(at + "password=".len());
        out.push_str(before);
        out.push_str("***");
        rest = after.find(['&', '?', '#']).map_or("", |end| &after[end..]);
    }
    out.push_str(rest);
    out
}

/// Whether `host` is a loopback address (127.0.0.0/8 or `::1`), written as
/// one: a name, even `localhost`, may resolve elsewhere.
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The range of `timeout=` and `connect_timeout=`.
const TIMEOUTS: std::ops::RangeInclusive<Duration> = Duration::from_millis(1)..=Duration::from_secs(3600);

/// The settings, and whether a password may travel in plain text.
fn settings(url: &StoreUrl, env: impl Fn(&str) -> Option<String>) -> Result<(Settings, bool)> {
    let invalid = |reason: String| url.invalid(redacted(&reason));
    let mut s = Settings::default();
    let non_empty = |key: &str| match url.string(key) {
        Some("") => Err(invalid(format!("{key}= is empty"))),
        v => Ok(v.map(str::to_string)),
    };
    url.retired("timeout_ms", |v| format!("timeout={v}ms"))?;
    let user = non_empty("user")?;
    let password = url.string("password").map(str::to_string);
    s.request_timeout = url.duration("timeout", TIMEOUTS)?.unwrap_or(s.request_timeout);
    s.connect_timeout = url.duration("connect_timeout", TIMEOUTS)?.unwrap_or(s.connect_timeout);
    let tls = url.flag("tls")?.unwrap_or(false);
    let ca_file = url.path_option("ca_file")?;
    let cert_file = url.path_option("cert_file")?;
    let key_file = url.path_option("key_file")?;
    let server_name = non_empty("server_name")?;
    let allow_plaintext_auth = url.flag("allow_plaintext_auth")?.unwrap_or(false);
    url.finish()?;
    let client = match (cert_file, key_file) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err(invalid("cert_file= and key_file= go together: give both, or neither".into())),
    };
    let tls_options = ca_file.is_some() || client.is_some() || server_name.is_some();
    if tls_options && !tls {
        return Err(invalid("ca_file, cert_file, key_file and server_name are TLS options: add tls=true".into()));
    }
    s.tls = tls.then_some(Tls { ca_file, client, server_name });
    s.credentials = match (user, password) {
        (None, None) => None,
        (None, Some(_)) => return Err(invalid("a password is given without user=: add user=NAME".into())),
        (Some(u), Some(p)) => Some((u, p)),
        (Some(u), None) => match env(PASSWORD_ENV) {
            Some(p) => Some((u, p)),
            None => {
                return Err(invalid(format!("user={u} needs a password: set {PASSWORD_ENV} (or the password option)")));
            }
        },
    };
    Ok((s, allow_plaintext_auth))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<EtcdUrl> {
        EtcdUrl::parse_with_env(url, &BTreeMap::new(), |_| None)
    }

    fn reason(url: &str) -> String {
        match parse(url) {
            Err(Error::InvalidStore { url: u, reason }) => {
                assert!(!u.contains('?') && !u.contains("secret"), "{u}: the error names the URL without secrets");
                reason
            }
            other => panic!("{url}: expected InvalidStore, got {other:?}"),
        }
    }

    #[test]
    fn endpoints_and_prefix_are_parsed_with_default_port() {
        let u = parse("etcd://127.0.0.1:2379,etcd-2,[::1]:23791/locks/prod/").expect("valid");
        assert_eq!(u.endpoints, ["http://127.0.0.1:2379", "http://etcd-2:2379", "http://[::1]:23791"]);
        assert_eq!(u.prefix, "locks/prod");
        assert_eq!(u.settings, Settings::default());
        assert_eq!(u.endpoints_display(), "127.0.0.1:2379,etcd-2:2379,[::1]:23791");
    }

    #[test]
    fn malformed_urls_are_refused_with_the_reason() {
        let cases = [
            ("http://127.0.0.1:2379/locks", "expected etcd://"),
            ("etcd:///locks", "no endpoint"),
            ("etcd://127.0.0.1:2379", "no key prefix"),
            ("etcd://127.0.0.1:2379/", "no key prefix"),
            ("etcd://127.0.0.1:2379/../etc", "'..' segment"),
            ("etcd://127.0.0.1:2379/.hidden", "starts with '.'"),
            ("etcd://127.0.0.1:2379/a//b", "empty segment"),
            ("etcd://127.0.0.1:notaport/locks", "port \"notaport\""),
            ("etcd://127.0.0.1:0/locks", "port \"0\""),
            ("etcd://127.0.0.1:70000/locks", "port \"70000\""),
            ("etcd://127.0.0.1:2379,,127.0.0.2/locks", "host 2"),
            ("etcd://127.0.0.1:2379,127.0.0.1/locks", "listed twice"),
            ("etcd://h/a%2F%2Fb", "empty segment"),
            ("etcd://h//locks", "empty segment"),
            ("etcd://:2379/locks", "has no host"),
            ("etcd://::1:2379/locks", "in brackets"),
            ("etcd://[::1/locks", "closing ']'"),
            ("etcd://[zz]:1/locks", "not an IPv6"),
            ("etcd://root:secret@127.0.0.1:2379/locks", "credentials in the URL"),
            ("etcd://root@127.0.0.1:2379/locks", "credentials in the URL"),
            ("etcd://h/locks?timeout=fast", "not a duration"),
            ("etcd://h/locks?timeout=0s", "timeout=0s is out of range: from 1ms to 1h"),
            ("etcd://h/locks?connect_timeout=2h", "out of range: from 1ms to 1h"),
            ("etcd://h/locks?timeout=5", "timeout=5 has no unit: write timeout=5ms or timeout=5s"),
            ("etcd://h/locks?tls=maybe", "write tls=true or tls=false"),
            ("etcd://h/locks?tls=1", "tls=1 is not a flag: write tls=true or tls=false"),
            ("etcd://h/locks?tls=yes", "tls=yes is not a flag"),
            ("etcd://h/locks?allow_plaintext_auth=on", "allow_plaintext_auth=on is not a flag"),
            ("etcd://h/locks?timeout_ms=500", "timeout_ms=500 is no longer read: write timeout=500ms"),
            ("etcd://h/locks?tlsx=1", "unknown option \"tlsx\""),
            ("etcd://h/locks?ca_file=/ca.pem", "add tls=true"),
            ("etcd://h/locks?tls=true&cert_file=/c.pem", "go together"),
            ("etcd://h/locks?tls=true&ca_file=", "is empty"),
            ("etcd://db.example:2379/locks?user=u&password=p", "plain text to db.example"),
            ("etcd://h/locks?user", "not KEY=VALUE"),
            ("etcd://h/locks?password=x", "without user="),
            ("etcd://h/locks?user=alice", "TENURE_ETCD_PASSWORD"),
        ];
        for (url, want) in cases {
            let r = reason(url);
            assert!(r.contains(want), "{url}: reason {r:?} should mention {want:?}");
        }
    }

    #[test]
    fn passwords_in_a_query_never_show_in_messages() {
        assert_eq!(
            redacted("etcd://h/p?user=a&password=s3cret&timeout=1s"),
            "etcd://h/p?user=a&password=***&timeout=1s"
        );
        assert_eq!(redacted("etcd://h/p"), "etcd://h/p");
        assert_eq!(redacted("etcd://h:1/locks??password=s3cret-pass"), "etcd://h:1/locks??password=***");
        assert_eq!(redacted("etcd://h/p?user=a?password=x&t=1"), "etcd://h/p?user=a?password=***&t=1");
        match parse("etcd://h/p?password=s3cret") {
            Err(e) => assert!(!e.to_string().contains("s3cret"), "{e}"),
            Ok(u) => panic!("password without user must be refused: {u:?}"),
        }
    }

    #[test]
    fn store_options_override_the_query_and_the_password_comes_from_the_environment() {
        let params = BTreeMap::from([("timeout".to_string(), "250ms".to_string())]);
        let env = |v: &str| (v == PASSWORD_ENV).then(|| "s3cret".to_string());
        let u = EtcdUrl::parse_with_env(
            "etcd://h:1/p?timeout=9s&user=alice&connect_timeout=1s&allow_plaintext_auth=true",
            &params,
            env,
        )
        .expect("valid");
        assert_eq!(u.settings.request_timeout, Duration::from_millis(250));
        assert_eq!(u.settings.connect_timeout, Duration::from_secs(1));
        assert_eq!(u.settings.credentials, Some(("alice".into(), "s3cret".into())));
        assert!(!format!("{u:?}").contains("s3cret"), "the password never shows in debug output");
    }

    #[test]
    fn tls_speaks_https_to_every_endpoint_with_the_files_given() {
        let u = parse("etcd://a:1,b/p?tls=true&ca_file=/ca.pem&cert_file=/c.pem&key_file=/k.pem&server_name=etcd")
            .expect("valid");
        assert_eq!(u.endpoints, ["https://a:1", "https://b:2379"]);
        assert_eq!(u.endpoints_display(), "a:1,b:2379");
        let tls = u.settings.tls.expect("tls");
        assert_eq!(tls.ca_file.as_deref(), Some(Path::new("/ca.pem")));
        assert_eq!(tls.client, Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem"))));
        assert_eq!(tls.server_name.as_deref(), Some("etcd"));
        assert_eq!(parse("etcd://a/p?tls=false").expect("valid").settings.tls, None);
    }

    #[test]
    fn a_password_crosses_the_network_only_over_tls_unless_allowed() {
        let env = |v: &str| (v == PASSWORD_ENV).then(|| "pw".to_string());
        let none = BTreeMap::new();
        let ok = |url: &str| EtcdUrl::parse_with_env(url, &none, env).map(|u| u.settings.credentials.is_some());
        assert_eq!(ok("etcd://127.0.0.1,127.0.0.2,[::1]/p?user=u").ok(), Some(true), "this machine");
        assert!(ok("etcd://localhost/p?user=u").is_err(), "a name may resolve elsewhere");
        assert_eq!(ok("etcd://db:2379/p?user=u&tls=true").ok(), Some(true), "over TLS");
        assert_eq!(ok("etcd://db:2379/p?user=u&allow_plaintext_auth=true").ok(), Some(true), "allowed");
        let refused = ok("etcd://127.0.0.1,db/p?user=u").expect_err("one endpoint elsewhere");
        assert!(refused.to_string().contains("plain text to db"), "{refused}");
    }

    #[test]
    fn certificate_files_are_read_capped_and_must_be_pem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (good, text, big) = (dir.path().join("ca.pem"), dir.path().join("ca.txt"), dir.path().join("big.pem"));
        std::fs::write(&good, "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n").expect("write");
        std::fs::write(&text, "not a certificate").expect("write");
        std::fs::write(&big, vec![b'-'; (MAX_PEM_BYTES + 1) as usize]).expect("write");
        let read = |p: &Path| Tls { ca_file: Some(p.to_path_buf()), ..Tls::default() }.read().map(|f| f.ca);
        assert!(read(&good).expect("PEM").is_some());
        for (path, want) in
            [(&text, "not PEM"), (&big, "larger than 1 MiB"), (&dir.path().to_path_buf(), "not a regular file")]
        {
            let e = read(path).expect_err("refused");
            assert!(e.contains("ca_file=") && e.contains(want), "{e}");
        }
        let e = read(&dir.path().join("missing.pem")).expect_err("refused");
        assert!(e.contains("cannot read it"), "{e}");
    }
}
