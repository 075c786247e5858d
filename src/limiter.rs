//! The `Limiter` trait: what every algorithm, lock-free or mutex twin, answers.

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
/// assert_eq!(admitted(&SlidingLog::with_clock(quota, ManualClock::new()), 10), 5);
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
