//! Fixed window: windows `[k·period, (k+1)·period)` from the clock's zero, one counter each.
//! (The limiter counts from its origin, its first reading rounded down to a multiple of the
//! period, so its window `k` is the clock's window `k + origin / period`.)
//!
//! # State word
//!
//! | bits                     | field    | meaning                                          |
//! |--------------------------|----------|--------------------------------------------------|
//! | `count_bits..=63`        | `window` | window number `k = now / period` of the count    |
//! | `0..count_bits`          | `count`  | admissions in that window (`count ≤ limit`)      |
//!
//! `count_bits = bits(limit)`; the quota check guarantees that the last window number before
//! the horizon fits in the rest. A fresh limiter holds `0`: window 0, nothing counted.
//!
//! The window number and the count share one word, so a new window's reset and its first
//! admission are one compare-exchange. (Resetting the counter with a separate store after a
//! compare-exchange on the window's start lets requests landing between the two count in the
//! old window, and extra requests pass. Here there is no "between".)
//!
//! # Invariant
//!
//! For every window `k`, the admissions counted in `k` never exceed `limit`. A request is
//! denied, and writes nothing, exactly when `count + n > limit`.
//!
//! # Orderings
//!
//! One word, publishing nothing else: all `Relaxed`. Admissions are totally ordered by the
//! word's modification order; a stale load only makes the compare-exchange fail. A denial on
//! a stale word is still right: within a window the count only grows, and a newer window is
//! only seen by a clock reading that is itself newer.
//!
//! # Time going backwards
//!
//! A `now` in a window before the stored one counts against the stored window (time stands
//! still for the limiter until the clock is back): the count is never reset by going back.
//! A refund whose `now` is in another window than the stored one gives nothing back: the
//! stored count holds no unit charged in the refund's window (a reading behind the word's is
//! one that another request overtook), and a lost refund never admits anyone.
//!
//! # Edges
//!
//! Up to `2 × limit` can pass within a moment across an edge (`limit` at the end of one
//! window, `limit` at the start of the next): that is what a fixed window is. The sliding
//! algorithms hold the same burst to `limit`.

use super::{count_mask, update, Algo, AlwaysFits, Step};
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError, WindowParams, HORIZON};
use crate::sync::{AtomicU64, Ordering};

/// The pure decision: state word, now, cost → decision and the new word if it must be written.
#[inline]
pub fn decide(p: &WindowParams, word: u64, now_ns: u64, n: u64) -> Step {
    // Clamped once, for the window and the durations alike: past the horizon time stands
    // still, so a counted window never reads as over (and a swept key as fresh).
    let now_ns = now_ns.min(HORIZON);
    let (window, count, window_end) = counting(p, word, now_ns);
    let reset = |count: u64| {
        if count == 0 {
            0
        } else {
            window_end.saturating_sub(now_ns)
        }
    };
    // Saturating: a live window whose limit was lowered may hold a count above it (and a
    // zero cost still passes).
    let left = p.limit.saturating_sub(count);
    if n > p.limit {
        return (Decision::exceeds(left, reset(count)), None);
    }
    if n <= left {
        let write = (n != 0).then_some(window << p.count_bits | (count + n));
        (Decision::allowed(left - n, reset(count + n)), write)
    } else {
        (
            Decision::denied(left, now_ns, window_end, reset(count)),
            None,
        )
    }
}

/// The window a clamped `now_ns` counts in, its count and its end. A later window starts
/// from zero; an earlier one (time went back) counts against the stored window. `now_ns /
/// len > stored` exactly when `now_ns` is at or past the stored window's end: one
/// multiplication, and a division only when the window moves on.
#[inline(always)]
fn counting(p: &WindowParams, word: u64, now_ns: u64) -> (u64, u64, u64) {
    let (stored, count) = (word >> p.count_bits, word & count_mask(p.count_bits));
    let stored_end = (stored + 1) * p.len;
    if now_ns >= stored_end {
        let current = now_ns / p.len;
        (current, 0, (current + 1) * p.len)
    } else {
        (stored, count, stored_end)
    }
}

