//! The one-word slot's planted defects, for the loom models (`loom-tests/tests/keyed_slot.rs`);
//! built only for them (`cfg(tollgate_loom)`).
//!
//! [`Mutant`] runs a [`WordSlot`]'s request and eviction as copies of the real ones in
//! `word.rs`, with a const parameter choosing the defect and the planted lines marked
//! `// PLANTED`; `loom-tests/tests/mutants_match.rs` fails if a copy differs from the real
//! code anywhere else (the const parameter aside). The product's types know nothing of it.

use core::ops::Deref;

use super::{is_fresh, PlanRef, WordRule, WordSlot, EVICTED};
use crate::keyed::slot::planted::Plant;
use crate::keyed::slot::Attempt;
use crate::sync::{fence, Ordering};

/// Planted defect: the evictor checks freshness on one load, then marks with a plain store.
pub(crate) const EVICTOR_STORES: Plant = 1;
/// Planted defect: the evictor checks one load, then compare-exchanges from a fresh reload.
pub(crate) const EVICTOR_RELOADS: Plant = 2;
/// Planted defect: a requester takes `EVICTED` for a fresh limiter and admits without the map.
pub(crate) const REQUESTER_TRUSTS_MARK: Plant = 3;
/// Planted defect: a requester that reads `EVICTED` redoes without the `Acquire` fence.
pub(crate) const REQUESTER_SKIPS_FENCE: Plant = 4;

/// A real slot run through the copied protocol.
pub(crate) struct Mutant<'a, R: WordRule, P>(pub(crate) &'a WordSlot<R, P>);

impl<R: WordRule, P> Deref for Mutant<'_, R, P> {
    type Target = WordSlot<R, P>;

    fn deref(&self) -> &WordSlot<R, P> {
        self.0
    }
}

impl<R: WordRule, P: PlanRef<R>> Mutant<'_, R, P> {
    /// [`WordSlot::acquire`] with `PLANT`.
    #[inline(always)]
    pub(crate) fn acquire<const PLANT: Plant>(&self, now_ns: u64, n: u64) -> Attempt {
        let params = self.plan.params();
        let p = &*params;
        // Relaxed: see the module's orderings.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if word == EVICTED {
                // Acquire (with the evictor's Release mark): the redo's clock reading is at
                // least the one the evictor judged the limiter fresh at.
                if PLANT != REQUESTER_SKIPS_FENCE {
                    // PLANTED: the fence may be skipped
                    fence(Ordering::Acquire);
                }
                if PLANT == REQUESTER_TRUSTS_MARK {
                    // PLANTED: the mark taken for a fresh limiter
                    return Attempt::Decided(R::decide(p, 0, now_ns, n).0);
                }
                return Attempt::Evicted;
            }
            let Some(new_word) = R::admit(p, word, now_ns, n) else {
                // A denial or a zero cost: decided on `word`, nothing written.
                return Attempt::Decided(R::decide(p, word, now_ns, n).0);
            };
            // Relaxed: the compare-exchange orders this admission against every other write
            // to the word, the evictor's mark included; nothing else is published.
            match self.word.compare_exchange_weak(
                word,
                new_word,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Attempt::Decided(R::admitted(p, word, new_word, now_ns, n)),
                Err(current) => word = current,
            }
        }
    }

    /// [`WordSlot::try_evict`] with `PLANT`.
    #[inline(always)]
    pub(crate) fn try_evict<const PLANT: Plant>(&self, now_ns: u64) -> bool {
        // Relaxed: the compare-exchange below decides; a stale load only makes it fail.
        let word = self.word.load(Ordering::Relaxed);
        if word == EVICTED || !is_fresh::<R>(&self.plan.params(), word, now_ns) {
            return false;
        }
        if PLANT == EVICTOR_STORES {
            // PLANTED: a plain store in place of the CAS (Relaxed, as the real mark)
            self.word.store(EVICTED, Ordering::Relaxed);
            return true;
        }
        // PLANTED: the CAS may expect a fresh reload (Relaxed, as the real load)
        let word = if PLANT == EVICTOR_RELOADS {
            self.word.load(Ordering::Relaxed) // PLANTED
        } else {
            word
        };
        // Release: a requester that reads the mark and acquires it reads the clock again no
        // earlier than `now_ns`. Fails if anything (an admission) wrote since the check.
        self.word
            .compare_exchange(word, EVICTED, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }
}
