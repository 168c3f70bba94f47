//! Lease names: validated, path-like names of logical domains.
//!
//! A name is one or more `/`-separated segments. Each segment is 1–64 bytes of
//! `A–Z a–z 0–9 _ - . @ + = , :`, and must not start with `.`, `-`, `+` or `=`
//! (so `.`/`..` and hidden files can never be named, and a name never looks like a
//! command-line flag). At most 16 segments and 255 bytes in all. These rules are
//! strict on purpose: a name maps to a directory, an object key or an etcd key, and
//! it must never escape the store's root, collide with tenure's own files (whose
//! names start with `~`), or mean different things on different stores.
//!
//! One segment is reserved: [`SLOTS_SEGMENT`] (`+slots`), the only segment that may
//! start with `+`. The slots of a name are leases of their own named
//! `NAME/+slots/0`, `NAME/+slots/1`, … (and their line, `NAME/+slots/gate`): see
//! [`crate::slots`]. A user name can never contain `+slots` by accident (no other
//! segment may start with `+`), and one that names it on purpose names that slot.

use std::fmt;

use crate::Error;

/// Longest lease name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Longest segment of a lease name, in bytes.
pub const MAX_SEGMENT_LEN: usize = 64;
/// Most segments in a lease name.
pub const MAX_SEGMENTS: usize = 16;
/// The reserved segment that names the slots of a lease (see [`crate::slots`]).
pub const SLOTS_SEGMENT: &str = "+slots";

/// A validated lease name, such as `deploy/prod` or `backup-repo`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseName(String);

impl LeaseName {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] saying which rule was broken and at which byte.
    pub fn new(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        match check(&name) {
            Ok(()) => Ok(Self(name)),
            Err(reason) => Err(Error::InvalidName { name, reason }),
        }
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The segments of the name.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

fn check(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a lease name must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("is {} bytes long; the limit is {MAX_NAME_LEN}", name.len()));
    }
    let mut offset = 0;
    for (i, segment) in name.split('/').enumerate() {
        if i >= MAX_SEGMENTS {
            return Err(format!("has more than {MAX_SEGMENTS} '/'-separated segments"));
        }
        check_segment(segment, offset)?;
        offset += segment.len() + 1;
    }
    Ok(())
}

fn check_segment(segment: &str, offset: usize) -> Result<(), String> {
    if segment.is_empty() {
        return Err(format!("has an empty segment at byte {offset} (leading, trailing or doubled '/')"));
    }
    if segment.len() > MAX_SEGMENT_LEN {
        return Err(format!("segment {segment:?} at byte {offset} is longer than {MAX_SEGMENT_LEN} bytes"));
    }
    if segment == SLOTS_SEGMENT {
        return Ok(());
    }
    if let Some(first @ ('.' | '-' | '+' | '=')) = segment.chars().next() {
        return Err(format!(
            "segment {segment:?} at byte {offset} starts with {first:?} (segments start with a letter, digit, '_', '@', ',' or ':')"
        ));
    }
    for (i, c) in segment.char_indices() {
        let ok = c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@' | '+' | '=' | ',' | ':');
        if !ok {
            return Err(format!(
                "has {c:?} at byte {}; allowed are ASCII letters, digits and _ - . @ + = , : with '/' between segments",
                offset + i
            ));
        }
    }
    Ok(())
}

impl fmt::Display for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl AsRef<str> for LeaseName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for LeaseName {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self, Error> {
        Self::new(s)
    }
}

impl TryFrom<String> for LeaseName {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        Self::new(s)
    }
}

impl std::str::FromStr for LeaseName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(name: &str) -> String {
        match LeaseName::new(name) {
            Err(Error::InvalidName { reason, .. }) => reason,
            other => panic!("{name:?} should be invalid, got {other:?}"),
        }
    }

    #[test]
    fn ordinary_names_are_accepted() {
        for ok in ["deploy", "deploy/prod", "tenant-42/db.main", "a@b", "k=v,x:y", "_x", "9"] {
            assert_eq!(LeaseName::new(ok).map(|n| n.to_string()).ok(), Some(ok.to_string()));
        }
    }

    #[test]
    fn names_that_could_escape_the_root_are_rejected() {
        assert!(reason("..").contains("starts with '.'"));
        assert!(reason("a/../b").contains("byte 2"));
        assert!(reason("/etc/passwd").contains("empty segment at byte 0"));
        assert!(reason("a//b").contains("empty segment at byte 2"));
        assert!(reason("a/").contains("empty segment"));
        assert!(reason("a\\b").contains("'\\\\' at byte 1"));
        assert!(reason("a\0b").contains("'\\0' at byte 1"));
        assert!(reason("~tmp").contains("'~' at byte 0"));
    }

    #[test]
    fn only_the_slots_segment_starts_with_a_plus() {
        assert!(LeaseName::new("jobs/+slots/0").is_ok());
        assert!(LeaseName::new("+slots").is_ok(), "a store's listing checks segment by segment");
        assert!(reason("jobs/+slot/0").contains("starts with '+'"));
        assert!(reason("jobs/+slotsx").contains("starts with '+'"));
    }

    #[test]
    fn flags_blanks_and_unicode_are_rejected() {
        assert!(reason("-rf").contains("starts with '-'"));
        assert!(reason("").contains("empty"));
        assert!(reason("a b").contains("' ' at byte 1"));
        assert!(reason("café").contains("byte 3"));
    }

    #[test]
    fn lengths_are_bounded() {
        assert!(LeaseName::new("a".repeat(64)).is_ok());
        assert!(reason(&"a".repeat(65)).contains("longer than 64"));
        let deep = vec!["a"; 17].join("/");
        assert!(reason(&deep).contains("more than 16"));
        let long = vec!["a".repeat(60); 5].join("/");
        assert!(reason(&long).contains("limit is 255"));
    }
}
