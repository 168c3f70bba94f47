//! `tenure lock --slots N`: one of N slots of the name, each a lease of its own
//! (`tenure::slots`). The command learns which from `TENURE_SLOT` (0…N−1), with
//! the slot's own lease name in `TENURE_LEASE` and its fencing token in
//! `TENURE_TOKEN`; a count other than the one in force while a slot is held is
//! refused (64), and so is a `tenure lock --slots` of a name whose slot runs
//! this very command (a holder never takes two slots of one name).

use std::os::unix::ffi::OsStrExt;

use anyhow::Result;
use tenure::slots::{MAX_SLOTS, SlotPart, parse};
use tenure::{Lease, LeaseName};

use crate::exit::Fail;

/// `--slots`: 1 to [`MAX_SLOTS`].
pub(super) fn count(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if (1..=MAX_SLOTS).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a number of slots: 1 to {MAX_SLOTS}")),
    }
}

/// A slot's environment: `TENURE_LEASE` names the slot's lease, `TENURE_SLOT`
/// says which slot (nothing changes for a lease that is no slot).
pub(super) fn set_env(env: &mut Vec<(&'static str, String)>, lease: &Lease) {
    let Some(slot) = lease.slot() else { return };
    env.retain(|(k, _)| *k != "TENURE_LEASE");
    env.push(("TENURE_LEASE", lease.grant().name.to_string()));
    env.push(("TENURE_SLOT", slot.to_string()));
}

/// Refuses `--slots` of the name one of whose slots the `tenure lock` running
/// this command holds: it would wait for a second slot, maybe for its parent.
pub(super) fn refuse_nested(url: &str, name: &LeaseName, slots: Option<u32>) -> Result<()> {
    let (Some(_), Some(lease), Some(store)) =
        (slots, std::env::var_os("TENURE_LEASE"), std::env::var_os("TENURE_STORE"))
    else {
        return Ok(());
    };
    let Some(parent) = std::str::from_utf8(lease.as_bytes()).ok().and_then(|l| LeaseName::new(l).ok()) else {
        return Ok(());
    };
    match parse(&parent) {
        Some((base, SlotPart::Slot(i))) if base == name.as_str() && super::same_store(&store, url) => {
            anyhow::bail!(Fail::usage(format!(
                "this command runs under slot {i} of {base:?} in {url} (TENURE_LEASE and TENURE_STORE say so): \
                 a holder takes at most one slot of a name"
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_out_of_range_are_refused() {
        assert_eq!(count("3"), Ok(3));
        for bad in ["0", "-1", "1025", "x", "", "4294967296"] {
            assert!(count(bad).is_err(), "{bad}");
        }
    }
}
