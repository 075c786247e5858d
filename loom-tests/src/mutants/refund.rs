//! Refunds with the stale check they had before: the fixed and sliding windows lower the count
//! of a word in a later window than their reading (a refund overtaken by a rollover gives a
//! unit to the new window), and the token bucket moves a `tat` written with a later reading
//! back towards its old reading (giving back more than the burst). Each `refund` is the real
//! one calling the planted copy of its helper (`tollgate::__loom::planted`).

use tollgate::__loom::fixed_window::Fixed;
use tollgate::__loom::planted;
use tollgate::__loom::sliding_window::{Geometry, Sliding, SlotRing};
use tollgate::__loom::token_bucket::{ticks, Gcra};
use tollgate::__loom::{update, Algo, AtomicU64, GcraParams, Ordering, WindowParams};

mutant! {
    /// The fixed window refunding into a later window.
    FixedLaterWindow
}

impl Algo for FixedLaterWindow {
    same_as!(Fixed, acquire);

    fn refund(word: &AtomicU64, p: &WindowParams, now_ns: u64, n: u64) -> u64 {
        // Relaxed load and CAS: one word, publishing nothing (see the module's orderings).
        let (given, _) = update(
            word,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |word| planted::fixed_window::refunded(p, word, now_ns, n), // PLANTED
        );
        given
    }
}

mutant! {
    /// The sliding window refunding into a later slot.
    SlidingLaterSlot
}

impl Algo for SlidingLaterSlot {
    same_as!(Sliding, acquire);

    fn refund(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> u64 {
        // Relaxed load and CAS: the refund publishes nothing, and as a read-modify-write it
        // continues the release sequence of the head's last move. A mover racing it may
        // write the slot's count from before the refund into the ring (`fetch_max` keeps the
        // larger): the refund is then lost, never an admission gained.
        let (given, _) = s.head.update(
            g,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |head| planted::sliding_window::refunded(g, head, now_ns, n), // PLANTED
        );
        given
    }
}

mutant! {
    /// The token bucket refunding on a reading behind the word's.
    BucketBehindReading
}

impl Algo for BucketBehindReading {
    same_as!(Gcra, acquire);

    fn refund(tat: &AtomicU64, p: &GcraParams, now_ns: u64, n: u64) -> u64 {
        let now = ticks(p, now_ns);
        // Relaxed load and CAS: the one word publishes nothing (see the module's orderings).
        let (given, _) = update(
            tat,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |tat| planted::token_bucket::refunded(p, tat, now, n), // PLANTED
        );
        given
    }
}
