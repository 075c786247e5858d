//! The sliding-window counter with one bug each: the head loaded `Relaxed`, the finished slot
//! reaching the ring only after the head CAS that moves past it, or the ring written with a
//! plain store. The first two let a mover see the head past a slot and read that slot's ring
//! entry from before it was written; the third lets a mover that lost its CAS store the count
//! it loaded (smaller, before later admissions) over the final one. Either way a later move
//! sums too little for the slots still in the window, and the window admits too much.
//!
//! Each mutant is the real `acquire` (the same text, calling its module's `acquire_on`) and a
//! copy of the real `acquire_on` with its planted lines.

pub use relaxed_head::RelaxedHead;
pub use ring_after_cas::RingAfterCas;
pub use stale_ring_store::StaleRingStore;

/// The head loaded, and its CAS failing, `Relaxed`.
pub mod relaxed_head {
    use tollgate::__loom::sliding_window::{
        decide_head, Geometry, HeadAtomic, HeadCell, Packed, Sliding, SlotRing,
    };
    use tollgate::__loom::{Algo, AtomicU64, Ordering};
    use tollgate::Decision;

    /// The sliding window with its head loaded, and its CAS failing, `Relaxed`.
    #[derive(Debug)]
    pub struct RelaxedHead;

    impl tollgate::__loom::Sealed for RelaxedHead {}

    impl Algo for RelaxedHead {
        same_as!(Sliding);

        fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
            match &s.head {
                HeadCell::Narrow(word) => acquire_on(word, &s.ring, g, now_ns, n),
                HeadCell::Wide(word) => acquire_on(word, &s.ring, g, now_ns, n),
            }
        }
    }

    fn acquire_on<A: HeadAtomic>(
        word: &A,
        ring: &[AtomicU64],
        g: &Geometry,
        now_ns: u64,
        n: u64,
    ) -> Decision {
        let cb = g.count_bits();
        // Acquire: pairs with the Release of the CAS that moved the head here, so the ring
        // entries of the slots it finished are visible to a move or a denial.
        let mut current = word.load(Ordering::Relaxed); // PLANTED: synchronizes with no mover
        loop {
            // Relaxed: ordered after the Acquire head load; see the module's orderings.
            let read = |i: usize| ring[i].load(Ordering::Relaxed);
            let (decision, write) = decide_head(g, current.unpack(cb), read, now_ns, n);
            let Some(write) = write else {
                return decision;
            };
            if let Some((i, finished)) = write.finished {
                // Relaxed: published by the Release CAS that follows; fetch_max keeps the
                // largest count if several movers race, so a late loser never lowers it.
                ring[i].fetch_max(finished, Ordering::Relaxed);
            }
            let new = A::Word::pack(write.head, cb);
            // Release on success: publishes the ring write above to whoever sees the new head.
            // Acquire on failure: the returned head is the next one decided on. Weak: a
            // spurious failure only loops once more.
            match word.cas_weak(current, new, Ordering::Release, Ordering::Relaxed) {
                // PLANTED
                Ok(_) => return decision,
                Err(actual) => current = actual,
            }
        }
    }
}

/// The finished slot written to the ring after the head CAS.
pub mod ring_after_cas {
    use tollgate::__loom::sliding_window::{
        decide_head, Geometry, HeadAtomic, HeadCell, Packed, Sliding, SlotRing,
    };
    use tollgate::__loom::{Algo, AtomicU64, Ordering};
    use tollgate::Decision;

    /// The sliding window writing the finished slot to the ring after the head CAS.
    #[derive(Debug)]
    pub struct RingAfterCas;

    impl tollgate::__loom::Sealed for RingAfterCas {}

    impl Algo for RingAfterCas {
        same_as!(Sliding);

        fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
            match &s.head {
                HeadCell::Narrow(word) => acquire_on(word, &s.ring, g, now_ns, n),
                HeadCell::Wide(word) => acquire_on(word, &s.ring, g, now_ns, n),
            }
        }
    }

    fn acquire_on<A: HeadAtomic>(
        word: &A,
        ring: &[AtomicU64],
        g: &Geometry,
        now_ns: u64,
        n: u64,
    ) -> Decision {
        let cb = g.count_bits();
        // Acquire: pairs with the Release of the CAS that moved the head here, so the ring
        // entries of the slots it finished are visible to a move or a denial.
        let mut current = word.load(Ordering::Acquire);
        loop {
            // Relaxed: ordered after the Acquire head load; see the module's orderings.
            let read = |i: usize| ring[i].load(Ordering::Relaxed);
            let (decision, write) = decide_head(g, current.unpack(cb), read, now_ns, n);
            let Some(write) = write else {
                return decision;
            };
            // PLANTED: the finished slot is not written before the CAS
            let new = A::Word::pack(write.head, cb);
            // Release on success: publishes the ring write above to whoever sees the new head.
            // Acquire on failure: the returned head is the next one decided on. Weak: a
            // spurious failure only loops once more.
            match word.cas_weak(current, new, Ordering::Release, Ordering::Acquire) {
                Ok(_) => {
                    // PLANTED: the ring write after the head moved
                    if let Some((i, finished)) = write.finished {
                        // PLANTED
                        ring[i].fetch_max(finished, Ordering::Relaxed); // PLANTED: as the real one
                    } // PLANTED
                    return decision; // PLANTED
                } // PLANTED
                Err(actual) => current = actual,
            }
        }
    }
}

/// The finished slot stored into the ring, not `fetch_max`ed.
pub mod stale_ring_store {
    use tollgate::__loom::sliding_window::{
        decide_head, Geometry, HeadAtomic, HeadCell, Packed, Sliding, SlotRing,
    };
    use tollgate::__loom::{Algo, AtomicU64, Ordering};
    use tollgate::Decision;

    /// The sliding window storing the finished slot into the ring instead of `fetch_max`: a mover
    /// delayed between its head load and its ring write stores a stale count after the final one.
    #[derive(Debug)]
    pub struct StaleRingStore;

    impl tollgate::__loom::Sealed for StaleRingStore {}

    impl Algo for StaleRingStore {
        same_as!(Sliding);

        fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
            match &s.head {
                HeadCell::Narrow(word) => acquire_on(word, &s.ring, g, now_ns, n),
                HeadCell::Wide(word) => acquire_on(word, &s.ring, g, now_ns, n),
            }
        }
    }

    fn acquire_on<A: HeadAtomic>(
        word: &A,
        ring: &[AtomicU64],
        g: &Geometry,
        now_ns: u64,
        n: u64,
    ) -> Decision {
        let cb = g.count_bits();
        // Acquire: pairs with the Release of the CAS that moved the head here, so the ring
        // entries of the slots it finished are visible to a move or a denial.
        let mut current = word.load(Ordering::Acquire);
        loop {
            // Relaxed: ordered after the Acquire head load; see the module's orderings.
            let read = |i: usize| ring[i].load(Ordering::Relaxed);
            let (decision, write) = decide_head(g, current.unpack(cb), read, now_ns, n);
            let Some(write) = write else {
                return decision;
            };
            if let Some((i, finished)) = write.finished {
                // Relaxed: published by the Release CAS that follows; fetch_max keeps the
                // largest count if several movers race, so a late loser never lowers it.
                ring[i].store(finished, Ordering::Relaxed); // PLANTED: a plain store
            }
            let new = A::Word::pack(write.head, cb);
            // Release on success: publishes the ring write above to whoever sees the new head.
            // Acquire on failure: the returned head is the next one decided on. Weak: a
            // spurious failure only loops once more.
            match word.cas_weak(current, new, Ordering::Release, Ordering::Acquire) {
                Ok(_) => return decision,
                Err(actual) => current = actual,
            }
        }
    }
}
