//! Fixed window: windows `[k·period, (k+1)·period)` from the clock's zero, one counter each.
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
//! admission are one compare-exchange. (The Java seed resets its counter with a separate store
//! after a CAS on the start time: requests landing between the two are counted in the old
//! window and extra requests pass. Here there is no "between".)
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
//!
//! # Edges
//!
//! Up to `2 × limit` can pass within a moment across an edge (`limit` at the end of one
//! window, `limit` at the start of the next): that is what a fixed window is. The sliding
//! algorithms hold the same burst to `limit`.

use crate::clock::Clock;
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::quota::{Quota, WindowParams, HORIZON};
use crate::sync::{AtomicU64, Ordering};

use super::token_bucket::Step;

/// The pure decision: state word, now, cost → decision and the new word if it must be written.
#[inline]
pub(crate) fn decide(p: &WindowParams, word: u64, now_ns: u64, n: u64) -> Step {
    let mask = (1u64 << p.count_bits) - 1;
    let (stored, count) = (word >> p.count_bits, word & mask);
    let current = now_ns.min(HORIZON) / p.len;
    // A later window starts from zero; an earlier one (time went back) counts against the
    // stored window.
    let (window, count) = if current > stored {
        (current, 0)
    } else {
        (stored, count)
    };
    let window_end = (window + 1) * p.len;
    let reset = |count: u64| {
        if count == 0 {
            0
        } else {
            window_end.saturating_sub(now_ns)
        }
    };
    if n > p.limit {
        return (Decision::exceeds(p.limit - count, reset(count)), None);
    }
    if count + n <= p.limit {
        let write = (n != 0).then_some(window << p.count_bits | (count + n));
        (
            Decision::allowed(p.limit - count - n, reset(count + n)),
            write,
        )
    } else {
        (
            Decision::denied(p.limit - count, now_ns, window_end, reset(count)),
            None,
        )
    }
}

/// The lock-free fixed window without a clock: what a keyed map stores per key.
#[derive(Debug)]
pub(crate) struct FixedWindowCore {
    word: AtomicU64,
    params: WindowParams,
}

impl FixedWindowCore {
    pub(crate) fn new(quota: &Quota) -> Self {
        let params = quota
            .window(1)
            .expect("a validated quota fits a fixed window");
        FixedWindowCore {
            word: AtomicU64::new(0),
            params,
        }
    }

    /// The compare-exchange loop around [`decide`].
    #[inline]
    pub(crate) fn acquire(&self, now_ns: u64, n: u64) -> Decision {
        // Relaxed: see the module's orderings.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let (decision, write) = decide(&self.params, word, now_ns, n);
            let Some(new_word) = write else {
                return decision;
            };
            // Relaxed: one word, totally ordered by its modification order.
            match self.word.compare_exchange_weak(
                word,
                new_word,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return decision,
                Err(current) => word = current,
            }
        }
    }
}

/// A lock-free fixed-window counter: at most `limit` admissions per window
/// `[k·period, (k+1)·period)`, windows counted from the clock's zero. One `AtomicU64`.
///
/// Cheapest of all, but up to twice the limit can pass within moments across a window edge.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FixedWindow, Limiter, ManualClock, Quota};
///
/// let clock = ManualClock::new();
/// let window = FixedWindow::with_clock(Quota::per_second(5)?, clock.clone());
/// clock.set(Duration::from_millis(1_990));
/// let before = (0..5).filter(|_| window.try_acquire().is_allowed()).count();
/// clock.set(Duration::from_millis(2_010)); // a new window has begun
/// let after = (0..5).filter(|_| window.try_acquire().is_allowed()).count();
/// assert_eq!(before + after, 10); // twice the limit within 20 ms: the fixed window's edge
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
#[cfg(feature = "std")]
pub struct FixedWindow<C = crate::MonotonicClock> {
    core: FixedWindowCore,
    clock: C,
}

/// A lock-free fixed-window counter; see the std documentation.
#[derive(Debug)]
#[cfg(not(feature = "std"))]
pub struct FixedWindow<C> {
    core: FixedWindowCore,
    clock: C,
}

#[cfg(feature = "std")]
impl FixedWindow {
    /// A fixed window on the default [`MonotonicClock`](crate::MonotonicClock).
    ///
    /// ```
    /// use tollgate::{FixedWindow, Limiter, Quota};
    /// let window = FixedWindow::new(Quota::per_minute(100)?);
    /// assert!(window.try_acquire().is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        FixedWindow::with_clock(quota, crate::MonotonicClock::new())
    }
}

impl<C: Clock> FixedWindow<C> {
    /// A fixed window that reads time from `clock`.
    ///
    /// ```
    /// use tollgate::{FixedWindow, ManualClock, Quota};
    /// let window = FixedWindow::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// # let _ = window;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        FixedWindow {
            core: FixedWindowCore::new(&quota),
            clock,
        }
    }
}

impl<C: Clock> Limiter for FixedWindow<C> {
    #[inline]
    fn try_acquire_n(&self, n: u64) -> Decision {
        self.core.acquire(self.clock.now_nanos(), n)
    }
}

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
