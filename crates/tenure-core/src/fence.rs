//! Fenced writes: data that only the newest grant can change.
//!
//! A [`FencedRecord`] keeps a value together with the highest fencing token that
//! has written it, in one record of any [`Backend`]. A write with token `t`
//! succeeds only if the stored token is `<= t`, by compare-and-swap: so a write
//! fenced with `t` fails once any write with a token above `t` has succeeded —
//! even if the old holder was paused and does not know it lost its lease (seed
//! 004; Chubby's sequencers; slatedb's epoch fencing).
//!
//! Stored as `tenure-fence/1 <token>\n` followed by the value's bytes, under the
//! key `<name>~fence`.

use std::sync::Arc;

use bytes::Bytes;

use crate::backend::{Backend, Key, Put, PutOptions, Stored};
use crate::error::{Error, Result};
use crate::name::LeaseName;
use crate::types::Version;

const MAGIC: &str = "tenure-fence/1 ";
const MAX_RETRIES: u32 = 32;

/// A value that only the holder of the highest token so far may change.
#[derive(Debug, Clone)]
pub struct FencedRecord {
    backend: Arc<dyn Backend>,
    key: Key,
}

/// A fenced record's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fenced {
    /// Highest token that has written.
    pub token: u64,
    /// The value.
    pub value: Bytes,
    /// Store version.
    pub version: Version,
}

impl FencedRecord {
    /// The fenced record called `name` in `backend`.
    pub fn new(backend: Arc<dyn Backend>, name: &str) -> Result<Self> {
        let name = LeaseName::new(name)?;
        Ok(Self { backend, key: Key::suffixed(&name, "fence") })
    }

    fn decode(&self, stored: Stored) -> Result<Fenced> {
        let corrupt = |detail: &str| Error::corrupt(self.backend.url(), self.key.as_str(), detail);
        let nl = stored.value.iter().position(|&b| b == b'\n').ok_or_else(|| corrupt("no header line"))?;
        let header = std::str::from_utf8(&stored.value[..nl]).map_err(|_| corrupt("header is not UTF-8"))?;
        let token = header
            .strip_prefix(MAGIC)
            .ok_or_else(|| corrupt("not a tenure fenced record"))?
            .parse()
            .map_err(|_| corrupt("bad token in header"))?;
        Ok(Fenced { token, value: stored.value.slice(nl + 1..), version: stored.version })
    }

    /// Reads the record (`None` if never written).
    pub async fn read(&self) -> Result<Option<Fenced>> {
        self.backend.get(&self.key).await?.map(|s| self.decode(s)).transpose()
    }

    /// Writes `value` under `token`. Fails with [`Error::Fenced`] if a higher token
    /// has written.
    pub async fn write(&self, token: u64, value: Bytes) -> Result<Fenced> {
        self.update(token, |_| value.clone()).await
    }

    /// Read-modify-write under `token`: `f` gets the current value (`None` if
    /// never written) and returns the new one; retried if a write with a token not
    /// above ours slipped in between. Fails with [`Error::Fenced`] if a higher token
    /// has written.
    pub async fn update(&self, token: u64, mut f: impl FnMut(Option<&Bytes>) -> Bytes) -> Result<Fenced> {
        for _ in 0..MAX_RETRIES {
            let stored = self.backend.get(&self.key).await?;
            let current = stored.map(|s| self.decode(s)).transpose()?;
            if let Some(c) = &current
                && c.token > token
            {
                return Err(Error::Fenced {
                    store: self.backend.url().into(),
                    key: self.key.to_string(),
                    ours: token,
                    current: c.token,
                });
            }
            let value = f(current.as_ref().map(|c| &c.value));
            let mut bytes = format!("{MAGIC}{token}\n").into_bytes();
            bytes.extend_from_slice(&value);
            let opts = current.as_ref().map_or_else(PutOptions::create, |c| PutOptions::update(c.version.clone()));
            if let Put::Done(version) = self.backend.put(&self.key, Bytes::from(bytes), opts).await? {
                return Ok(Fenced { token, value, version });
            }
        }
        Err(Error::store(
            self.backend.url(),
            format!("writing {:?}", self.key),
            "lost the conditional write 32 times in a row",
        ))
    }
}
