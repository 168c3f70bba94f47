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
//! Each store then takes what is particular to it from the parsed URL with
//! the typed getters, so that one spelling works on every store:
//!
//! | getter | spelling | refused |
//! |---|---|---|
//! | [`StoreUrl::flag`] | `true`, `false` | `1`, `yes`, `on`… |
//! | [`StoreUrl::duration`] | a number with a unit: `500ms`, `30s`, `2m` | a bare number (`500`), a value out of the store's range |
//! | [`StoreUrl::count`] | a whole number: `4` | a value out of the store's range |
//! | [`StoreUrl::path_option`] | a path: `/etc/tenure/ca.pem` | an empty value |
//! | [`StoreUrl::string`] | any text | — |
//!
//! A spelling a store no longer reads is refused with the one to write
//! instead ([`StoreUrl::retired`]), and [`StoreUrl::finish`] refuses every
//! setting no getter asked for, listing those asked, in [`unknown_option`]'s
//! words.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::ops::RangeInclusive;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::Duration;

use parking_lot::Mutex;
use percent_encoding::percent_decode_str;

use crate::error::{Error, Result};

/// The one wording, on every store, for a setting the store does not know.
/// The value is never shown: a secret given under the wrong key must not reach
/// a terminal or a log.
pub fn unknown_option(key: &str, known: &str) -> String {
    format!("unknown option {key:?} (known: {known})")
}

/// `key=value` as an error may show it: a value longer than a flag, a
/// duration or a count would be is not shown (it may be a secret given under
/// the wrong key).
fn quoted(key: &str, value: &str) -> String {
    match value.chars().count() {
        0..=12 => format!("{key}={value}"),
        n => format!("{key}=… (a value of {n} characters, not shown)"),
    }
}

/// Reads `value` as a flag: `true` or `false`, and nothing else.
///
/// # Errors
/// The reason, naming `key` and `value`, for any other spelling.
pub fn parse_flag(key: &str, value: &str) -> std::result::Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("{} is not a flag: write {key}=true or {key}=false", quoted(key, value))),
    }
}

/// Reads `value` as a duration with a unit (`500ms`, `30s`, `2m`), within
/// `range`.
///
/// # Errors
/// The reason, naming `key`, `value` and the range: a bare number (write a
/// unit), text that is no duration, a duration out of range.
pub fn parse_duration(
    key: &str,
    value: &str,
    range: &RangeInclusive<Duration>,
) -> std::result::Result<Duration, String> {
    let shown = |d: &Duration| humantime::format_duration(*d).to_string();
    let allowed = format!("from {} to {}", shown(range.start()), shown(range.end()));
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("{key}={value} has no unit: write {key}={value}ms or {key}={value}s ({allowed})"));
    }
    let d = humantime::parse_duration(value).map_err(|_| {
        format!("{} is not a duration: write a number with a unit, such as 500ms or 30s", quoted(key, value))
    })?;
    if !range.contains(&d) {
        return Err(format!("{} is out of range: {allowed}", quoted(key, value)));
    }
    Ok(d)
}

/// Reads `value` as a whole number within `range`.
///
/// # Errors
/// The reason, naming `key`, `value` and the range.
pub fn parse_count(key: &str, value: &str, range: &RangeInclusive<u64>) -> std::result::Result<u64, String> {
    value.parse::<u64>().ok().filter(|n| range.contains(n)).ok_or_else(|| {
        format!("{} is not a whole number from {} to {}", quoted(key, value), range.start(), range.end())
    })
}

/// The keys a store's getters asked for, in order: the known ones, which
/// [`StoreUrl::finish`] lists. Not part of what a URL is (equality, clones
/// start with what was asked so far).
#[derive(Default)]
struct Asked(Mutex<Vec<String>>);

impl Clone for Asked {
    fn clone(&self) -> Self {
        Self(Mutex::new(self.0.lock().clone()))
    }
}

