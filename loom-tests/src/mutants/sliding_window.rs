//! The sliding-window counter with one bug each: the head loaded `Relaxed`, the finished slot
//! reaching the ring only after the head CAS that moves past it, or the ring written with a
//! plain store. The first two let a mover see the head past a slot and read that slot's ring
//! entry from before it was written; the third lets a mover that lost its CAS store the count
//! it loaded (smaller, before later admissions) over the final one. Either way a later move
//! sums too little for the slots still in the window, and the window admits too much.

use tollgate::__loom::sliding_window::{decide_head, Geometry, Sliding, SlotRing};
use tollgate::__loom::{Algo, Ordering};
use tollgate::Decision;

/// The sliding window with its head loaded, and its CAS failing, `Relaxed`.
#[derive(Debug)]
pub struct RelaxedHead;

impl Algo for RelaxedHead {
    same_as!(Sliding);

    fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
        // Load Acquire: pairs with the Release of the CAS that moved the head here, so the
        // ring entries of the slots it finished are visible to a move or a denial. CAS
        // Release on success: publishes the ring write made in `propose` to whoever sees the
        // new head. Acquire on failure: the returned head is the next one decided on.
        let (decision, _) = s.head.update(
            g,
            Ordering::Relaxed, // PLANTED: the head load synchronizes with no mover
            Ordering::Release,
            Ordering::Relaxed, // PLANTED: nor does the head a failed CAS returns
            |head| {
                // Relaxed: ordered after the Acquire head load; see the module's orderings.
                let ring = |i: usize| s.ring[i].load(Ordering::Relaxed);
                let (decision, write) = decide_head(g, head, ring, now_ns, n);
                let Some(write) = write else {
                    return (decision, None);
                };
                if let Some((i, word)) = write.finished {
                    // Relaxed: published by the Release CAS that follows; fetch_max keeps the
                    // largest count if several movers race, so a late loser never lowers it.
                    s.ring[i].fetch_max(word, Ordering::Relaxed);
                }
                (decision, Some(write.head))
            },
        );
        decision
    }
}

/// The sliding window writing the finished slot to the ring after the head CAS.
#[derive(Debug)]
pub struct RingAfterCas;

impl Algo for RingAfterCas {
    same_as!(Sliding);

    fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
        // Load Acquire: pairs with the Release of the CAS that moved the head here, so the
        // ring entries of the slots it finished are visible to a move or a denial. CAS
        // Release on success: publishes the ring write made in `propose` to whoever sees the
        // new head. Acquire on failure: the returned head is the next one decided on.
        let mut finished = None; // PLANTED: the finished slot waits for the CAS
        let (decision, _) = s.head.update(
            g,
            Ordering::Acquire,
            Ordering::Release,
            Ordering::Acquire,
            |head| {
                // Relaxed: ordered after the Acquire head load; see the module's orderings.
                let ring = |i: usize| s.ring[i].load(Ordering::Relaxed);
                let (decision, write) = decide_head(g, head, ring, now_ns, n);
                let Some(write) = write else {
                    return (decision, None);
                };
                finished = write.finished; // PLANTED: not written before the CAS
                (decision, Some(write.head))
            },
        );
        if let Some((i, word)) = finished {
            // PLANTED: the ring write after the head moved
            s.ring[i].fetch_max(word, Ordering::Relaxed); // PLANTED: Relaxed, as the real one
        } // PLANTED
        decision
    }
}

/// The sliding window storing the finished slot into the ring instead of `fetch_max`: a mover
/// delayed between its head load and its ring write stores a stale count after the final one.
#[derive(Debug)]
pub struct StaleRingStore;

impl Algo for StaleRingStore {
    same_as!(Sliding);

    fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
        // Load Acquire: pairs with the Release of the CAS that moved the head here, so the
        // ring entries of the slots it finished are visible to a move or a denial. CAS
        // Release on success: publishes the ring write made in `propose` to whoever sees the
        // new head. Acquire on failure: the returned head is the next one decided on.
        let (decision, _) = s.head.update(
            g,
            Ordering::Acquire,
            Ordering::Release,
            Ordering::Acquire,
            |head| {
                // Relaxed: ordered after the Acquire head load; see the module's orderings.
                let ring = |i: usize| s.ring[i].load(Ordering::Relaxed);
                let (decision, write) = decide_head(g, head, ring, now_ns, n);
                let Some(write) = write else {
                    return (decision, None);
                };
                if let Some((i, word)) = write.finished {
                    // Relaxed: published by the Release CAS that follows; fetch_max keeps the
                    // largest count if several movers race, so a late loser never lowers it.
                    s.ring[i].store(word, Ordering::Relaxed); // PLANTED: a plain store
                }
                (decision, Some(write.head))
            },
        );
        decision
    }
}
