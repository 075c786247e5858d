//! The `Limiter` trait: what every algorithm, lock-free or mutex twin, answers; and
//! `RateLimiter`, the one public shape of the four lock-free limiters, which are its aliases.

use crate::algo::fixed_window::Fixed;
use crate::algo::sliding_log::{Log, SlidingLogCore};
use crate::algo::sliding_window::{Geometry, Sliding};
use crate::algo::token_bucket::Gcra;
use crate::algo::{Algo, AlwaysFits, Core};
use crate::clock::{Clock, Origin};
use crate::quota::{Quota, QuotaError};
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

    /// What [`try_acquire_n(n)`](Limiter::try_acquire_n) would answer now, charging nothing:
    /// the same decision, fields included, from a read of the state and the pure decision.
    /// Racing requests may change the answer before a following `try_acquire_n`.
    ///
    /// Every tollgate limiter answers exactly. The default, for limiters written elsewhere,
    /// asks for zero units (which charges nothing) and compares the `remaining` it reports
    /// with `n`: right about allowed or not, but its denials carry no `retry_after`.
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// let b = TokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// let _ = b.try_acquire_n(4);
    /// assert_eq!(b.peek(1), b.peek(1)); // charges nothing
    /// assert!(!b.peek(2).is_allowed());
    /// assert_eq!(b.peek(2), b.try_acquire_n(2)); // the same answer, fields included
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn peek(&self, n: u64) -> Decision {
        let d = self.try_acquire_n(0);
        let reset = crate::clock::duration_to_nanos(d.reset_after());
        if n <= d.remaining() {
            Decision::allowed(d.remaining() - n, reset)
        } else {
            // A pass time past the horizon: no retry_after.
            Decision::denied(d.remaining(), 0, u64::MAX, reset)
        }
    }

    /// Gives back up to `n` units charged for work that did not happen (a request that failed
    /// before it used its share), and returns how many whole units were given back. Never
    /// beyond the limiter's capacity.
    ///
    /// | limiter | what a refund does |
    /// |---|---|
    /// | token bucket | moves `tat` back by `n` tokens, never before now (so never above the burst); nothing if `tat` is more than the capacity past now (the refund's clock reading is older than the one another request wrote it with) |
    /// | fixed window | lowers the count by up to `n` when the stored window is the one now falls in; nothing when it is another (the window moved on, or moved on between the refund's clock reading and its write) |
    /// | sliding window | lowers the head slot's count by up to `n` when the head's slot is the one now falls in; nothing when it is another (the slot has ended, or the head moved on between the refund's clock reading and its write) |
    /// | sliding log | nothing (returns 0): see below |
    ///
    /// Where it cannot be exact: a limiter's state does not record when each unit was
    /// charged. A token bucket that has refilled completely since the charge already had the
    /// tokens back, and a refund adds them again (up to the burst). A fixed window cannot tell
    /// a charge made in the current window from one made in an earlier window while another
    /// request has already started the current one; refunding the latter would let the current
    /// window admit `n` more than its limit. So refund right after the charge, in the same
    /// window (as [`Limits`](crate::Limits) does with its own receipts); the sliding window
    /// likewise, in the same slot (a refund that races the slot's end may be lost: counted,
    /// never an extra admission). A refund overtaken between its clock reading and its write
    /// (the window or slot moved on meanwhile, or the bucket was written with a later reading)
    /// gives nothing back rather than lower a count that holds none of its charge. The sliding
    /// log keeps one time per admission in a ring of exactly `limit` entries, so the entry a
    /// refund would drop has already been overwritten by a newer one: it refunds nothing. The
    /// default, for limiters written elsewhere, refunds nothing.
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// let b = TokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// assert!(b.try_acquire_n(5).is_allowed());
    /// assert_eq!(b.refund(2), 2); // two requests failed upstream: their tokens come back
    /// assert_eq!(b.try_acquire_n(2).remaining(), 0);
    /// assert_eq!(b.refund(9), 5); // never beyond the burst of 5
    /// assert_eq!(b.refund(1), 0); // full
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn refund(&self, n: u64) -> u64 {
        let _ = n;
        0
    }
}

/// The clock a limiter reads when none is named: [`MonotonicClock`](crate::MonotonicClock).
#[cfg(feature = "std")]
pub(crate) type DefaultClock = crate::clock::MonotonicClock;

/// Without std there is no default clock: a limiter names its own (`with_clock`).
#[cfg(not(feature = "std"))]
#[derive(Debug)]
pub enum DefaultClock {}

/// A lock-free limiter: the algorithm `A`'s state and parameters, and the clock it reads.
///
/// [`TokenBucket`](crate::TokenBucket), [`FixedWindow`](crate::FixedWindow),
/// [`SlidingWindow`](crate::SlidingWindow) and [`SlidingLog`](crate::SlidingLog) are this
/// type over their algorithm; their pages say what each one admits. Code generic over the
/// algorithm can name it, or take any [`Limiter`].
///
/// ```
/// use tollgate::{Limiter, ManualClock, Quota, RateLimiter, TokenBucket};
///
/// let bucket: TokenBucket<ManualClock> =
///     RateLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
/// assert!(bucket.try_acquire_n(2).is_allowed());
/// assert!(!bucket.try_acquire().is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct RateLimiter<A: Algo, C = DefaultClock> {
    core: Core<A>,
    clock: C,
    /// Where this limiter's time starts (its first reading, aligned to the algorithm's grain).
    origin: Origin,
}

