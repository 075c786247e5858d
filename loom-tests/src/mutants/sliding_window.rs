//! The sliding-window counter with one bug each: the head loaded `Relaxed`, the finished slot
//! reaching the ring only after the head CAS that moves past it, or the ring written with a
//! plain store. The first two let a mover see the head past a slot and read that slot's ring
//! entry from before it was written; the third lets a mover that lost its CAS store the count
//! it loaded (smaller, before later admissions) over the final one. Either way a later move
//! sums too little for the slots still in the window, and the window admits too much.
//!
//! The three are one [`Mutant`], its const parameter choosing the defect: the real `acquire`
//! (the same text, calling this module's `acquire_on`) and one copy of the real `acquire_on`
//! carrying each defect's planted lines under its `PLANT`.

use tollgate::__loom::sliding_window::{
    decide_head, Geometry, HeadAtomic, HeadCell, Packed, Sliding, SlotRing,
};
use tollgate::__loom::{Algo, AtomicU64, Ordering};
use tollgate::Decision;

use super::Plant;

/// The sliding window with its head loaded, and its CAS failing, `Relaxed`.
pub type RelaxedHead = Mutant<RELAXED_HEAD>;

/// The sliding window writing the finished slot to the ring after the head CAS.
pub type RingAfterCas = Mutant<RING_AFTER_CAS>;

/// The sliding window storing the finished slot into the ring instead of `fetch_max`: a mover
/// delayed between its head load and its ring write stores a stale count after the final one.
pub type StaleRingStore = Mutant<STALE_RING_STORE>;

const RELAXED_HEAD: Plant = 1;
const RING_AFTER_CAS: Plant = 2;
const STALE_RING_STORE: Plant = 3;

/// The sliding window with the planted defect `PLANT`: [`RelaxedHead`], [`RingAfterCas`] or
/// [`StaleRingStore`].
#[derive(Debug)]
pub struct Mutant<const PLANT: Plant>;

impl<const PLANT: Plant> tollgate::__loom::Sealed for Mutant<PLANT> {}

impl<const PLANT: Plant> Algo for Mutant<PLANT> {
    same_as!(Sliding);

    fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
        match &s.head {
            HeadCell::Narrow(word) => acquire_on::<_, PLANT>(word, &s.ring, g, now_ns, n),
            HeadCell::Wide(word) => acquire_on::<_, PLANT>(word, &s.ring, g, now_ns, n),
        }
    }
}

/// PLANTED: the ordering of the head's load and of its failed CAS: `Relaxed` in
/// [`RelaxedHead`], the real `Acquire` in the others.
const fn head_order(plant: Plant) -> Ordering {
    if plant == RELAXED_HEAD {
        Ordering::Relaxed
    } else {
        Ordering::Acquire
    }
}

/// PLANTED: the finished slot's ring write: a plain store in [`StaleRingStore`], the real
/// `fetch_max` in the others.
fn write_ring<const PLANT: Plant>(entry: &AtomicU64, finished: u64) {
    if PLANT == STALE_RING_STORE {
        entry.store(finished, Ordering::Relaxed);
    } else {
        entry.fetch_max(finished, Ordering::Relaxed);
    }
}

/// The real `acquire_on` with the planted lines of the defect `PLANT`.
fn acquire_on<A: HeadAtomic, const PLANT: Plant>(
    word: &A,
    ring: &[AtomicU64],
    g: &Geometry,
    now_ns: u64,
    n: u64,
) -> Decision {
    let cb = g.count_bits();
    // Acquire: pairs with the Release of the CAS that moved the head here, so the ring
    // entries of the slots it finished are visible to a move or a denial.
    let mut current = word.load(head_order(PLANT)); // PLANTED: Relaxed in RelaxedHead
    loop {
        // Relaxed: ordered after the Acquire head load; see the module's orderings.
        let read = |i: usize| ring[i].load(Ordering::Relaxed);
        let (decision, write) = decide_head(g, current.unpack(cb), read, now_ns, n);
        let Some(write) = write else {
            return decision;
        };
        // PLANTED: in RingAfterCas the finished slot is not written before the CAS
        if PLANT != RING_AFTER_CAS
            && let Some((i, finished)) = write.finished
        {
            // Relaxed: published by the Release CAS that follows; fetch_max keeps the
            // largest count if several movers race, so a late loser never lowers it.
            write_ring::<PLANT>(&ring[i], finished); // PLANTED: a plain store in StaleRingStore
        }
        let new = A::Word::pack(write.head, cb);
        // Release on success: publishes the ring write above to whoever sees the new head.
        // Acquire on failure: the returned head is the next one decided on. Weak: a
        // spurious failure only loops once more.
        match word.cas_weak(current, new, Ordering::Release, head_order(PLANT)) {
            // PLANTED: the failure Relaxed in RelaxedHead
            Ok(_) => {
                // PLANTED: RingAfterCas's ring write, after the head moved
                if PLANT == RING_AFTER_CAS
                    && let Some((i, finished)) = write.finished
                {
                    ring[i].fetch_max(finished, Ordering::Relaxed); // PLANTED: as the real one
                } // PLANTED
                return decision; // PLANTED
            } // PLANTED
            Err(actual) => current = actual,
        }
    }
}
