//! Sliding-window counter: the period split into `K` slots, each one packed word, and a head.
//!
//! | word                | bits              | field   | meaning                                |
//! |---------------------|-------------------|---------|----------------------------------------|
//! | `head`              | `count_bits..=63` | `epoch` | slot number `now / slot_len` filling   |
//! |                     | `0..count_bits`   | `count` | admissions in that slot so far         |
//! | `ring[e % (K + 1)]` | `count_bits..=63` | `epoch` | a finished slot `e`                    |
//! |                     | `0..count_bits`   | `count` | its final count                        |
//!
//! `slot_len = ceil(period / K)`, `count_bits = bits(limit)`. At slot `cur` the live slots are
//! `cur - K ..= cur`: the head plus up to `K` finished ones from the ring.
//!
//! **Invariant.** Every admission is a compare-exchange on the head, so admissions are totally
//! ordered and each saw the head's latest count. An admission that moves the head to a new
//! slot first writes the finished slot `(epoch, count)` into the ring, then swaps the head:
//! a slot's final count is in the ring before any thread can see a head past it, and nobody
//! writes that count again, so the ring entries a decision sums are immutable and the sum is
//! exact. The ring's `K + 1` entries keep a slot still live for some thread from being
//! overwritten.
//!
//! **Orderings.** Head load `Acquire`, pairing with the head CAS's `Release` (success), so a
//! thread that sees the head in slot `cur` sees every finished slot written before it moved
//! there; the CAS's failure ordering is `Acquire` (it is the next load). Ring `fetch_max`
//! `Relaxed`, ordered before the head CAS by program order + `Release`; `fetch_max` because
//! racing movers of one slot write values that differ only in count, and the largest is the
//! final one (smaller ones lose their CAS). Ring loads `Relaxed`, after the `Acquire` head load.
//!
//! # Semantics
//!
//! An admission at `s` in slot `e` counts until slot `e + K + 1` begins, which is at least
//! `period` later: like the exact log, no window of length `period` ever holds more than
//! `limit` admissions, and at most about `period / K` longer than the log would keep it.
//! Memory is `8 × (K + 2)` bytes whatever the limit. No background thread.
//!
//! # Time going backwards
//!
//! A `now` in a slot before the head's counts in the head's slot (a straggler whose clock
//! reads an older slot counts in the head's slot too): time stands still for the limiter until
//! the clock is back, and nothing expires early. A refund whose `now` is in another slot than
//! the head's gives nothing back: only the head's own slot may hold its charge.

use super::{count_mask, update, Algo, AlwaysFits, Core, Step};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::limiter::{DefaultClock, RateLimiter};
use crate::quota::{Quota, QuotaError, WindowParams, DEFAULT_SLOTS, HORIZON, MAX_SLOTS};
use crate::sync::{AtomicU64, Ordering};

#[cfg(not(feature = "std"))]
use alloc::boxed::Box;
#[cfg(not(feature = "std"))]
use alloc::vec::Vec;

/// The writes an admission makes: the new head, and a finished slot for the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Write {
    /// The new head.
    pub head: u64,
    /// `(ring index, packed word)` when the head moves past a slot with a count.
    pub finished: Option<(usize, u64)>,
}

/// The slot geometry: a window split into `slots` slots of `p.len` ns.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    pub(crate) p: WindowParams,
    pub(crate) slots: u64,
}

impl Geometry {
    /// The geometry of `quota` split into `slots` slots.
    ///
    /// # Errors
    /// [`QuotaError::InvalidSlots`] or [`QuotaError::RateTooHigh`].
    pub fn new(quota: &Quota, slots: u32) -> Result<Geometry, QuotaError> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(QuotaError::InvalidSlots { slots });
        }
        let p = quota.window(slots).ok_or(QuotaError::RateTooHigh {
            limit: quota.limit(),
            period: quota.period(),
        })?;
        Ok(Geometry {
            p,
            slots: u64::from(slots),
        })
    }

    /// Ring entries: one more than the slots, so that no live slot is ever overwritten.
    pub(crate) fn ring_len(&self) -> usize {
        self.slots as usize + 1
    }
}

/// The ring write an admission that replaces `head` with `new_head` must make first: the
/// finished slot `(ring index, head)` when the head moves to a later slot and the slot it
/// leaves counted something; `None` otherwise. The same as [`decide`]'s `Write::finished`,
/// from the two heads alone (for a caller that keeps only those: a `Limits` member).
#[cfg(feature = "std")]
#[inline(always)]
pub fn finished(g: &Geometry, head: u64, new_head: u64) -> Option<(usize, u64)> {
    let count_bits = g.p.count_bits;
    let epoch = head >> count_bits;
    let moved = new_head >> count_bits != epoch;
    let counted = head & count_mask(count_bits) != 0;
    (moved && counted).then(|| ((epoch % (g.slots + 1)) as usize, head))
}