impl<A: Algo, C: Clock> RateLimiter<A, C> {
    /// A limiter over `core` reading `clock`, its time counted from the clock's reading now.
    pub(crate) fn from_core(core: Core<A>, clock: C) -> Self {
        let origin = Origin::of(&clock, A::grain(&core.params));
        RateLimiter {
            core,
            clock,
            origin,
        }
    }

    /// The clock's now in this limiter's time (ns since its origin).
    #[inline(always)]
    pub(crate) fn now_ns(&self) -> u64 {
        self.origin.now(&self.clock)
    }
}

impl<A: Algo, C> RateLimiter<A, C> {
    /// The core, for limiters built on top of this one (`Leased`).
    #[cfg(feature = "std")]
    pub(crate) fn core(&self) -> &Core<A> {
        &self.core
    }

    /// The core, the clock and the origin apart (`Leased` keeps the core on a cache line of
    /// its own).
    #[cfg(feature = "std")]
    pub(crate) fn into_parts(self) -> (Core<A>, C, Origin) {
        (self.core, self.clock, self.origin)
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
        self.core.acquire(self.now_ns(), n)
    }

    #[inline]
    fn peek(&self, n: u64) -> Decision {
        A::peek(&self.core.state, &self.core.params, self.now_ns(), n)
    }

    fn refund(&self, n: u64) -> u64 {
        A::refund(&self.core.state, &self.core.params, self.now_ns(), n)
    }
}

/// A lock-free token bucket (GCRA): bursts up to the quota's burst, then a steady
/// `limit / period`, refilled continuously and exactly. The whole state is one `AtomicU64`.
///
/// A fresh bucket is full; an idle bucket refills to its capacity and no further.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(5)?, clock.clone());
/// let passed = (0..10).filter(|_| bucket.try_acquire().is_allowed()).count();
/// assert_eq!(passed, 5); // the burst
/// clock.advance(Duration::from_millis(200));
/// assert!(bucket.try_acquire().is_allowed()); // one token per 200 ms
/// assert!(!bucket.try_acquire().is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type TokenBucket<C = DefaultClock> = RateLimiter<Gcra, C>;

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
pub type FixedWindow<C = DefaultClock> = RateLimiter<Fixed, C>;

/// A lock-free sliding-window counter: `limit` per any window of length `period`, counted in
/// `K` slots (8 by default) without a background thread. Memory: a head of 8 bytes (16 for
/// limits too large to share 64 bits with the slot number twice) and `8 × (K + 1)` bytes of
/// ring, whatever the limit. An admission in the current slot is one load and one
/// compare-exchange, as the fixed window's.
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
    /// at 8 bytes each and one more load when the head moves to a new slot or a request is
    /// denied (an admission in the current slot reads the head alone).
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

/// The exact sliding-window log: an admission at `s` counts while `now - s < period`, so
/// every window of length `period`, wherever it starts, holds at most `limit` admissions.
///
/// Memory: `8 × limit` bytes, allocated once. Denials are read-only; admissions take a short
/// per-limiter lock (see the module notes): exactness over `limit` words costs that.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, ManualClock, Quota, SlidingLog};
///
/// let clock = ManualClock::new();
/// let log = SlidingLog::try_with_clock(Quota::try_new(3, Duration::from_secs(2))?, clock.clone())?;
/// for _ in 0..3 {
///     assert!(log.try_acquire().is_allowed());
///     clock.advance(Duration::from_millis(300));
/// }
/// let denied = log.try_acquire(); // at 900 ms: three in the last 2 s
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(1_100)));
/// clock.advance(Duration::from_millis(1_100));
/// assert!(log.try_acquire().is_allowed()); // the first left the window at 2 s
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type SlidingLog<C = DefaultClock> = RateLimiter<Log, C>;

#[cfg(feature = "std")]
impl RateLimiter<Log> {
    /// A sliding log on the default [`MonotonicClock`](crate::MonotonicClock), or
    /// [`QuotaError::LogTooLarge`] if its `8 × limit` bytes cannot be allocated.
    ///
    /// # Errors
    /// [`QuotaError::LogTooLarge`].
    ///
    /// ```
    /// use tollgate::{Limiter, Quota, SlidingLog};
    /// let log = SlidingLog::try_new(Quota::per_second(100)?)?;
    /// assert!(log.try_acquire().is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_new(quota: Quota) -> Result<Self, QuotaError> {
        SlidingLog::try_with_clock(quota, crate::MonotonicClock::new())
    }
}

impl<C: Clock> RateLimiter<Log, C> {
    /// A sliding log that reads time from `clock`, or [`QuotaError::LogTooLarge`] if its
    /// `8 × limit` bytes cannot be allocated.
    ///
    /// # Errors
    /// [`QuotaError::LogTooLarge`].
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, QuotaError, SlidingLog};
    /// let year = std::time::Duration::from_secs(365 * 86_400);
    /// let huge = Quota::try_new(1 << 47, year)?; // 1 PiB of log
    /// assert!(matches!(
    ///     SlidingLog::try_with_clock(huge, ManualClock::new()),
    ///     Err(QuotaError::LogTooLarge { .. })
    /// ));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_with_clock(quota: Quota, clock: C) -> Result<Self, QuotaError> {
        Ok(RateLimiter::from_core(
            SlidingLogCore::try_new(&quota)?,
            clock,
        ))
    }
}
