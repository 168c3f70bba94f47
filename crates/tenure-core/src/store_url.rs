//! Store URLs, parsed once for every store.
//!
//! A store is named by a URL (`s3://bucket/locks?aws_region=eu-west-1`,
//! `etcd://h1:2379,h2:2379/locks`, `tenure://host:7433`) or by a plain path
//! (`/var/lib/locks`, a directory). [`StoreUrl::parse`] reads any of them with
//! the `url` crate, under the same rules for every scheme:
//!
//! - **Settings** come from the URL's query and from the options given apart
//!   from it (the CLI's `--store-opt KEY=VALUE`, [`crate::OpenOptions::params`]).
//!   **Options given apart override the query**, key by key; a key given twice
//!   in the query takes its last value. A pair without `=` and an empty key
//!   are refused.
//! - **Percent-decoding:** `%XX` in the path, the query's keys and its values is
//!   decoded (`file:///srv/my%20locks`, `auth_token=a%26b`); `+` stays a plus
//!   sign (secrets are often base64). A plain path is taken as written.
//! - **Several hosts** are separated by commas (`etcd://a:2379,b:2379/locks`);
//!   each is parsed as the host of a URL of its own.
//! - A `#fragment` is refused: it is no part of a store; so are control
//!   characters and spaces at either end of a URL, which the url crate would
//!   drop silently.
//! - [`StoreUrl::display`] never shows the query or a password: they may hold
//!   secrets.
//!
//! Each store then takes what is particular to it from the parsed URL, and
//! refuses a setting it does not know with [`unknown_option`]'s words.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use percent_encoding::percent_decode_str;

use crate::error::{Error, Result};
use crate::open::unknown_option;

/// Longest store URL accepted, in bytes (with its query).
pub const MAX_URL_LEN: usize = 64 * 1024;

