//! Breaking a lease whose holder is alive: its renewals move the record
//! between the look that chose what to break and the break, which the store
//! then refuses as [`Error::Changed`]. A change that only renewed the grants
//! looked at changes nothing about what is broken, so the break is made again
//! on a fresh look; any other change (a new grant, a release, another record)
//! is the caller's to judge, and stays an [`Error::Changed`].

use crate::error::{Error, Result};
use crate::store::LeaseStore;
use crate::types::{BreakNote, LeaseState};

/// How many renewals of the grants looked at a break looks past.
pub const MAX_RENEWALS_DURING_BREAK: usize = 5;

/// Breaks the lease as `seen` showed it (all grants, or only `only_token`),
/// looking again past up to [`MAX_RENEWALS_DURING_BREAK`] renewals of those
/// same grants. Returns the state the break was made against.
///
/// # Errors
/// [`Error::Changed`] if the grants changed (not only renewed) since `seen`;
/// the store's errors otherwise.
pub async fn break_as_seen(
    store: &dyn LeaseStore,
    seen: LeaseState,
    only_token: Option<u64>,
    note: Option<&BreakNote>,
) -> Result<LeaseState> {
    let grants = |s: &LeaseState| -> Vec<u64> {
        s.holders.iter().chain(&s.expired).map(|h| h.token).filter(|&t| only_token.is_none_or(|o| o == t)).collect()
    };
    let mut seen = seen;
    let mut renewals = 0;
    loop {
        match store.break_lease(&seen, only_token, note).await {
            Ok(()) => return Ok(seen),
            Err(changed @ Error::Changed { .. }) if renewals < MAX_RENEWALS_DURING_BREAK => {
                let again = store.inspect(&seen.name).await?;
                if grants(&again) != grants(&seen) || again.corrupt != seen.corrupt {
                    return Err(changed);
                }
                seen = again;
                renewals += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
