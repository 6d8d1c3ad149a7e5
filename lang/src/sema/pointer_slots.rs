//! The typed pointers stored in places the whole program shares: scalar
//! globals, function parameters and function returns (stap's autocast
//! through DWARF-typed variables, here through BTF).
//!
//! Each place is typed by every value stored in it, wherever that stands:
//! `g = $next` in one probe types `g->pid` in another, `f($next)` types
//! `f`'s parameter, and `return t->real_parent` types `f()`. A use may be
//! lowered before some of the stores it depends on (a probe before the
//! function it calls), so each use remembers how many stores it saw; when
//! more turn up later, elaboration runs another round seeded with all of
//! them (`sema::elaborate_with`).

use std::collections::HashMap;

use crate::kernel::TypeId;
use crate::source::Span;

/// A place whose typed pointers come from all over the program.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    /// A scalar global, by name.
    Global(String),
    /// Parameter `index` of the function whose name is defined at `function`.
    Param { function: Span, index: usize },
    /// The values the function defined at `function` returns.
    Return { function: Span },
}

/// The typed pointers stored in each slot, and what its uses saw.
#[derive(Default)]
pub(crate) struct PointerSlots {
    /// Each store's pointee and where the stored value is written.
    stored: HashMap<Slot, Vec<(TypeId, Span)>>,
    /// The fewest stores a use of the slot saw.
    seen: HashMap<Slot, usize>,
    /// The same, for the slots read to find what a store puts in another
    /// (`f(task_current())` reads `task_current`'s return to store into
    /// `f`'s parameter): they matter only if that slot is used.
    seen_for: HashMap<(Slot, Slot), usize>,
}

impl PointerSlots {
    /// Records that a pointer to `target`, written at `at`, goes into `slot`.
    pub(crate) fn store(&mut self, slot: Slot, target: TypeId, at: Span) {
        let values = self.stored.entry(slot).or_default();
        if !values.contains(&(target, at)) {
            values.push((target, at));
        }
    }

    /// The stores of `slot` known so far, noted as seen by a use, or by
    /// the store into `storing` being worked out.
    pub(crate) fn values(&mut self, slot: &Slot, storing: Option<&Slot>) -> Vec<(TypeId, Span)> {
        let values = self.stored.get(slot).cloned().unwrap_or_default();
        let seen = match storing {
            None => self.seen.entry(slot.clone()).or_insert(values.len()),
            Some(into) => self
                .seen_for
                .entry((into.clone(), slot.clone()))
                .or_insert(values.len()),
        };
        *seen = (*seen).min(values.len());
        values
    }

    /// Whether every use saw every store of its slot: the slots used, and
    /// those read for stores into a slot that is used.
    pub(crate) fn settled(&self) -> bool {
        let complete = |slot: &Slot, seen: usize| self.stored.get(slot).map_or(0, Vec::len) == seen;
        let mut used: Vec<&Slot> = self.seen.keys().collect();
        let mut i = 0;
        while let Some(slot) = used.get(i).copied() {
            i += 1;
            for (into, read) in self.seen_for.keys() {
                if into == slot && !used.contains(&read) {
                    used.push(read);
                }
            }
        }
        self.seen.iter().all(|(slot, seen)| complete(slot, *seen))
            && self
                .seen_for
                .iter()
                .all(|((into, read), seen)| !used.contains(&into) || complete(read, *seen))
    }

    /// The stores, to seed the next round of elaboration.
    pub(crate) fn for_next_round(self) -> PointerSlots {
        PointerSlots {
            stored: self.stored,
            ..PointerSlots::default()
        }
    }
}