impl PartialEq for Asked {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Asked {}

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
    asked: Asked,
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

impl std::str::FromStr for StoreUrl {
    type Err = Error;

    /// [`StoreUrl::parse`] with no options given apart: `"s3://b/p".parse()`.
    fn from_str(text: &str) -> Result<Self> {
        Self::parse(text, &BTreeMap::new())
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
            asked: Asked::default(),
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
            asked: Asked::default(),
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

    /// The error for `key`'s value, refused for `reason`: the value is shown,
    /// but never where it is also another setting's value, which may be a
    /// secret.
    fn refused(&self, key: &str, mut reason: String) -> Error {
        for (k, v) in self.options.iter().filter(|(k, v)| k.as_str() != key && v.len() >= 4) {
            reason = reason.replace(v.as_str(), &format!("<the value of {k}>"));
        }
        self.invalid(reason)
    }

    /// The raw value of `key`, marked as asked for.
    fn take(&self, key: &str) -> Option<&str> {
        let mut asked = self.asked.0.lock();
        if !asked.iter().any(|k| k == key) {
            asked.push(key.to_string());
        }
        self.options.get(key).map(String::as_str)
    }

    /// A flag: `true` or `false` (nothing else), `None` if not given.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] naming the key and the value otherwise.
    pub fn flag(&self, key: &str) -> Result<Option<bool>> {
        self.take(key).map(|v| parse_flag(key, v).map_err(|r| self.refused(key, r))).transpose()
    }

    /// A duration with a unit (`500ms`, `30s`, `2m`) within `range`, `None`
    /// if not given. A bare number is refused: its unit would be a guess.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] naming the key, the value and the range.
    pub fn duration(&self, key: &str, range: RangeInclusive<Duration>) -> Result<Option<Duration>> {
        self.take(key).map(|v| parse_duration(key, v, &range).map_err(|r| self.refused(key, r))).transpose()
    }

    /// A whole number (a size, a count) within `range`, `None` if not given.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] naming the key, the value and the range.
    pub fn count(&self, key: &str, range: RangeInclusive<u64>) -> Result<Option<u64>> {
        self.take(key).map(|v| parse_count(key, v, &range).map_err(|r| self.refused(key, r))).transpose()
    }

    /// A path, `None` if not given.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] for an empty value.
    pub fn path_option(&self, key: &str) -> Result<Option<PathBuf>> {
        match self.take(key) {
            Some("") => Err(self.invalid(format!("{key}= is empty: give a path"))),
            v => Ok(v.map(PathBuf::from)),
        }
    }

    /// Text, as given (it may be a secret: never show it), `None` if not given.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.take(key)
    }

    /// Refuses `old`, a spelling no longer read, with the one to write
    /// instead: `hint` makes it from the value given (`timeout_ms=500 is no
    /// longer read: write timeout=500ms`). `old` is not listed as known.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] if `old` is given.
    pub fn retired(&self, old: &str, hint: impl FnOnce(&str) -> String) -> Result<()> {
        match self.options.get(old) {
            // A long value is not shown (nor built into the hint): it may be
            // absurd in size, or a secret given under the wrong key.
            Some(v) if v.chars().count() > 12 => {
                Err(self.refused(old, format!("{} is no longer read: write {}", quoted(old, v), hint("…"))))
            }
            Some(v) => Err(self.refused(old, format!("{old}={v} is no longer read: write {}", hint(v)))),
            None => Ok(()),
        }
    }

    /// Refuses the first setting no getter asked for, listing those asked:
    /// the last call of a store's reading of its settings.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] in [`unknown_option`]'s words.
    pub fn finish(&self) -> Result<()> {
        let asked = self.asked.0.lock();
        match self.options.keys().find(|k| !asked.contains(k)) {
            None => Ok(()),
            Some(key) => {
                let known = if asked.is_empty() { "none".to_string() } else { asked.join(", ") };
                Err(self.unknown(key, &known))
            }
        }
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
mod tests;
