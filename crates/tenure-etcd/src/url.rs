//! `etcd://host:port[,host:port…]/prefix[?key=value&…]`, parsed with errors that
//! say what is wrong and how to write it instead.
//!
//! - Endpoints: one or more `host:port`, comma-separated; the port defaults to
//!   2379; IPv6 hosts are bracketed (`[::1]:2379`). They are members of one
//!   cluster: the client balances requests over them and fails over between them.
//! - Prefix: the key prefix every lease lives under, validated like a lease name
//!   (so it can never be empty, contain `..` or escape into another prefix).
//! - Settings, from the URL's query or from `--store-opt key=value` (the latter
//!   win): see [`Settings`].
//!
//! Credentials are never taken from the URL itself (URLs end up in logs and
//! process lists): `user=` names the etcd user and the password comes from
//! `password=` or, better, the `TENURE_ETCD_PASSWORD` environment variable.
//! TLS is not supported by this build (see the crate docs).

use std::collections::BTreeMap;
use std::time::Duration;

use tenure::{Error, LeaseName, Result};

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
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("user", &self.credentials.as_ref().map(|(u, _)| u))
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self { credentials: None, request_timeout: Duration::from_secs(5), connect_timeout: Duration::from_secs(3) }
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

const KNOWN: &str = "user, password, timeout, connect_timeout";

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
        // The reason is redacted too (it may quote the URL); tenure's own
        // wording never says "password=", or the redaction would eat it.
        let invalid = |reason: String| Error::InvalidStore { url: redacted(url), reason: redacted(&reason) };
        let rest = url.strip_prefix("etcd://").ok_or_else(|| {
            invalid("expected etcd://host:port[,host:port…]/prefix, e.g. etcd://127.0.0.1:2379/locks".into())
        })?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.contains('@') {
            return Err(invalid(format!(
                "credentials in the URL are not supported (they would show in logs); \
                 use --store-opt user=NAME and the {PASSWORD_ENV} environment variable"
            )));
        }
        if authority.is_empty() {
            return Err(invalid("no endpoint: expected etcd://host:port[,host:port…]/prefix".into()));
        }
        let endpoints = authority
            .split(',')
            .enumerate()
            .map(|(i, e)| endpoint(e).map_err(|why| invalid(format!("endpoint {} ({e:?}): {why}", i + 1))))
            .collect::<Result<Vec<_>>>()?;

        let prefix = path.trim_end_matches('/');
        if prefix.is_empty() {
            return Err(invalid(
                "no key prefix: leases need a prefix of their own, e.g. etcd://127.0.0.1:2379/locks".into(),
            ));
        }
        if let Err(Error::InvalidName { reason, .. }) = LeaseName::new(prefix) {
            return Err(invalid(format!("key prefix {prefix:?} {reason}")));
        }

        let mut merged = BTreeMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| invalid(format!("option {pair:?} is not key=value")))?;
            merged.insert(k.to_string(), v.to_string());
        }
        merged.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
        let settings = settings(&merged, env).map_err(invalid)?;
        Ok(Self { endpoints, prefix: prefix.to_string(), settings })
    }

    /// The endpoints as `host:port`, for messages.
    pub fn endpoints_display(&self) -> String {
        self.endpoints.iter().map(|e| e.trim_start_matches("http://")).collect::<Vec<_>>().join(",")
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

/// `host[:port]` → `http://host:port`.
fn endpoint(e: &str) -> std::result::Result<String, String> {
    if e.is_empty() {
        return Err("is empty (a doubled or trailing ',')".into());
    }
    let (host, port) = if let Some(v6) = e.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("has '[' without a closing ']'")?;
        if host.is_empty() || !host.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
            return Err(format!("{host:?} is not an IPv6 address"));
        }
        match after {
            "" => (format!("[{host}]"), None),
            p => (format!("[{host}]"), Some(p.strip_prefix(':').ok_or("expected ':port' after ']'")?)),
        }
    } else if e.matches(':').count() > 1 {
        return Err("looks like an IPv6 address: those go in brackets, as in [::1]:2379".into());
    } else {
        let (host, port) = match e.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (e, None),
        };
        if host.is_empty() {
            return Err("has no host".into());
        }
        if let Some(c) = host.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))) {
            return Err(format!("host {host:?} contains {c:?} (IPv6 addresses go in brackets: [::1]:2379)"));
        }
        (host.to_string(), port)
    };
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(format!("port {p:?} is not a number from 1 to 65535")),
            Ok(p) => p,
        },
    };
    Ok(format!("http://{host}:{port}"))
}

fn settings(
    params: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> std::result::Result<Settings, String> {
    let mut s = Settings::default();
    let mut user = None;
    let mut password = None;
    for (k, v) in params {
        match k.as_str() {
            "user" if !v.is_empty() => user = Some(v.clone()),
            "password" => password = Some(v.clone()),
            "timeout" => s.request_timeout = duration(k, v)?,
            "connect_timeout" => s.connect_timeout = duration(k, v)?,
            "user" => return Err("user= is empty".into()),
            other => return Err(format!("unknown option {other:?} (known: {KNOWN})")),
        }
    }
    s.credentials = match (user, password) {
        (None, None) => None,
        (None, Some(_)) => return Err("a password is given without user=: add user=NAME".into()),
        (Some(u), Some(p)) => Some((u, p)),
        (Some(u), None) => match env(PASSWORD_ENV) {
            Some(p) => Some((u, p)),
            None => return Err(format!("user={u} needs a password: set {PASSWORD_ENV} (or the password option)")),
        },
    };
    Ok(s)
}

fn duration(key: &str, v: &str) -> std::result::Result<Duration, String> {
    match humantime::parse_duration(v) {
        Ok(d) if !d.is_zero() && d <= Duration::from_secs(3600) => Ok(d),
        Ok(_) => Err(format!("{key}={v} must be more than zero and at most 1h")),
        Err(e) => Err(format!("{key}={v} is not a duration such as 500ms or 5s ({e})")),
    }
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
                assert_eq!(u, redacted(url), "the error names the URL as given, without a password");
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
            ("etcd://127.0.0.1:2379/../etc", "starts with '.'"),
            ("etcd://127.0.0.1:2379/a//b", "empty segment"),
            ("etcd://127.0.0.1:notaport/locks", "port \"notaport\""),
            ("etcd://127.0.0.1:0/locks", "port \"0\""),
            ("etcd://127.0.0.1:70000/locks", "port \"70000\""),
            ("etcd://127.0.0.1:2379,,127.0.0.2/locks", "endpoint 2"),
            ("etcd://:2379/locks", "has no host"),
            ("etcd://::1:2379/locks", "in brackets"),
            ("etcd://[::1/locks", "closing ']'"),
            ("etcd://[zz]:1/locks", "not an IPv6"),
            ("etcd://root:secret@127.0.0.1:2379/locks", "credentials in the URL"),
            ("etcd://h/locks?timeout=fast", "not a duration"),
            ("etcd://h/locks?timeout=0s", "more than zero"),
            ("etcd://h/locks?tls=on", "unknown option \"tls\""),
            ("etcd://h/locks?user", "not key=value"),
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
        let u = EtcdUrl::parse_with_env("etcd://h:1/p?timeout=9s&user=alice&connect_timeout=1s", &params, env)
            .expect("valid");
        assert_eq!(u.settings.request_timeout, Duration::from_millis(250));
        assert_eq!(u.settings.connect_timeout, Duration::from_secs(1));
        assert_eq!(u.settings.credentials, Some(("alice".into(), "s3cret".into())));
        assert!(!format!("{u:?}").contains("s3cret"), "the password never shows in debug output");
    }
}
