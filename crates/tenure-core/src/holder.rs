//! Who holds a lease.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The identity written into every grant: enough for a human to find the holder,
/// and a random nonce that tells holders apart.
///
/// Two handles with the same nonce are the *same holder*: a holder may re-take its
/// own abandoned lease at once instead of waiting for it to expire, as HashiCorp
/// Vault does (`docs/design/object-store-lock.md#re-taking-ones-own-abandoned-lease`).
/// Give each independent worker its own `Holder`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Random correlation id, 16 hex digits unless chosen by the user.
    pub nonce: String,
    /// Process id.
    #[serde(default)]
    pub pid: u32,
    /// Host name.
    #[serde(default)]
    pub host: String,
    /// User name.
    #[serde(default)]
    pub user: String,
    /// The holder's tenure version.
    #[serde(default)]
    pub version: String,
    /// Optional free-form label (`--label`), e.g. a CI job URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl Holder {
    /// The identity of this process, with a fresh random nonce.
    pub fn current() -> Self {
        Self {
            nonce: random_nonce(),
            pid: std::process::id(),
            host: hostname(),
            user: username(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            label: None,
        }
    }

    /// The same identity with `label`.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The same identity with a chosen nonce: a process that restarts with the same
    /// nonce may re-take the lease its previous incarnation left behind.
    pub fn with_nonce(mut self, nonce: impl Into<String>) -> Self {
        self.nonce = nonce.into();
        self
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Holder fields come from records anyone with access to the store may
        // have written: printed to a terminal, they must not carry escape codes.
        write!(f, "{}@{} pid {}", Printable(&self.user), Printable(&self.host), self.pid)?;
        if let Some(label) = &self.label {
            write!(f, " ({})", Printable(label))?;
        }
        // Eight characters tell holders apart at a glance; JSON output has them all.
        let short: String = self.nonce.chars().take(8).collect();
        write!(f, " [{}]", Printable(&short))
    }
}

/// Text with control characters escaped (`\u{1b}`), at most 256 characters.
pub(crate) struct Printable<'a>(pub(crate) &'a str);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 256;
        for (i, c) in self.0.chars().enumerate() {
            if i == MAX {
                return f.write_str("…");
            }
            if c.is_control() {
                write!(f, "{}", c.escape_unicode())?;
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// 64 random bits as 16 hex digits.
pub fn random_nonce() -> String {
    format!("{:016x}", rand::random::<u64>())
}

fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

fn username() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| format!("uid{}", rustix::process::getuid().as_raw()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_holder_identifies_this_process_with_a_fresh_nonce() {
        let a = Holder::current();
        let b = Holder::current();
        assert_eq!(a.pid, std::process::id());
        assert!(!a.host.is_empty());
        assert_eq!(a.nonce.len(), 16);
        assert_ne!(a.nonce, b.nonce);
    }

    #[test]
    fn unknown_fields_are_ignored_and_missing_ones_defaulted() {
        let h: Holder = serde_json::from_str(r#"{"nonce":"n1","future":42}"#).expect("parse");
        assert_eq!(h.nonce, "n1");
        assert_eq!(h.pid, 0);
        assert_eq!(h.label, None);
    }
}

#[cfg(test)]
mod display_tests {
    use super::*;

    #[test]
    fn holder_fields_from_a_record_cannot_drive_the_terminal() {
        let mut h = Holder::current().with_label("job\u{1b}[2J\u{7}").with_nonce("\u{1b}]0;pwned\u{7}abcdef");
        h.host = "evil\rhost".into();
        let shown = h.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains("job\\u{1b}[2J"), "{shown}");
        h.label = Some("x".repeat(10_000));
        assert!(h.to_string().chars().count() < 400, "long fields are cut");
    }
}
