//! The boxed slot's planted defects, for the loom models (`loom-tests/tests/keyed_slot.rs`);
//! built only for them (`cfg(tollgate_loom)`).
//!
//! [`Mutant`] runs a [`StateSlot`]'s request and eviction as copies of the real ones in
//! `slot.rs`, with a const parameter choosing the defect and the planted lines marked
//! `// PLANTED`; `loom-tests/tests/mutants_match.rs` fails if a copy differs from the real
//! code anywhere else (the const parameter aside). The product's types know nothing of it.

use core::ops::Deref;

use super::{evicted, phase, with_phase, Attempt, StateSlot, EVICTED, EVICTING, LIVE, ROUND};
use crate::algo::Algo;
use crate::sync::Ordering;

/// A deliberate defect compiled into a copy of a protocol for a loom model to catch.
pub(crate) type Plant = u8;
/// Planted defect: the requester trusts its admission without the state RMW.
pub(crate) const REQUESTER_SKIPS_CHECK: Plant = 11;
/// Planted defect: the evictor marks `EVICTED` on its pre-check alone, with no re-check.
pub(crate) const EVICTOR_SKIPS_RECHECK: Plant = 12;
/// Planted defect: the evictor's `EVICTING` keeps the round (the ABA in `slot.rs`).
pub(crate) const EVICTOR_WITHOUT_ROUND: Plant = 13;

/// A real slot run through the copied protocol.
pub(crate) struct Mutant<'a, A: Algo>(pub(crate) &'a StateSlot<A>);

impl<A: Algo> Deref for Mutant<'_, A> {
    type Target = StateSlot<A>;

    fn deref(&self) -> &StateSlot<A> {
        self.0
    }
}

impl<A: Algo> Mutant<'_, A> {
    /// [`StateSlot::acquire`] with `PLANT`.
    #[inline(always)]
    pub(crate) fn acquire<const PLANT: Plant>(&self, now_ns: u64, n: u64) -> Attempt {
        let decision = self.core.acquire(now_ns, n);
        // PLANTED: the requester may trust its admission without the state RMW
        if n == 0 || !decision.is_allowed() || PLANT == REQUESTER_SKIPS_CHECK {
            // Nothing was written: nothing can be lost.
            return Attempt::Decided(decision);
        }
        // Release: publishes the core write to an evictor whose CAS follows in the word's
        // modification order; as an RMW it reads the latest state, so no Acquire is needed.
        let state = self.state.fetch_add(0, Ordering::Release);
        match phase(state) {
            LIVE => Attempt::Decided(decision),
            EVICTING => self.cancel_eviction(state, decision),
            _ => evicted(),
        }
    }

    /// [`StateSlot::try_evict`] with `PLANT`.
    #[inline(always)]
    pub(crate) fn try_evict<const PLANT: Plant>(&self, now_ns: u64) -> bool {
        let state = &self.state;
        // Relaxed: a cheap pre-filter; the CAS below decides.
        let live = state.load(Ordering::Relaxed);
        if phase(live) != LIVE || !self.is_fresh(now_ns) {
            return false;
        }
        // PLANTED: the round may stay as it was
        let round = if PLANT == EVICTOR_WITHOUT_ROUND {
            live // PLANTED
        } else {
            live.wrapping_add(ROUND)
        };
        // PLANTED: the evictor may mark `EVICTED` at once
        let evicting = with_phase(
            round,
            if PLANT == EVICTOR_SKIPS_RECHECK {
                EVICTED // PLANTED
            } else {
                EVICTING
            },
        );
        // Acquire: reads from the release sequence of the requesters' RMWs that precede it,
        // so their core writes are visible to the re-check below.
        if state
            .compare_exchange(live, evicting, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        if PLANT == EVICTOR_SKIPS_RECHECK {
            return true; // PLANTED: no re-check
        }
        let (next, evicted) = if self.is_fresh(now_ns) {
            (with_phase(evicting, EVICTED), true)
        } else {
            (with_phase(evicting, LIVE), false)
        };
        // Release: a requester that reads `EVICTED` and acquires it reads the clock again
        // no earlier than `now_ns`. Failure means a requester cancelled this attempt.
        let done = state
            .compare_exchange(evicting, next, Ordering::Release, Ordering::Relaxed)
            .is_ok();
        evicted && done
    }
}
