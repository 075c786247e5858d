//! Sliding log twin: a deque of the last `limit` admission times behind a mutex.

use crate::sync::Mutex;
use std::collections::VecDeque;

use super::{clamp, lock};
use crate::clock::Origin;
use crate::{Clock, Decision, Limiter, MonotonicClock, Quota, QuotaError};

/// The sliding log's mutex twin: same semantics as [`SlidingLog`](crate::SlidingLog),
/// written with a deque of admission times behind a [`Mutex`].
///
/// ```
/// use tollgate::baseline::MutexSlidingLog;
/// use tollgate::{Limiter, ManualClock, Quota};
/// let log = MutexSlidingLog::try_with_clock(Quota::per_second(2)?, ManualClock::new())?;
/// assert!(log.try_acquire_n(2).is_allowed());
/// assert!(!log.try_acquire().is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct MutexSlidingLog<C = MonotonicClock> {
    /// The last `limit` admission times, oldest first.
    times: Mutex<VecDeque<u64>>,
    limit: u64,
    period: u64,
    clock: C,
    /// Where its time starts: its first reading, aligned as the lock-free limiter's.
    origin: Origin,
}

impl MutexSlidingLog {
    /// A twin on the default [`MonotonicClock`], or [`QuotaError::LogTooLarge`].
    ///
    /// # Errors
    /// As [`MutexSlidingLog::try_with_clock`].
    ///
    /// ```
    /// let log = tollgate::baseline::MutexSlidingLog::try_new(tollgate::Quota::per_second(1)?)?;
    /// # let _ = log;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_new(quota: Quota) -> Result<Self, QuotaError> {
        Self::try_with_clock(quota, MonotonicClock::new())
    }
}

impl<C: Clock> MutexSlidingLog<C> {
    /// A twin that reads time from `clock`, or [`QuotaError::LogTooLarge`].
    ///
    /// # Errors
    /// [`QuotaError::LogTooLarge`] if `limit` times cannot be allocated.
    ///
    /// ```
    /// use tollgate::{baseline::MutexSlidingLog, ManualClock, Quota};
    /// let year = std::time::Duration::from_secs(365 * 86_400);
    /// let huge = Quota::try_new(1 << 47, year)?;
    /// assert!(MutexSlidingLog::try_with_clock(huge, ManualClock::new()).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_with_clock(quota: Quota, clock: C) -> Result<Self, QuotaError> {
        let limit = quota.limit();
        let too_large = QuotaError::LogTooLarge { limit };
        let len = usize::try_from(limit).map_err(|_| too_large)?;
        if len > isize::MAX as usize / 8 {
            return Err(too_large);
        }
        let mut times = VecDeque::new();
        times.try_reserve_exact(len).map_err(|_| too_large)?;
        let period = u64::try_from(quota.period().as_nanos()).expect("validated period");
        Ok(MutexSlidingLog {
            times: Mutex::new(times),
            limit,
            period,
            origin: Origin::of(&clock, 1),
            clock,
        })
    }
}

impl<C: Clock> MutexSlidingLog<C> {
    /// The clock's now in the twin's time: ns since its origin (`answer` clamps it).
    #[inline]
    fn now(&self) -> u64 {
        self.origin.now(&self.clock)
    }
}

impl<C: Clock> Limiter for MutexSlidingLog<C> {
    fn try_acquire_n(&self, n: u64) -> Decision {
        let now_ns = self.now();
        self.answer(&mut lock(&self.times), now_ns, n)
    }

    /// The same answer on a copy of the state: nothing is charged.
    fn peek(&self, n: u64) -> Decision {
        let now_ns = self.now();
        let mut copy = lock(&self.times).clone();
        self.answer(&mut copy, now_ns, n)
    }
}

impl<C> MutexSlidingLog<C> {
    /// One request of cost `n` at `now_ns` on the locked state `times`.
    fn answer(&self, times: &mut VecDeque<u64>, now_ns: u64, n: u64) -> Decision {
        // Clamped once, for the window and the durations alike (past the horizon time stands
        // still, so nothing counted reads as over).
        let now_ns = clamp(now_ns);
        let newest = times.back().copied();
        // Time stands still until the clock passes the newest admission.
        let now = now_ns.max(newest.unwrap_or(0));
        // Times are recorded in order: those still in the window are a suffix.
        let first_in = times.partition_point(|&t| now - t >= self.period);
        let in_window = (times.len() - first_in) as u64;
        let left = self.limit - in_window;
        let reset = match newest {
            Some(t) if in_window > 0 => (t + self.period).saturating_sub(now_ns),
            _ => 0,
        };
        if n > self.limit {
            return Decision::exceeds(left, reset);
        }
        if n <= left {
            if n == 0 {
                return Decision::allowed(left, reset);
            }
            for _ in 0..n {
                if times.len() as u64 == self.limit {
                    times.pop_front();
                }
                times.push_back(now);
            }
            return Decision::allowed(left - n, (now + self.period).saturating_sub(now_ns));
        }
        // The times in the window, oldest first: the request passes when enough have left.
        let must_leave = in_window + n - self.limit;
        let live: Vec<u64> = times
            .iter()
            .copied()
            .filter(|&t| now - t < self.period)
            .collect();
        let pass_at = live[must_leave as usize - 1] + self.period;
        Decision::denied(left, now_ns, pass_at, reset)
    }
}
