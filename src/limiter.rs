//! The `Limiter` trait: what every algorithm, lock-free or mutex twin, answers; and
//! `RateLimiter`, the one public shape of the four lock-free limiters.

use crate::algo::{Algo, AlwaysFits, Core};
use crate::clock::Clock;
use crate::quota::Quota;
use crate::Decision;

/// A rate limiter: admits or denies requests, each of some cost.
///
/// Every limiter in tollgate implements it, so code can take `&dyn Limiter` or be generic
/// over the algorithm, and the mutex twins in [`baseline`](crate::baseline) can stand in for
/// the lock-free limiters in tests and benchmarks.
///
/// ```
/// use tollgate::{FixedWindow, Limiter, ManualClock, Quota, SlidingLog, TokenBucket};
///
/// fn admitted(limiter: &dyn Limiter, requests: u32) -> u32 {
///     (0..requests).filter(|_| limiter.try_acquire().is_allowed()).count() as u32
/// }
/// let quota = Quota::per_second(5)?;
/// assert_eq!(admitted(&TokenBucket::with_clock(quota, ManualClock::new()), 10), 5);
/// assert_eq!(admitted(&FixedWindow::with_clock(quota, ManualClock::new()), 10), 5);
/// assert_eq!(admitted(&SlidingLog::try_with_clock(quota, ManualClock::new())?, 10), 5);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Limiter: Send + Sync {
    /// Asks for one unit.
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// let b = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// assert!(b.try_acquire().is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    fn try_acquire(&self) -> Decision {
        self.try_acquire_n(1)
    }

    /// Asks for `n` units at once: all are taken or none. `n = 0` always passes and takes
    /// nothing; `n` above the limiter's capacity is denied with
    /// [`Decision::exceeds_capacity`].
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// let b = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// assert!(b.try_acquire_n(7).is_allowed());
    /// assert!(!b.try_acquire_n(4).is_allowed()); // only 3 left: none taken
    /// assert!(b.try_acquire_n(3).is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn try_acquire_n(&self, n: u64) -> Decision;
}

/// The clock a limiter reads when none is named: [`MonotonicClock`](crate::MonotonicClock).
#[cfg(feature = "std")]
pub type DefaultClock = crate::clock::MonotonicClock;

/// Without std there is no default clock: a limiter names its own (`with_clock`).
#[cfg(not(feature = "std"))]
#[derive(Debug)]
pub enum DefaultClock {}

/// A lock-free limiter: the algorithm `A`'s state and parameters, and the clock it reads.
///
/// [`TokenBucket`](crate::TokenBucket), [`FixedWindow`](crate::FixedWindow),
/// [`SlidingWindow`](crate::SlidingWindow) and [`SlidingLog`](crate::SlidingLog) are this
/// type over their algorithm; their pages say what each one admits.
#[derive(Debug)]
pub struct RateLimiter<A: Algo, C = DefaultClock> {
    core: Core<A>,
    clock: C,
}

impl<A: Algo, C> RateLimiter<A, C> {
    /// A limiter over `core` reading `clock`.
    pub(crate) fn from_core(core: Core<A>, clock: C) -> Self {
        RateLimiter { core, clock }
    }
}

#[cfg(feature = "std")]
impl<A: AlwaysFits> RateLimiter<A> {
    /// A limiter on the default [`MonotonicClock`](crate::MonotonicClock).
    ///
    /// ```
    /// use tollgate::{FixedWindow, Limiter, Quota, SlidingWindow, TokenBucket};
    /// let quota = Quota::per_second(100)?;
    /// assert!(TokenBucket::new(quota).try_acquire().is_allowed());
    /// assert!(FixedWindow::new(quota).try_acquire().is_allowed());
    /// assert!(SlidingWindow::new(quota).try_acquire().is_allowed()); // 8 slots
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        RateLimiter::from_core(Core::new(&quota), crate::MonotonicClock::new())
    }
}

impl<A: AlwaysFits, C: Clock> RateLimiter<A, C> {
    /// A limiter that reads time from `clock`.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_minute(60)?, ManualClock::new());
    /// # let _ = bucket;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        RateLimiter::from_core(Core::new(&quota), clock)
    }
}

impl<A: Algo, C: Clock> Limiter for RateLimiter<A, C> {
    #[inline]
    fn try_acquire_n(&self, n: u64) -> Decision {
        self.core.acquire(self.clock.now_nanos(), n)
    }
}
