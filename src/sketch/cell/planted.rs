//! The sketch column's planted defects, for the loom models (`loom-tests/tests/sketch.rs`);
//! built only for them (`cfg(tollgate_loom)`).
//!
//! [`Mutant`] runs a [`Cell`]'s request as a copy of the real one in `cell.rs`, with a const
//! parameter choosing the defect and the planted lines marked `// PLANTED`;
//! `loom-tests/tests/mutants_match.rs` fails if the copy differs from the real code anywhere
//! else (the const parameter aside). The product's types know nothing of it.

use core::ops::Deref;

use super::{decide, join, Cell, CellParams, KeyLanes};
use crate::decision::Decision;
use crate::sync::Ordering;

/// A request's planted protocol.
pub(crate) type Plant = u8;
/// Planted defect: the decision on one load, then a plain store of the new word.
pub(crate) const LOAD_THEN_STORE: Plant = 1;
/// Planted defect: an admission raises only the key's minimum lane, not both.
pub(crate) const RAISE_MIN_ONLY: Plant = 2;

/// A real column run through the copied protocol.
pub(crate) struct Mutant<'a> {
    pub(crate) cell: &'a Cell,
}

impl Deref for Mutant<'_> {
    type Target = Cell;

    fn deref(&self) -> &Cell {
        self.cell
    }
}

impl Mutant<'_> {
    /// [`Cell::acquire`] with `PLANT`.
    #[inline]
    pub(crate) fn acquire<const PLANT: Plant>(
        &self,
        p: &CellParams,
        now_ns: u64,
        n: u64,
        lanes: KeyLanes,
    ) -> Decision {
        // Relaxed: one word, publishing nothing else (see the module's orderings).
        let mut current = self.0.load(Ordering::Relaxed);
        loop {
            let (decision, write) = decide(p, current, now_ns, n, lanes);
            let Some(new) = write else {
                return decision;
            };
            let new = planted_word::<PLANT>(p, current, new, lanes); // PLANTED
            if PLANT == LOAD_THEN_STORE {
                // PLANTED: `new` overwrites whatever the word holds now (a store, written as
                // a loop since the model's 16-byte word has only loads and compare-exchanges).
                // Relaxed: no ordering would save a lost update.
                let mut seen = self.0.load(Ordering::Relaxed);
                while let Err(actual) =
                    self.0
                        .compare_exchange(seen, new, Ordering::Relaxed, Ordering::Relaxed)
                {
                    seen = actual;
                }
                return decision;
            }
            // Relaxed: the word's modification order orders admissions; weak: a spurious
            // failure only loops once more.
            match self
                .0
                .compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return decision,
                Err(actual) => current = actual,
            }
        }
    }
}

/// The word a planted admission writes: the sound one, or with only the minimum lane raised.
fn planted_word<const PLANT: Plant>(p: &CellParams, old: u128, new: u128, lanes: KeyLanes) -> u128 {
    if PLANT != RAISE_MIN_ONLY || lanes.0 == lanes.1 {
        return new;
    }
    let (stored, t) = (new as u64, old as u64);
    let old_hi = p.rolled((old >> 64) as u64, t, stored);
    let new_hi = (new >> 64) as u64;
    let (a, b) = (lanes.0, lanes.1);
    // Keep the larger lane as it was: only the minimum lane moves.
    let keep = if p.cur(old_hi, a) <= p.cur(old_hi, b) {
        b
    } else {
        a
    };
    join(stored, p.with_cur(new_hi, keep, p.cur(old_hi, keep)))
}
