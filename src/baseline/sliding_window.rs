//! Sliding-window counter twin: a deque of (slot, count) behind a mutex.

use crate::sync::Mutex;
use std::collections::VecDeque;

use super::{clamp, lock};
use crate::clock::Origin;
use crate::{Clock, Decision, Limiter, MonotonicClock, Quota, QuotaError};

/// The sliding-window counter's mutex twin: same semantics as
/// [`SlidingWindow`](crate::SlidingWindow), written with a deque of `(slot, count)` behind a
/// [`Mutex`].
///
/// ```
/// use tollgate::baseline::MutexSlidingWindow;
/// use tollgate::{Limiter, ManualClock, Quota};
/// let w = MutexSlidingWindow::with_clock(Quota::per_second(2)?, ManualClock::new());
/// assert!(w.try_acquire_n(2).is_allowed());
/// assert!(!w.try_acquire().is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct MutexSlidingWindow<C = MonotonicClock> {
    /// Slots with a count, oldest first.
    slots: Mutex<VecDeque<(u64, u64)>>,
    limit: u64,
    slot_len: u64,
    /// An admission in slot `e` counts until slot `e + span` begins.
    span: u64,
    clock: C,
    /// Where its time starts: its first reading, aligned as the lock-free limiter's.
    origin: Origin,
}

impl MutexSlidingWindow {
    /// A twin of 8 slots on the default [`MonotonicClock`].
    ///
    /// ```
    /// let w = tollgate::baseline::MutexSlidingWindow::new(tollgate::Quota::per_second(1)?);
    /// # let _ = w;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        Self::with_clock(quota, MonotonicClock::new())
    }
}

impl<C: Clock> MutexSlidingWindow<C> {
    /// A twin of 8 slots that reads time from `clock`.
    ///
    /// ```
    /// use tollgate::{baseline::MutexSlidingWindow, ManualClock, Quota};
    /// let w = MutexSlidingWindow::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// # let _ = w;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Self::try_with_slots(quota, crate::DEFAULT_SLOTS, clock)
            .expect("a validated quota fits 8 slots")
    }

    /// A twin of `slots` slots; the same errors as
    /// [`SlidingWindow::try_with_slots`](crate::SlidingWindow::try_with_slots).
    ///
    /// # Errors
    /// [`QuotaError::InvalidSlots`] or [`QuotaError::RateTooHigh`].
    ///
    /// ```
    /// use tollgate::{baseline::MutexSlidingWindow, ManualClock, Quota};
    /// assert!(MutexSlidingWindow::try_with_slots(Quota::per_second(1)?, 100, ManualClock::new()).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_with_slots(quota: Quota, slots: u32, clock: C) -> Result<Self, QuotaError> {
        // The same validation as the lock-free limiter: its word must fit, so must ours.
        crate::algo::sliding_window::Geometry::new(&quota, slots)?;
        let period = u64::try_from(quota.period().as_nanos()).expect("validated period");
        let slot_len = period.div_ceil(u64::from(slots)).max(1);
        Ok(MutexSlidingWindow {
            slots: Mutex::new(VecDeque::new()),
            limit: quota.limit(),
            slot_len,
            span: u64::from(slots) + 1,
            origin: Origin::of(&clock, slot_len),
            clock,
        })
    }
}

impl<C: Clock> MutexSlidingWindow<C> {
    /// The clock's now in the twin's time: ns since its origin (`answer` clamps it).
    #[inline]
    fn now(&self) -> u64 {
        self.origin.now(&self.clock)
    }
}

impl<C: Clock> Limiter for MutexSlidingWindow<C> {
    fn try_acquire_n(&self, n: u64) -> Decision {
        let now_ns = self.now();
        self.answer(&mut lock(&self.slots), now_ns, n)
    }

    /// The same answer on a copy of the state: nothing is charged.
    fn peek(&self, n: u64) -> Decision {
        let now_ns = self.now();
        let mut copy = lock(&self.slots).clone();
        self.answer(&mut copy, now_ns, n)
    }

    fn refund(&self, n: u64) -> u64 {
        let slot = clamp(self.now()) / self.slot_len;
        let mut slots = lock(&self.slots);
        match slots.back_mut() {
            // The newest slot, while now is in it.
            Some((e, c)) if *e == slot => {
                let given = n.min(*c);
                *c -= given;
                given
            }
            // Now in a later slot: nothing of it was charged yet. In an earlier one: the newest
            // slot began after the clock was read, and holds none of this charge.
            _ => 0,
        }
    }
}

impl<C> MutexSlidingWindow<C> {
    /// One request of cost `n` at `now_ns` on the locked state `slots`.
    fn answer(&self, slots: &mut VecDeque<(u64, u64)>, now_ns: u64, n: u64) -> Decision {
        // Clamped once, for the window and the durations alike (past the horizon time stands
        // still, so nothing counted reads as over).
        let now_ns = clamp(now_ns);
        // Time stands still until the clock passes the newest slot.
        let newest = slots.back().map_or(0, |&(e, _)| e);
        let cur = (now_ns / self.slot_len).max(newest);
        let count_at = |slots: &VecDeque<(u64, u64)>, at: u64| -> u64 {
            slots
                .iter()
                .filter(|&&(e, _)| e + self.span > at)
                .map(|&(_, c)| c)
                .sum()
        };
        let used = count_at(slots, cur);
        let left = self.limit.saturating_sub(used);
        let reset_of = |slots: &VecDeque<(u64, u64)>| {
            slots
                .iter()
                .rev()
                .find(|&&(e, c)| c > 0 && e + self.span > cur)
                .map_or(0, |&(e, _)| {
                    ((e + self.span) * self.slot_len).saturating_sub(now_ns)
                })
        };
        if n > self.limit {
            return Decision::exceeds(left, reset_of(slots));
        }
        if n <= left {
            if n > 0 {
                match slots.back_mut() {
                    Some((e, c)) if *e == cur => *c += n,
                    _ => slots.push_back((cur, n)),
                }
                while slots.front().is_some_and(|&(e, _)| e + self.span <= cur) {
                    slots.pop_front();
                }
            }
            return Decision::allowed(left - n, reset_of(slots));
        }
        // Walk forward slot by slot until enough has left the window.
        let mut at = cur + 1;
        while count_at(slots, at) + n > self.limit {
            at += 1;
        }
        Decision::denied(left, now_ns, at * self.slot_len, reset_of(slots))
    }
}