/// One host of a URL's authority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The host: a name, an IPv4 address, or an IPv6 address in brackets.
    pub host: String,
    /// The port, if one is written.
    pub port: Option<u16>,
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// A parsed store URL: its scheme, hosts, path and settings.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl {
    scheme: String,
    /// The URL without query (first host only), or `None` for a plain path.
    base: Option<url::Url>,
    hosts: Vec<Host>,
    user: Option<String>,
    path: PathBuf,
    options: BTreeMap<String, String>,
    display: String,
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Option values may be secrets: only their keys are shown.
        f.debug_struct("StoreUrl")
            .field("url", &self.display)
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl StoreUrl {
    /// Parses `text` (a URL or a plain path) with `params` overriding its
    /// query's settings.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] saying what is wrong; it shows neither the
    /// query nor a password.
    pub fn parse(text: &str, params: &BTreeMap<String, String>) -> Result<Self> {
        let shown = shown(text);
        let invalid = |reason: String| Error::InvalidStore { url: shown.clone(), reason };
        if text.len() > MAX_URL_LEN {
            return Err(invalid(format!("longer than {MAX_URL_LEN} bytes")));
        }
        if text.is_empty() {
            return Err(invalid("the store URL is empty".into()));
        }
        if text.contains('\0') {
            return Err(invalid("contains a NUL byte".into()));
        }
        let Some(scheme) = scheme(text) else { return Self::plain_path(text, params, invalid) };
        let scheme = scheme.to_ascii_lowercase();
        // The url crate drops tabs and newlines anywhere and spaces at the
        // ends: `file:///a\nb` would open `/ab`. Refused, not rewritten.
        if text.chars().any(char::is_control) || text.trim() != text {
            return Err(invalid("a URL may not hold control characters, nor start or end with a space".into()));
        }
        if text.contains('#') {
            return Err(invalid("a store URL has no #fragment (write %23 for a '#' in a name)".into()));
        }

        // The authority may list several hosts; the url crate reads one.
        let after = &text[scheme.len() + "://".len()..];
        let end = after.find(['/', '?']).unwrap_or(after.len());
        let (authority, rest) = after.split_at(end);
        let (user, hosts_text) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (Some(user), hosts),
            None => (None, authority),
        };
        // The url crate resolves `.` and `..` away (`etcd://h/a/../b` would be
        // prefix `b`): a store is named as written, or not at all.
        let path_text = rest.split('?').next().unwrap_or_default();
        // `file:` is special to the url crate, which reads `\` as `/` (and
        // would then resolve `..\..`): refused in every URL's path.
        if path_text.contains('\\') {
            return Err(invalid("the path contains '\\': write '/' (or %5C for a backslash in a name)".into()));
        }
        let dots = |seg: &str| matches!(decode(seg, "").unwrap_or_default().to_ascii_lowercase().as_str(), "." | "..");
        if path_text.split('/').any(dots) {
            return Err(invalid("the path has a '.' or '..' segment: write the path it means".into()));
        }
        // Each host is read as the host of a URL of its own; `scheme:///path`
        // has none.
        let mut hosts = Vec::new();
        if !(hosts_text.is_empty() && user.is_none()) {
            // No part of an authority that carries a password is quoted.
            let quote = |part: &str| if shown.contains(":***@") { String::new() } else { format!(" ({part:?})") };
            for (i, part) in hosts_text.split(',').enumerate() {
                let host =
                    host(&scheme, part).map_err(|why| invalid(format!("host {}{} {why}", i + 1, quote(part))))?;
                hosts.extend(host);
            }
        }
        let first = hosts_text.split(',').next().unwrap_or_default();
        let userinfo = user.map(|u| format!("{u}@")).unwrap_or_default();
        let mut base = url::Url::parse(&format!("{scheme}://{userinfo}{first}{rest}"))
            .map_err(|e| invalid(format!("not a URL: {e}")))?;

        let options = options(base.query(), params).map_err(invalid)?;
        let user = match base.username() {
            "" => None,
            u => Some(decode(u, "the user name").map_err(invalid)?),
        };
        // `file://` has no path: the url crate would make it `/`.
        let path_bytes: Vec<u8> =
            if path_text.is_empty() { Vec::new() } else { percent_decode_str(base.path()).collect() };
        if path_bytes.contains(&0) {
            return Err(invalid("the path contains a NUL byte (%00)".into()));
        }
        base.set_query(None);
        Ok(Self {
            scheme,
            base: Some(base),
            hosts,
            user,
            path: PathBuf::from(OsString::from_vec(path_bytes)),
            options,
            display: shown,
        })
    }

    /// A plain path: a directory, taken as written, with `params` only.
    fn plain_path(text: &str, params: &BTreeMap<String, String>, invalid: impl Fn(String) -> Error) -> Result<Self> {
        // `/tmp/a://b`, `9p://x`, ` s3://b` (a stray space): meant as a URL,
        // or a path that is one character from being read as a URL.
        if text.contains("://") {
            return Err(invalid(
                "not a URL (a scheme is a letter, then letters, digits, '+', '-' or '.', and nothing before it) \
                 and not a plain path either: a directory store's path may not contain '://'"
                    .into(),
            ));
        }
        // `./d?fsync=false` would otherwise become a directory with `?` in its
        // name, its settings silently ignored. Only the directory's own
        // settings are shown: another value may be a secret meant for another
        // store.
        if let Some((path, query)) = text.split_once('?') {
            let abs = std::path::absolute(path).unwrap_or_else(|_| PathBuf::from(path));
            let shown = |pair: &str| match pair.split_once('=') {
                Some((k @ ("fsync" | "io" | "timeout"), v)) => format!("{k}={v}"),
                _ => format!("{}=…", pair.split('=').next().unwrap_or(pair)),
            };
            let keys: Vec<String> = query.split('&').filter(|p| !p.is_empty()).map(shown).collect();
            return Err(invalid(format!(
                "a plain path takes no ?options: use file://{}?{} (or --store-opt KEY=VALUE)",
                abs.display(),
                keys.join("&")
            )));
        }
        Ok(Self {
            scheme: "file".into(),
            base: None,
            hosts: Vec::new(),
            user: None,
            path: PathBuf::from(text),
            options: options(None, params).map_err(invalid)?,
            display: text.into(),
        })
    }

    /// This URL with `params` over its settings, key by key: what a store's
    /// `open_url` reads, so that options given apart are never dropped
    /// whichever way the URL was parsed.
    pub fn with_params(&self, params: &BTreeMap<String, String>) -> Self {
        let mut out = self.clone();
        out.options.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }

    /// The scheme, lower-case; `file` for a plain path.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// Whether this is a plain path rather than a URL.
    pub fn is_plain_path(&self) -> bool {
        self.base.is_none()
    }

    /// The hosts of the authority, in the order written (none for a plain
    /// path or `file:///`).
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The user name before `@` in the authority, percent-decoded.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Whether the authority carries a password (`user:password@`).
    pub fn has_password(&self) -> bool {
        self.base.as_ref().is_some_and(|b| b.password().is_some())
    }

    /// The path, percent-decoded (a plain path as written).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The path as UTF-8, or an error naming `what` it is for.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] if the decoded path is not UTF-8.
    pub fn path_str(&self, what: &str) -> Result<&str> {
        self.path.to_str().ok_or_else(|| self.invalid(format!("the {what} is not UTF-8 once %-decoded")))
    }

    /// The URL without its query, as the `url` crate parsed it (first host
    /// only); `None` for a plain path. For stores that hand it to another
    /// library, such as `object_store`. It keeps a password written in it:
    /// never show it (show [`StoreUrl::display`]).
    pub fn base(&self) -> Option<&url::Url> {
        self.base.as_ref()
    }

    /// The settings: the query's, overridden by the options given apart.
    pub fn options(&self) -> &BTreeMap<String, String> {
        &self.options
    }

    /// The URL as it may be shown: without its query or a password.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// An [`Error::InvalidStore`] for this URL.
    pub fn invalid(&self, reason: impl Into<String>) -> Error {
        Error::InvalidStore { url: self.display.clone(), reason: reason.into() }
    }

    /// The error for a setting the store does not know (`known` lists those it
    /// does), in the words every store uses.
    pub fn unknown(&self, key: &str, known: &str) -> Error {
        self.invalid(unknown_option(key, known))
    }
}

