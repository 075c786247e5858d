//! The sliding-window counter with one ordering bug each: the head loaded `Relaxed`, or the
//! finished slot reaching the ring only after the head CAS that moves past it. Either way a
//! thread can see the head past a slot and read that slot's ring entry from before the mover
//! wrote it: the slot counts as empty, and the window admits too much.

use tollgate::__loom::sliding_window::{decide, Geometry, Sliding, SlotRing};
use tollgate::__loom::{update, Algo, Ordering};
use tollgate::Decision;

/// The sliding window with its head loaded, and its CAS failing, `Relaxed`.
#[derive(Debug)]
pub struct RelaxedHead;

impl Algo for RelaxedHead {
    same_as!(Sliding);

    fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
        // Load Acquire: pairs with the Release of the CAS that moved the head here, so the
        // ring entries of the slots it finished are visible to `decide`. CAS Release on
        // success: publishes the ring write made in `propose` to whoever sees the new head.
        // Acquire on failure: the returned head is the next one decided on.
        let (decision, _) = update(
            &s.head,
            Ordering::Relaxed, // PLANTED: the head load synchronizes with no mover
            Ordering::Release,
            Ordering::Relaxed, // PLANTED: nor does the head a failed CAS returns
            |head| {
                // Relaxed: ordered after the Acquire head load; see the module's orderings.
                let ring = |i: usize| s.ring[i].load(Ordering::Relaxed);
                let (decision, write) = decide(g, head, ring, now_ns, n);
                let Some(write) = write else {
                    return (decision, None);
                };
                if let Some((i, word)) = write.finished {
                    // Relaxed: published by the Release CAS that follows; fetch_max keeps the
                    // largest (final) count if several movers race.
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
        // ring entries of the slots it finished are visible to `decide`. CAS Release on
        // success: publishes the ring write made in `propose` to whoever sees the new head.
        // Acquire on failure: the returned head is the next one decided on.
        let mut finished = None; // PLANTED: the finished slot waits for the CAS
        let (decision, _) = update(
            &s.head,
            Ordering::Acquire,
            Ordering::Release,
            Ordering::Acquire,
            |head| {
                // Relaxed: ordered after the Acquire head load; see the module's orderings.
                let ring = |i: usize| s.ring[i].load(Ordering::Relaxed);
                let (decision, write) = decide(g, head, ring, now_ns, n);
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
