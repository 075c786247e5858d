//! Fixed window twin: (window, count) as two plain fields behind a mutex.

use crate::sync::Mutex;

use super::{clamp, lock};
use crate::clock::Origin;
use crate::{Clock, Decision, Limiter, MonotonicClock, Quota};

#[derive(Clone, Debug, Default)]
struct Counter {
    window: u64,
    count: u64,
}

/// The fixed window's mutex twin: same semantics as [`FixedWindow`](crate::FixedWindow),
/// written with two plain fields behind a [`Mutex`].
///
/// ```
/// use tollgate::baseline::MutexFixedWindow;
/// use tollgate::{Limiter, ManualClock, Quota};
/// let w = MutexFixedWindow::with_clock(Quota::per_second(1)?, ManualClock::new());
/// assert!(w.try_acquire().is_allowed());
/// assert!(!w.try_acquire().is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct MutexFixedWindow<C = MonotonicClock> {
    counter: Mutex<Counter>,
    limit: u64,
    period: u64,
    clock: C,
    /// Where its time starts: its first reading, aligned as the lock-free limiter's.
    origin: Origin,
}

impl MutexFixedWindow {
    /// A twin on the default [`MonotonicClock`].
    ///
    /// ```
    /// let w = tollgate::baseline::MutexFixedWindow::new(tollgate::Quota::per_second(1)?);
    /// # let _ = w;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        Self::with_clock(quota, MonotonicClock::new())
    }
}

impl<C: Clock> MutexFixedWindow<C> {
    /// A twin that reads time from `clock`.
    ///
    /// ```
    /// use tollgate::{baseline::MutexFixedWindow, ManualClock, Quota};
    /// let w = MutexFixedWindow::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// # let _ = w;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        let period = u64::try_from(quota.period().as_nanos()).expect("validated period");
        MutexFixedWindow {
            counter: Mutex::default(),
            limit: quota.limit(),
            period,
            origin: Origin::of(&clock, period),
            clock,
        }
    }
}

impl<C: Clock> MutexFixedWindow<C> {
    /// The clock's now in the twin's time: ns since its origin (`answer` clamps it).
    #[inline]
    fn now(&self) -> u64 {
        self.origin.now(&self.clock)
    }
}

impl<C: Clock> Limiter for MutexFixedWindow<C> {
    fn try_acquire_n(&self, n: u64) -> Decision {
        let now_ns = self.now();
        self.answer(&mut lock(&self.counter), now_ns, n)
    }

    /// The same answer on a copy of the state: nothing is charged.
    fn peek(&self, n: u64) -> Decision {
        let now_ns = self.now();
        let mut copy = lock(&self.counter).clone();
        self.answer(&mut copy, now_ns, n)
    }

    fn refund(&self, n: u64) -> u64 {
        let window = clamp(self.now()) / self.period;
        let mut c = lock(&self.counter);
        if window != c.window {
            // A new window: nothing of it was charged yet. An older one: the window moved on
            // after the clock was read, and its count holds none of this charge.
            return 0;
        }
        let given = n.min(c.count);
        c.count -= given;
        given
    }
}

impl<C> MutexFixedWindow<C> {
    /// One request of cost `n` at `now_ns` on the locked state `c`.
    fn answer(&self, c: &mut Counter, now_ns: u64, n: u64) -> Decision {
        // Clamped once, for the window and the durations alike (past the horizon time stands
        // still, so nothing counted reads as over).
        let now_ns = clamp(now_ns);
        // A later window starts from zero; an earlier one (time went back) counts against the
        // stored one. Only an admission changes the fields.
        let window = (now_ns / self.period).max(c.window);
        let count = if window == c.window { c.count } else { 0 };
        let ends = (window + 1) * self.period;
        let until_reset = |count: u64| {
            if count > 0 {
                ends.saturating_sub(now_ns)
            } else {
                0
            }
        };
        let left = self.limit - count;
        if n > self.limit {
            Decision::exceeds(left, until_reset(count))
        } else if n <= left {
            if n > 0 {
                *c = Counter {
                    window,
                    count: count + n,
                };
            }
            Decision::allowed(left - n, until_reset(count + n))
        } else {
            Decision::denied(left, now_ns, ends, until_reset(count))
        }
    }
}