/// The pure decision. `ring(i)` reads ring entry `i`. Returns the writes to make, if any.
#[inline(always)]
pub fn decide(
    g: &Geometry,
    head: u64,
    ring: impl Fn(usize) -> u64,
    now_ns: u64,
    n: u64,
) -> Step<Write> {
    let (p, k) = (&g.p, g.slots);
    let mask = count_mask(p.count_bits);
    let (head_epoch, head_count) = (head >> p.count_bits, head & mask);
    // Clamped once, for the slots and the durations alike: past the horizon time stands
    // still, so a counted slot never reads as expired (and a swept key as fresh).
    let now_ns = now_ns.min(HORIZON);
    let cur = (now_ns / p.len).max(head_epoch);
    let first = cur.saturating_sub(k);
    let ring_len = k + 1;
    let count_of = |e: u64| -> u64 {
        if e == head_epoch {
            head_count
        } else if e < cur {
            let w = ring((e % ring_len) as usize);
            if w >> p.count_bits == e {
                w & mask
            } else {
                0
            }
        } else {
            0
        }
    };
    let total: u64 = (first..=cur).map(count_of).sum();
    let remaining = p.limit.saturating_sub(total);
    // Full capacity returns when the newest counted slot leaves the window.
    let reset = |newest: Option<u64>| match newest {
        Some(e) => ((e + k + 1) * p.len).saturating_sub(now_ns),
        None => 0,
    };
    let newest = (first..=cur).rev().find(|&e| count_of(e) != 0);
    if n > p.limit {
        return (Decision::exceeds(remaining, reset(newest)), None);
    }
    // `remaining`, not `total + n <= limit`: a live window whose limit was lowered may count
    // more than it, and a zero cost still passes.
    if n <= remaining {
        if n == 0 {
            return (Decision::allowed(remaining, reset(newest)), None);
        }
        let (count, finished) = if head_epoch == cur {
            (head_count + n, None)
        } else {
            let finished = (head_count != 0).then(|| ((head_epoch % ring_len) as usize, head));
            (n, finished)
        };
        let write = Write {
            head: cur << p.count_bits | count,
            finished,
        };
        return (
            Decision::allowed(remaining - n, reset(Some(cur))),
            Some(write),
        );
    }
    // Denied: slot e stops counting when slot e + k + 1 begins; find the first moment
    // enough has left. (Saturating: a denial may read ring entries that movers are
    // writing concurrently; it decides on a snapshot that may be stale, never unsafe.)
    let mut left = total;
    let mut pass_at = (cur + 1) * p.len;
    for e in first..=cur {
        left = left.saturating_sub(count_of(e));
        if left + n <= p.limit {
            pass_at = (e + k + 1) * p.len;
            break;
        }
    }
    (
        Decision::denied(remaining, now_ns, pass_at, reset(newest)),
        None,
    )
}

/// One sliding window's atomics: the head and the ring of finished slots.
#[derive(Debug)]
pub struct SlotRing {
    /// The slot being filled: `(epoch, count)`.
    pub head: AtomicU64,
    /// The last `K + 1` finished slots, `(epoch, count)` each, at `epoch % (K + 1)`.
    pub ring: Box<[AtomicU64]>,
}

/// The sliding-window counter: parameters [`Geometry`], state a [`SlotRing`].
#[derive(Debug)]
pub struct Sliding;

impl Algo for Sliding {
    type Params = Geometry;
    type State = SlotRing;

    /// The default geometry: [`DEFAULT_SLOTS`] slots.
    fn params(quota: &Quota) -> Result<Geometry, QuotaError> {
        Geometry::new(quota, DEFAULT_SLOTS)
    }

    fn state(g: &Geometry) -> Result<SlotRing, QuotaError> {
        let ring: Vec<AtomicU64> = (0..g.ring_len()).map(|_| AtomicU64::new(0)).collect();
        Ok(SlotRing {
            head: AtomicU64::new(0),
            ring: ring.into_boxed_slice(),
        })
    }

    /// Slots are aligned to the clock's zero: the origin is a multiple of the slot length.
    fn grain(g: &Geometry) -> u64 {
        g.p.len
    }

    /// The compare-exchange loop around [`decide`].
    #[inline]
    fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
        // Load Acquire: pairs with the Release of the CAS that moved the head here, so the
        // ring entries of the slots it finished are visible to `decide`. CAS Release on
        // success: publishes the ring write made in `propose` to whoever sees the new head.
        // Acquire on failure: the returned head is the next one decided on.
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

    /// The head and the ring read as `acquire` reads them, and [`decide`]; the slot it would
    /// finish is not written.
    #[inline]
    fn peek(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
        // Acquire: as in `acquire`, the ring entries of the slots the head finished are seen.
        let head = s.head.load(Ordering::Acquire);
        // Relaxed: ordered after the Acquire head load; see the module's orderings.
        let ring = |i: usize| s.ring[i].load(Ordering::Relaxed);
        decide(g, head, ring, now_ns, n).0
    }