/// The scheme of `text`, if it has one: letters, digits, `+`, `-` or `.`
/// starting with a letter, before `://` (`/tmp/a://b` has none).
pub fn scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

/// `text` as it may be shown: no query, no fragment, no password.
fn shown(text: &str) -> String {
    let Some(s) = scheme(text) else { return text.split('?').next().unwrap_or_default().into() };
    // The userinfo ends at the last '@' before the query, even when the
    // password holds a '/' or a '#' it should have encoded.
    let before_query = text.split('?').next().unwrap_or_default();
    let after = &before_query[s.len() + "://".len()..];
    if let Some((userinfo, rest)) = after.rsplit_once('@')
        && userinfo.contains(':')
    {
        let user = userinfo.split([':', '/', '#']).next().unwrap_or_default();
        let rest = rest.split('#').next().unwrap_or_default();
        return format!("{s}://{user}:***@{rest}");
    }
    before_query.split('#').next().unwrap_or_default().into()
}

/// One host of the authority, parsed by the url crate, with a reason that
/// says how to write it; `None` for the empty host of `file:///path`.
fn host(scheme: &str, part: &str) -> std::result::Result<Option<Host>, String> {
    if part.is_empty() {
        return Err("is empty (a doubled or trailing ',', or no host before '@')".into());
    }
    if part.starts_with('[') && !part.contains(']') {
        return Err("has '[' without a closing ']'".into());
    }
    if !part.starts_with('[') && part.matches(':').count() > 1 {
        return Err("looks like an IPv6 address: those go in brackets, as in [::1]:2379".into());
    }
    let port_text = || part.rsplit_once(':').map_or("", |(_, p)| p).to_string();
    if part.ends_with(':') {
        return Err("has ':' and no port after it".into());
    }
    let u = url::Url::parse(&format!("{scheme}://{part}/")).map_err(|e| match e {
        url::ParseError::InvalidPort => format!("port {:?} is not a number from 1 to 65535", port_text()),
        url::ParseError::InvalidIpv6Address => "is not an IPv6 address".into(),
        url::ParseError::EmptyHost => "has no host".into(),
        e => format!("is not host[:port] ({e})"),
    })?;
    if port_text().starts_with('0') && u.port().is_some() || u.port() == Some(0) {
        return Err(format!("port {:?} is not a number from 1 to 65535", port_text()));
    }
    let host = match u.host() {
        // `file://localhost/…` means this machine, as `file:///…` does.
        None => return Ok(None),
        Some(url::Host::Domain("")) => return Err("has no host".into()),
        Some(url::Host::Domain(d)) => {
            // `$`: Azure's own containers (`$web`, `$root`, `$logs`).
            if let Some(c) = d.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '$'))) {
                return Err(format!("{d:?} contains {c:?}: a host is letters, digits, '.', '-', '_' and '$'"));
            }
            d.to_string()
        }
        // As written, not normalised: the lease server's clients pick a
        // server by hashing its address text, which must not change.
        Some(_) => match u.port() {
            Some(_) => part.rsplit_once(':').map_or(part, |(h, _)| h).to_string(),
            None => part.to_string(),
        },
    };
    Ok(Some(Host { host, port: u.port() }))
}

