//! `tenure lock -v`: one line at the end saying how the lease went, from the
//! lease handle itself (not from the metrics, which a program may not record).

use tenure::{Lease, LeaseName};
use tenure_core::human_duration;

/// What the lease was, read just before it is released.
#[derive(Debug)]
pub(super) struct Summary {
    waited: std::time::Duration,
    held: std::time::Duration,
    renewals: u64,
    token: u64,
}

impl Summary {
    pub(super) fn of(lease: &Lease) -> Self {
        Self { waited: lease.waited(), held: lease.held_for(), renewals: lease.renewals(), token: lease.token() }
    }

    /// `tenure: lease deploy/prod in STORE: waited 1.2s, held 3.4s, 5 renewals, token 42`.
    pub(super) fn line(&self, url: &str, name: &LeaseName) -> String {
        let renewals = match self.renewals {
            1 => "1 renewal".to_string(),
            n => format!("{n} renewals"),
        };
        format!(
            "lease {name} in {url}: waited {}, held {}, {renewals}, token {}",
            human_duration(self.waited),
            human_duration(self.held),
            self.token
        )
    }
}
