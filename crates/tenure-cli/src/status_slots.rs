//! `tenure status` of slots (`tenure lock --slots`): a line per name with
//! slots, `k/N slots` held, above the rows of its slot leases (each holder).

use tenure::LeaseState;
use tenure::slots::{SlotPart, count_in_force, parse};

/// The slots of one name, as `status` found them.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    pub(crate) base: String,
    /// Slots held now.
    pub(crate) held: usize,
    /// The count in force (the gate's record), else one past the highest slot seen.
    pub(crate) count: u32,
}

impl Slots {
    /// `k/N slots`.
    pub(crate) fn word(&self) -> String {
        format!("{}/{} slots", self.held, self.count)
    }
}

/// The names with slots among `states`, in their order.
pub(crate) fn summarize<'a>(states: impl Iterator<Item = &'a LeaseState>) -> Vec<Slots> {
    let mut out: Vec<Slots> = Vec::new();
    for s in states {
        let Some((base, part)) = parse(&s.name) else { continue };
        let i = match out.iter().position(|x| x.base == base) {
            Some(i) => i,
            None => {
                out.push(Slots { base: base.to_string(), ..Slots::default() });
                out.len() - 1
            }
        };
        let entry = &mut out[i];
        match part {
            SlotPart::Gate => {
                if let Some(n) = count_in_force(s) {
                    entry.count = n;
                }
            }
            SlotPart::Slot(slot) => {
                entry.held += usize::from(!s.holders.is_empty());
                entry.count = entry.count.max(slot.saturating_add(1));
            }
        }
    }
    out
}

/// A table row for `slots` (the columns of `status`).
pub(crate) fn row(slots: &Slots) -> [String; 7] {
    let state = if slots.held > 0 { "held" } else { "free" };
    let none = || "-".to_string();
    [slots.base.clone(), state.into(), "slots".into(), none(), slots.word(), none(), none()]
}