    /// The head slot's count down by up to `n`, while now is in the head's slot; nothing once
    /// the head slot has ended (its count is final, perhaps already in the ring), nor when the
    /// head is already in a later slot than now (another request moved it between the clock
    /// reading and the load: its count holds none of this charge).
    fn refund(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> u64 {
        // Relaxed load and CAS: the refund publishes nothing, and as a read-modify-write it
        // continues the release sequence of the head's last move. A mover racing it may
        // write the slot's count from before the refund into the ring (`fetch_max` keeps the
        // larger): the refund is then lost, never an admission gained.
        let (given, _) = update(
            &s.head,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |head| super::fixed_window::refunded(&g.p, head, now_ns, n),
        );
        given
    }
}

impl AlwaysFits for Sliding {}

#[cfg(feature = "std")]
impl crate::live::Retune for Sliding {
    crate::live::plain_live_state!();

    /// The default slots, the count given every bit the slot number leaves.
    fn live_params(quota: &Quota) -> Result<Geometry, QuotaError> {
        let g = Geometry::new(quota, DEFAULT_SLOTS)?;
        let p = quota
            .window_roomy(DEFAULT_SLOTS)
            .ok_or(QuotaError::RateTooHigh {
                limit: quota.limit(),
                period: quota.period(),
            })?;
        Ok(Geometry { p, ..g })
    }

    /// The same slots and count field, the new limit.
    fn retune(current: &Geometry, from: &Quota, to: &Quota) -> Result<Geometry, QuotaError> {
        Ok(Geometry {
            p: super::fixed_window::retuned_window(&current.p, from, to)?,
            ..*current
        })
    }

    fn pack(g: &Geometry) -> crate::live::ParamWords {
        super::fixed_window::window_words(&g.p, g.slots)
    }

    fn unpack(words: crate::live::ParamWords) -> Geometry {
        let (p, slots) = super::fixed_window::window_from_words(words);
        Geometry { p, slots }
    }
}

/// A lock-free sliding-window counter: `limit` per any window of length `period`, counted in
/// `K` slots (8 by default) without a background thread. Memory `8 × (K + 2)` bytes whatever
/// the limit.
///
/// An admission counts for at least `period` and at most `period + period / K`: no window of
/// length `period` ever holds more than `limit`, and a burst at a window edge is held to the
/// limit.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, ManualClock, Quota, SlidingWindow};
///
/// let clock = ManualClock::new();
/// let window = SlidingWindow::with_clock(Quota::per_second(5)?, clock.clone());
/// clock.set(Duration::from_millis(1_990));
/// let before = (0..5).filter(|_| window.try_acquire().is_allowed()).count();
/// clock.set(Duration::from_millis(2_010));
/// let after = (0..5).filter(|_| window.try_acquire().is_allowed()).count();
/// assert_eq!(before + after, 5); // the edge burst is held to the limit
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type SlidingWindow<C = DefaultClock> = RateLimiter<Sliding, C>;

impl<C: Clock> RateLimiter<Sliding, C> {
    /// A sliding window of `slots` slots (1 to 4096): more slots, closer to the exact log,
    /// at 8 bytes and one more load per request each.
    ///
    /// # Errors
    /// [`QuotaError::InvalidSlots`] outside `1..=4096`; [`QuotaError::RateTooHigh`] if the
    /// slots are too short for the counter and slot number to share a word.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, SlidingWindow};
    /// // 100 slots of 10 ms.
    /// let w = SlidingWindow::try_with_slots(Quota::per_second(7)?, 100, ManualClock::new())?;
    /// assert!(SlidingWindow::try_with_slots(Quota::per_second(7)?, 0, ManualClock::new()).is_err());
    /// # let _ = w;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_with_slots(quota: Quota, slots: u32, clock: C) -> Result<Self, QuotaError> {
        let core = Core::with_params(Geometry::new(&quota, slots)?)?;
        Ok(RateLimiter::from_core(core, clock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn moving_the_head_finishes_the_old_slot() {
        let g = Geometry::new(&Quota::per_second(10).unwrap(), 4).unwrap();
        assert_eq!(g.p.len, 250_000_000);
        let ring = [0u64; 5];
        let (d, w) = decide(&g, 0, |i| ring[i], 0, 3);
        assert!(d.is_allowed());
        let w = w.unwrap();
        assert_eq!(w.finished, None);
        // Next slot: the head moves and slot 0 (count 3) goes to the ring.
        let (d, w2) = decide(&g, w.head, |i| ring[i], 250_000_000, 1);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 6);
        assert_eq!(w2.unwrap().finished, Some((0, w.head)));
    }

    #[test]
    fn denial_waits_for_the_slot_that_frees_enough() {
        let g = Geometry::new(&Quota::per_second(4).unwrap(), 4).unwrap();
        let mut ring = [0u64; 5];
        let cb = g.p.count_bits;
        // Slot 0 holds 3, the head (slot 1) holds 1: full.
        ring[0] = 3;
        let head = 1 << cb | 1;
        let (d, w) = decide(&g, head, |i| ring[i], 300_000_000, 2);
        assert!(!d.is_allowed() && w.is_none());
        // Slot 0 stops counting when slot 0 + 4 + 1 = 5 begins, at 1.25 s.
        assert_eq!(d.retry_after(), Some(Duration::from_millis(950)));
        assert_eq!(d.reset_after(), Duration::from_millis(1_500 - 300));
    }
}
