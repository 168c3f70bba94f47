//! Turns: the tasks of one [`crate::Client`] ask the store for a lease one at
//! a time, in the order they came.
//!
//! The tasks of a client share its holder identity, and a request of that
//! identity may re-take a grant of its own that no handle of the client holds
//! (a restarted process takes its abandoned lease back at once:
//! `docs/design/object-store-lock.md#re-taking-ones-own-abandoned-lease`). Two
//! tasks asking for one lease at once would defeat that: one task's fresh
//! grant is no handle's yet, so the other's request ends it as abandoned, and
//! both believe they hold the lease. That happens every time two tasks wait in
//! one line and a release wakes them together. So a task first takes its
//! turn (a fair mutex for each name, local to the client); it asks the store
//! only while it has the turn, and keeps it until its lease's handle holds the
//! name.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

use crate::name::LeaseName;

/// Each name some task of a client is acquiring, with its turn.
pub(crate) type Turns = Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>;

/// A task's place at one name's turn: waiting for it, then having it. Dropped,
/// it passes the turn on, and forgets the name once no task wants it.
pub(crate) struct Turn {
    turns: Turns,
    name: String,
    gate: Arc<tokio::sync::Mutex<()>>,
    mine: Option<OwnedMutexGuard<()>>,
}

impl Turn {
    /// A place at `name`'s turn, not yet taken.
    pub(crate) fn at(turns: &Turns, name: &LeaseName) -> Self {
        let gate = turns.lock().entry(name.to_string()).or_default().clone();
        Self { turns: turns.clone(), name: name.to_string(), gate, mine: None }
    }

    /// Takes the turn if no other task has it or waits for it.
    pub(crate) fn try_take(&mut self) -> bool {
        self.mine = self.gate.clone().try_lock_owned().ok();
        self.mine.is_some()
    }

    /// Waits for the turn, after every task that came before.
    pub(crate) async fn take(&mut self) {
        self.mine = Some(self.gate.clone().lock_owned().await);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut turns = self.turns.lock();
        self.mine = None;
        // Only the map and this place still know the gate: nobody waits.
        if Arc::strong_count(&self.gate) == 2 {
            turns.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name() -> LeaseName {
        LeaseName::new("t").expect("name")
    }

    #[tokio::test]
    async fn one_task_has_the_turn_and_the_name_is_forgotten_when_nobody_wants_it() {
        let turns = Turns::default();
        let mut first = Turn::at(&turns, &name());
        assert!(first.try_take());
        let mut second = Turn::at(&turns, &name());
        assert!(!second.try_take(), "two tasks had one turn");
        // A third waits, and gives up (its future dropped mid-wait).
        let mut third = Turn::at(&turns, &name());
        assert!(tokio::time::timeout(std::time::Duration::from_millis(10), third.take()).await.is_err());
        drop(third);
        drop(first);
        assert!(second.try_take(), "the turn passed on");
        assert_eq!(turns.lock().len(), 1);
        drop(second);
        assert!(turns.lock().is_empty(), "a name nobody wants is forgotten");
    }
}
