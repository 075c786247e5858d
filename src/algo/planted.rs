//! The loom models' planted refund defects (`loom-tests/tests/refund.rs`): each is a copy of a
//! real refund helper with its planted lines marked `// PLANTED`, and
//! `loom-tests/tests/mutants_match.rs` fails if a copy differs from the real helper anywhere
//! else. Loom builds only.

/// The fixed window's (and the sliding window's) refund, with the stale check it had before:
/// a word is stale only when the refund's reading is in a later window than the word's.
pub mod fixed_window {
    use crate::algo::count_mask;
    use crate::quota::{WindowParams, HORIZON};

    /// A refund of `n` on `word` at `now_ns` that also lowers a later window's count.
    #[inline]
    pub fn refunded(p: &WindowParams, word: u64, now_ns: u64, n: u64) -> (u64, Option<u64>) {
        let count = word & count_mask(p.count_bits);
        let stale = now_ns.min(HORIZON) / p.len > word >> p.count_bits; // PLANTED: `>`, not `!=`
        let given = if stale { 0 } else { n.min(count) };
        (given, (given > 0).then_some(word - given))
    }
}

/// The sliding window's refund, with the same stale check: a head is stale only when the
/// refund's reading is in a later slot than the head's.
pub mod sliding_window {
    use crate::algo::sliding_window::{Geometry, Head};
    use crate::quota::HORIZON;

    /// A refund of `n` on `head` at `now_ns` that also lowers a later slot's count.
    #[inline]
    pub fn refunded(g: &Geometry, head: Head, now_ns: u64, n: u64) -> (u64, Option<Head>) {
        let stale = now_ns.min(HORIZON) / g.p.len > head.epoch; // PLANTED: `>`, not `!=`
        let given = if stale { 0 } else { n.min(head.count()) };
        let head = Head {
            total: head.total - given,
            ..head
        };
        (given, (given > 0).then_some(head))
    }
}

/// The token bucket's refund without its check of a reading behind the word's.
pub mod token_bucket {
    use crate::quota::GcraParams;

    /// A refund of `n` on `tat` at `now` (ticks) that moves `tat` back towards any `now`.
    #[inline]
    pub fn refunded(p: &GcraParams, tat: u64, now: u64, n: u64) -> (u64, Option<u64>) {
        if tat <= now || n == 0 {
            return (0, None); // full: nothing to give back
        }
        // PLANTED: no check of a `tat` more than the capacity past `now`
        let new = tat.saturating_sub(n.saturating_mul(p.interval)).max(now);
        ((tat - new) / p.interval, Some(new))
    }
}
