//! Token bucket twin: the bucket's "empty until" instant as a u128, behind a mutex.

use crate::sync::Mutex;

use super::{clamp, lock};
use crate::clock::Origin;
use crate::{Clock, Decision, Limiter, MonotonicClock, Quota};

/// The token bucket's mutex twin: same semantics as [`TokenBucket`](crate::TokenBucket),
/// written with plain u128 fields behind a [`Mutex`].
///
/// ```
/// use tollgate::baseline::MutexTokenBucket;
/// use tollgate::{Limiter, ManualClock, Quota};
/// let b = MutexTokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// assert!(b.try_acquire_n(2).is_allowed());
/// assert!(!b.try_acquire().is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct MutexTokenBucket<C = MonotonicClock> {
    /// Ticks of 1/ticks_per_ns ns at which the bucket would be full again.
    full_at: Mutex<u128>,
    ticks_per_ns: u128,
    per_token: u128,
    burst: u128,
    clock: C,
    /// Where its time starts: its first reading, aligned as the lock-free limiter's.
    origin: Origin,
}

impl MutexTokenBucket {
    /// A twin on the default [`MonotonicClock`].
    ///
    /// ```
    /// let b = tollgate::baseline::MutexTokenBucket::new(tollgate::Quota::per_second(1)?);
    /// # let _ = b;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        Self::with_clock(quota, MonotonicClock::new())
    }
}

impl<C: Clock> MutexTokenBucket<C> {
    /// A twin that reads time from `clock`.
    ///
    /// ```
    /// use tollgate::{baseline::MutexTokenBucket, ManualClock, Quota};
    /// let b = MutexTokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// # let _ = b;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        let period = quota.period().as_nanos();
        let limit = u128::from(quota.limit());
        // Ticks per ns: the denominator of period/limit in lowest terms, at most 32.
        let (mut a, mut b) = (period, limit);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        let ticks_per_ns = (limit / a).min(32);
        let per_token = (period * ticks_per_ns).div_ceil(limit);
        MutexTokenBucket {
            full_at: Mutex::new(0),
            ticks_per_ns,
            per_token,
            burst: u128::from(quota.burst()),
            origin: Origin::of(&clock, 1),
            clock,
        }
    }
}

impl<C: Clock> MutexTokenBucket<C> {
    /// The clock's now in the twin's time: ns since its origin (`answer` clamps it).
    #[inline]
    fn now(&self) -> u64 {
        self.origin.now(&self.clock)
    }
}

impl<C: Clock> Limiter for MutexTokenBucket<C> {
    fn try_acquire_n(&self, n: u64) -> Decision {
        let now_ns = self.now();
        self.answer(&mut lock(&self.full_at), now_ns, n)
    }

    /// The same answer on a copy of the state: nothing is charged.
    fn peek(&self, n: u64) -> Decision {
        let now_ns = self.now();
        let mut copy = *lock(&self.full_at);
        self.answer(&mut copy, now_ns, n)
    }

    fn refund(&self, n: u64) -> u64 {
        let now = u128::from(clamp(self.now())) * self.ticks_per_ns;
        let mut full_at = lock(&self.full_at);
        // Full: nothing to give back. Empty until more than the capacity past now: the clock
        // was read before another request wrote a later instant; give nothing back.
        if *full_at <= now || *full_at - now > self.burst * self.per_token {
            return 0;
        }
        let back = (*full_at)
            .saturating_sub(u128::from(n) * self.per_token)
            .max(now);
        let given = (*full_at - back) / self.per_token;
        *full_at = back;
        given as u64
    }
}

impl<C> MutexTokenBucket<C> {
    /// One request of cost `n` at `now_ns` on the locked state `full_at`.
    fn answer(&self, full_at: &mut u128, now_ns: u64, n: u64) -> Decision {
        let now = u128::from(clamp(now_ns)) * self.ticks_per_ns;
        let to_ns = |ticks: u128| ticks.div_ceil(self.ticks_per_ns) as u64;
        let capacity = self.burst * self.per_token;
        let empty_from = (*full_at).max(now);
        let tokens = |from: u128| ((now + capacity).saturating_sub(from) / self.per_token) as u64;
        let n = u128::from(n);
        if n > self.burst {
            return Decision::exceeds(tokens(empty_from), to_ns(empty_from - now));
        }
        let after = empty_from + n * self.per_token;
        // A zero cost passes, even when a later reading left the bucket more than empty.
        if after <= now + capacity || n == 0 {
            if n > 0 {
                *full_at = after;
            }
            return Decision::allowed(tokens(after), to_ns(after - now));
        }
        let pass_at = to_ns(after - capacity);
        Decision::denied(tokens(empty_from), now_ns, pass_at, to_ns(empty_from - now))
    }
}