/// The new word alone, when [`decide`] would admit and write one (the keyed map's one-word
/// commit loop runs it, and decides once the write has landed).
#[cfg(feature = "std")]
#[inline]
pub(crate) fn admit(p: &WindowParams, word: u64, now_ns: u64, n: u64) -> Option<u64> {
    let (window, count, _) = counting(p, word, now_ns.min(HORIZON));
    // `count + n` only once it fits: `n` may be any cost.
    if n != 0 && n <= p.limit.saturating_sub(count) {
        Some(window << p.count_bits | (count + n))
    } else {
        None
    }
}

/// A refund of `n` on `word` at `now_ns`: the units given back and the new word. Only the
/// count of the window `now_ns` reads goes down, and only while the word is still in that
/// window: a word of an earlier window has nothing of the charge, and a word already in a
/// later one (the window moved on between the refund's clock reading and this load) counts
/// other admissions only. Either way nothing is given back. Pure.
#[inline]
pub(crate) fn refunded(p: &WindowParams, word: u64, now_ns: u64, n: u64) -> (u64, Option<u64>) {
    let count = word & count_mask(p.count_bits);
    let stale = now_ns.min(HORIZON) / p.len != word >> p.count_bits;
    let given = if stale { 0 } else { n.min(count) };
    (given, (given > 0).then_some(word - given))
}

/// The fixed window: parameters [`WindowParams`] (one slot), state one packed word.
#[derive(Debug)]
pub struct Fixed;

impl super::sealed::Sealed for Fixed {}

impl Algo for Fixed {
    type Params = WindowParams;
    type State = AtomicU64;

    fn params(quota: &Quota) -> Result<WindowParams, QuotaError> {
        quota.window(1).ok_or(QuotaError::RateTooHigh {
            limit: quota.limit(),
            period: quota.period(),
        })
    }

    fn state(_: &WindowParams) -> Result<AtomicU64, QuotaError> {
        Ok(AtomicU64::new(0))
    }

    /// Windows are aligned to the clock's zero: the origin is a multiple of the period.
    fn grain(p: &WindowParams) -> u64 {
        p.len
    }

    /// The compare-exchange loop around [`decide`].
    #[inline]
    fn acquire(word: &AtomicU64, p: &WindowParams, now_ns: u64, n: u64) -> Decision {
        // Relaxed load and CAS: one word, publishing nothing else, its admissions totally
        // ordered by its modification order (see the module's orderings).
        let (decision, _) = update(
            word,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |word| decide(p, word, now_ns, n),
        );
        decision
    }

    /// One load and [`decide`].
    #[inline]
    fn peek(word: &AtomicU64, p: &WindowParams, now_ns: u64, n: u64) -> Decision {
        // Relaxed: a value of the one word, as a denial reads it (see the module's orderings).
        decide(p, word.load(Ordering::Relaxed), now_ns, n).0
    }

    /// The count of the window `now_ns` reads down by up to `n`, while the word is in that
    /// window; nothing once the window has moved on (or the reading is behind the word's).
    fn refund(word: &AtomicU64, p: &WindowParams, now_ns: u64, n: u64) -> u64 {
        // Relaxed load and CAS: one word, publishing nothing (see the module's orderings).
        let (given, _) = update(
            word,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |word| refunded(p, word, now_ns, n),
        );
        given
    }
}

impl AlwaysFits for Fixed {}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn decide_resets_and_counts_in_one_word() {
        let p = Quota::per_second(2).unwrap().window(1).unwrap();
        let (d, w) = decide(&p, 0, 0, 2);
        assert!(d.is_allowed());
        let word = w.unwrap();
        assert_eq!(word & 0b11, 2);
        let (d, w) = decide(&p, word, 500_000_000, 1);
        assert!(!d.is_allowed() && w.is_none());
        assert_eq!(d.retry_after(), Some(Duration::from_millis(500)));
        // One second later: window 1, counted from zero in the same word.
        let (d, w) = decide(&p, word, 1_000_000_000, 1);
        assert!(d.is_allowed());
        assert_eq!(w.unwrap(), 1 << p.count_bits | 1);
    }

    #[test]
    fn decide_counts_a_stepped_back_clock_against_the_stored_window() {
        let p = Quota::per_second(1).unwrap().window(1).unwrap();
        let (_, w) = decide(&p, 0, 5_000_000_000, 1);
        let (d, w2) = decide(&p, w.unwrap(), 1_000_000_000, 1);
        assert!(!d.is_allowed() && w2.is_none());
        assert_eq!(d.retry_after(), Some(Duration::from_secs(5)));
    }
}