fn decode(s: &str, what: &str) -> std::result::Result<String, String> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| format!("{what} is not UTF-8 once %-decoded"))
}

/// The query's settings, percent-decoded, then `params` over them.
fn options(
    query: Option<&str>,
    params: &BTreeMap<String, String>,
) -> std::result::Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (i, pair) in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()).enumerate() {
        let (k, v) = pair.split_once('=').ok_or_else(|| format!("setting {} of the query is not KEY=VALUE", i + 1))?;
        let key = decode(k, &format!("the key of setting {}", i + 1))?;
        let value = decode(v, &format!("the value of {key:?}"))?;
        if key.is_empty() {
            return Err(format!("setting {} of the query has no key", i + 1));
        }
        // Given twice, the last one counts: a script may append to a URL
        // to override what it holds.
        out.insert(key, value);
    }
    for (k, v) in params {
        if k.is_empty() {
            return Err("an option has an empty key".into());
        }
        out.insert(k.clone(), v.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> StoreUrl {
        StoreUrl::parse(text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn refused(text: &str) -> String {
        match StoreUrl::parse(text, &BTreeMap::new()) {
            Err(Error::InvalidStore { reason, .. }) => reason,
            other => panic!("{text}: expected InvalidStore, got {other:?}"),
        }
    }

    #[test]
    fn a_plain_path_is_a_directory_taken_as_written() {
        let u = parse("./locks%20x");
        assert_eq!((u.scheme(), u.is_plain_path()), ("file", true));
        assert_eq!(u.path(), std::path::Path::new("./locks%20x"));
        let why = refused("./d?fsync=false&password=hunter2");
        assert!(why.contains("a plain path takes no ?options") && why.contains("/d?fsync=false&password=…"), "{why}");
        assert!(!why.contains("hunter2"), "{why}");
    }

    #[test]
    fn paths_keys_and_values_are_percent_decoded_and_plus_stays_a_plus() {
        let u = parse("file:///srv/my%20locks?time%6Fut=5s&auth_token=a%26b+c%3D");
        assert_eq!(u.path(), std::path::Path::new("/srv/my locks"));
        assert_eq!(u.options().get("timeout").map(String::as_str), Some("5s"));
        assert_eq!(u.options().get("auth_token").map(String::as_str), Some("a&b+c="));
        let raw = parse("file:///srv/%FF");
        assert_eq!(raw.path().as_os_str().as_encoded_bytes(), b"/srv/\xff");
        assert!(raw.path_str("prefix").is_err());
    }

    #[test]
    fn options_given_apart_override_the_query_key_by_key() {
        let params = BTreeMap::from([("fsync".to_string(), "true".to_string())]);
        let u = StoreUrl::parse("file:///d?fsync=false&io=inline", &params).expect("parse");
        assert_eq!(u.options().get("fsync").map(String::as_str), Some("true"));
        assert_eq!(u.options().get("io").map(String::as_str), Some("inline"));
    }

    #[test]
    fn a_pair_without_equals_and_an_empty_key_are_refused_and_the_last_of_a_key_counts() {
        let u = parse("file:///d?fsync=true&fsync=false");
        assert_eq!(u.options().get("fsync").map(String::as_str), Some("false"));
        assert!(refused("file:///d?fsync").contains("not KEY=VALUE"));
        assert!(refused("file:///d?=1").contains("no key"));
        assert!(refused("file:///d?k=%FF").contains("not UTF-8"));
    }

    #[test]
    fn several_hosts_are_each_parsed_and_a_bad_one_is_named() {
        let u = parse("etcd://a:2379,[::1]:2380,b/locks/x");
        let hosts: Vec<String> = u.hosts().iter().map(ToString::to_string).collect();
        assert_eq!(hosts, ["a:2379", "[::1]:2380", "b"]);
        assert_eq!(u.path(), std::path::Path::new("/locks/x"));
        assert!(refused("etcd://a:1,,b:2/p").contains("host 2"));
        assert!(refused("etcd://a:1,b:99999/p").contains("host 2"));
        assert!(refused("tenure://a:99999").contains("port \"99999\" is not a number"));
        assert!(refused("tenure://a:07433").contains("port \"07433\""));
        assert!(refused("s3://a%20b/p").contains("a host is letters"));
    }

    #[test]
    fn secrets_are_never_shown() {
        let e = StoreUrl::parse("etcd://u:hunter2@h:1/p?password=hunter2&k", &BTreeMap::new()).expect_err("k");
        let shown = e.to_string();
        assert!(!shown.contains("hunter2"), "{shown}");
        let u = parse("s3://b/p?aws_secret_access_key=hunter2");
        assert!(!format!("{u} {u:?}").contains("hunter2"));
        let u = parse("etcd://u:hunter2@h:1/p");
        assert!(u.has_password() && !format!("{u} {u:?}").contains("hunter2"));
        // A password with a '/' or a '#' it should have encoded.
        for text in ["s3://AKIA:se/cret@bucket/p", "etcd://u:p#w@h/x", "tenure://u:a/b@h:1?x=1"] {
            let e = StoreUrl::parse(text, &BTreeMap::new()).map(|u| u.to_string()).unwrap_or_else(|e| e.to_string());
            assert!(!e.contains("cret") && !e.contains("p#w") && !e.contains("a/b"), "{text}: {e}");
        }
    }

    #[test]
    fn fragments_nul_bytes_and_absurd_lengths_are_refused() {
        assert!(refused("s3://b/p#x").contains("fragment"));
        assert!(refused("file:///a%00b").contains("NUL"));
        for dots in ["etcd://h/a/../b", "file:///srv/./x", "s3://b/%2E%2e/p", "etcd://h/.."] {
            assert!(refused(dots).contains("'..' segment"), "{dots}");
        }
        assert_eq!(parse("../locks").path(), std::path::Path::new("../locks"), "a plain path is as written");
        assert!(refused("file:///srv/locks\\..\\..\\etc").contains("'\\'"));
        assert!(refused("etcd://h:/locks").contains("no port"));
        assert!(refused("etcd://[::1]:/locks").contains("no port"));
        assert_eq!(parse("az://$web/locks").hosts()[0].host, "$web");
        for near in [" file:///a", "9p://x", "/tmp/a://b"] {
            assert!(refused(near).contains("may not contain '://'"), "{near:?}");
        }
        assert!(refused("/a\0b").contains("NUL"));
        assert!(refused(&format!("file:///{}", "a".repeat(MAX_URL_LEN))).contains("longer than"));
        assert!(refused("").contains("empty"));
        for bad in ["file:///a\nb", "file:///a\tb", "file:///a ", "etcd://h/p\r"] {
            assert!(refused(bad).contains("control characters"), "{bad:?}");
        }
        assert_eq!(parse("file://").path(), std::path::Path::new(""), "no path is not the root");
    }

    #[test]
    fn schemes_are_letters_before_colon_slash_slash_and_anything_else_is_a_path() {
        assert_eq!(scheme("s3://b/p"), Some("s3"));
        assert_eq!(scheme("/tmp/a://b"), None);
        assert_eq!(scheme("9p://x"), None);
        assert_eq!(parse("S3://b/p").scheme(), "s3");
    }
}
