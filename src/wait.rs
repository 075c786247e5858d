//! Waiting for capacity instead of being denied: client-side pacing (a crawler calling an
//! API at 10/s, a batch job behind a quota).
//!
//! [`Wait::until_ready_with`] is a future over any [`Limiter`]: it asks, and on a denial
//! sleeps exactly the decision's `retry_after` on a pluggable [`Timer`] and asks again.
//! [`Wait::until_ready`] is the same on tokio's timer (feature `tokio`).
//! [`Wait::blocking_until_ready`] does it on the calling thread; its [`Sleep`] hook lets tests
//! drive it with a [`ManualClock`], which is both a [`Timer`] and a [`Sleep`]: sleeping on it
//! moves it forward.
//!
//! # Cancel safety
//!
//! The only call that charges the limiter is the `try_acquire_n` whose admission completes
//! the future, in the same poll. A future dropped at any other point, sleeping or not yet
//! polled, has taken nothing: dropping it charges nothing.
//!
//! # Pacing
//!
//! Without options the wait is exactly `retry_after`, the least wait after which the same
//! request passes if nobody else takes the capacity first (if someone does, the next
//! decision says how much longer). [`Pacing::jitter`] adds a random extra wait of up to the
//! given bound, so that clients denied together do not all retry at the same instant;
//! [`Pacing::deadline`] gives up, without sleeping, as soon as the next retry would come
//! later than the deadline.

use core::fmt;
use core::future::Future;
use core::hash::{BuildHasher, Hasher};
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::boxed::Box;
use std::sync::OnceLock;
use std::time::Instant;

use crate::clock::ManualClock;
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::sync::{Ordering, StaticAtomicUsize};

/// The process-wide zero of the default `elapsed` of [`Timer`] and [`Sleep`].
fn process_now() -> Duration {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed()
}

/// An async timer: what [`UntilReady`] sleeps on. Implement it for your runtime's sleep.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Timer;
///
/// /// tokio's timer, written out (the `tokio` feature provides it as `TokioTimer`).
/// struct MyTimer;
/// impl Timer for MyTimer {
///     type Sleep = tokio::time::Sleep;
///     fn sleep(&self, duration: Duration) -> Self::Sleep {
///         tokio::time::sleep(duration)
///     }
/// }
/// ```
pub trait Timer {
    /// The future a sleep is.
    type Sleep: Future<Output = ()>;

    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> Self::Sleep;

    /// The time now, from any fixed zero: what a [`Pacing::deadline`] is measured on. The
    /// default is the process's monotonic clock; a timer whose time is not real time (a
    /// paused runtime, a manual clock) overrides it.
    ///
    /// ```
    /// use tollgate::{ManualClock, Timer};
    /// let clock = ManualClock::new();
    /// clock.advance(std::time::Duration::from_secs(3));
    /// assert_eq!(Timer::elapsed(&clock).as_secs(), 3);
    /// ```
    fn elapsed(&self) -> Duration {
        process_now()
    }
}

/// A blocking sleep: what [`Wait::blocking_until_ready_with`] sleeps on.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Sleep};
/// let clock = ManualClock::new();
/// Sleep::sleep(&clock, Duration::from_millis(5)); // a manual clock just moves forward
/// assert_eq!(Sleep::elapsed(&clock), Duration::from_millis(5));
/// ```
pub trait Sleep {
    /// Blocks the calling thread for `duration`.
    fn sleep(&self, duration: Duration);

    /// The time now, from any fixed zero (see [`Timer::elapsed`]).
    fn elapsed(&self) -> Duration {
        process_now()
    }
}

impl<T: Timer + ?Sized> Timer for &T {
    type Sleep = T::Sleep;
    fn sleep(&self, duration: Duration) -> T::Sleep {
        (**self).sleep(duration)
    }
    fn elapsed(&self) -> Duration {
        (**self).elapsed()
    }
}

impl<S: Sleep + ?Sized> Sleep for &S {
    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration)
    }
    fn elapsed(&self) -> Duration {
        (**self).elapsed()
    }
}

/// [`std::thread::sleep`]: the default [`Sleep`].
///
/// ```
/// use tollgate::{Sleep, ThreadSleep};
/// ThreadSleep.sleep(std::time::Duration::from_nanos(1));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadSleep;

impl Sleep for ThreadSleep {
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// Sleeping on a manual clock moves it forward by the sleep, at once.
impl Sleep for ManualClock {
    fn sleep(&self, duration: Duration) {
        self.advance(duration);
    }
    fn elapsed(&self) -> Duration {
        crate::Clock::now(self)
    }
}

/// A sleep on a [`ManualClock`]: ready on its first poll, which moves the clock forward.
#[derive(Debug)]
pub struct ManualSleep {
    clock: ManualClock,
    by: Duration,
}

impl Future for ManualSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        this.clock.advance(core::mem::take(&mut this.by));
        Poll::Ready(())
    }
}

/// A manual clock as an async timer: a sleep completes on its first poll and moves the clock
/// forward, so a test of waiting code runs at once and reads the exact waits off the clock.
impl Timer for ManualClock {
    type Sleep = ManualSleep;
    fn sleep(&self, duration: Duration) -> ManualSleep {
        ManualSleep {
            clock: self.clone(),
            by: duration,
        }
    }
    fn elapsed(&self) -> Duration {
        crate::Clock::now(self)
    }
}

/// tokio's timer (feature `tokio`): `tokio::time::sleep`, with the deadline measured on
/// tokio's clock, so that a paused test runtime drives both.
///
/// ```
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket, Wait};
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let bucket = TokenBucket::new(Quota::per_second(100)?);
/// let decision = bucket.until_ready(1).await.expect("a unit request always fits");
/// assert!(decision.is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// # }).unwrap();
/// ```
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug)]
pub struct TokioTimer {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioTimer {
    /// A timer whose `elapsed` counts from this call, on tokio's clock.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let timer = tollgate::TokioTimer::new();
    /// # let _ = timer;
    /// # });
    /// ```
    pub fn new() -> TokioTimer {
        TokioTimer {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Default for TokioTimer {
    fn default() -> Self {
        TokioTimer::new()
    }
}

#[cfg(feature = "tokio")]
impl Timer for TokioTimer {
    type Sleep = tokio::time::Sleep;
    fn sleep(&self, duration: Duration) -> tokio::time::Sleep {
        tokio::time::sleep(duration)
    }
    fn elapsed(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// Why a wait gave up. Each carries the denial that made it give up.
///
/// ```
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket, Wait, WaitError};
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(5)?, clock.clone());
/// let err = bucket.blocking_until_ready_with(6, &clock, Default::default()).unwrap_err();
/// assert!(matches!(err, WaitError::ExceedsCapacity(_)));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitError {
    /// The cost is above what the limiter can ever allow: waiting would never help.
    ExceedsCapacity(Decision),
    /// The request would pass only past the limiter's time horizon (2^58 ns after its
    /// clock's zero): never.
    NeverPasses(Decision),
    /// The next retry would come after the deadline; nothing was charged.
    DeadlineExceeded(Decision),
}

impl WaitError {
    /// The denial that made the wait give up.
    ///
    /// ```
    /// use tollgate::{Limiter, ManualClock, Quota, TokenBucket, Wait};
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_second(5)?, clock.clone());
    /// let err = bucket.blocking_until_ready_with(9, &clock, Default::default()).unwrap_err();
    /// assert_eq!(err.decision().remaining(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn decision(&self) -> Decision {
        match *self {
            WaitError::ExceedsCapacity(d)
            | WaitError::NeverPasses(d)
            | WaitError::DeadlineExceeded(d) => d,
        }
    }
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::ExceedsCapacity(_) => {
                f.write_str("the cost is above the limiter's capacity: it can never pass")
            }
            WaitError::NeverPasses(_) => {
                f.write_str("the request would pass only past the limiter's time horizon")
            }
            WaitError::DeadlineExceeded(d) => write!(
                f,
                "the request would pass only after the deadline (retry after {:?})",
                d.retry_after().unwrap_or(Duration::MAX)
            ),
        }
    }
}

impl std::error::Error for WaitError {}

/// How a wait paces its retries: optional jitter, optional deadline. The default is neither:
/// every wait is exactly the decision's `retry_after`, and there is no limit on the total.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Pacing;
/// let pacing = Pacing::new()
///     .jitter(Duration::from_millis(20))
///     .deadline(Duration::from_secs(5));
/// # let _ = pacing;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Pacing {
    jitter_ns: u64,
    rng: u64,
    deadline: Option<Duration>,
}

impl Pacing {
    /// No jitter, no deadline.
    ///
    /// ```
    /// let pacing = tollgate::Pacing::new();
    /// # let _ = pacing;
    /// ```
    pub fn new() -> Pacing {
        Pacing::default()
    }

    /// Adds to every sleep a random extra of `0..=max`, drawn afresh for each sleep of each
    /// wait (two waits on one `Pacing` draw different extras). A sleep is never shorter than
    /// `retry_after`.
    ///
    /// ```
    /// let pacing = tollgate::Pacing::new().jitter(std::time::Duration::from_millis(10));
    /// # let _ = pacing;
    /// ```
    pub fn jitter(mut self, max: Duration) -> Pacing {
        self.jitter_ns = crate::clock::duration_to_nanos(max);
        if self.rng == 0 {
            self.rng = std::hash::RandomState::new().build_hasher().finish() | 1;
        }
        self
    }

    /// Gives up with [`WaitError::DeadlineExceeded`], at once and without sleeping, when the
    /// next retry would come more than `within` after the wait started (its first poll, or
    /// the blocking call). Jitter is cut short rather than crossing the deadline.
    ///
    /// ```
    /// let pacing = tollgate::Pacing::new().deadline(std::time::Duration::from_secs(1));
    /// # let _ = pacing;
    /// ```
    pub fn deadline(mut self, within: Duration) -> Pacing {
        self.deadline = Some(within);
        self
    }

    /// The pacing of one wait: its jitter stream made distinct from every other wait's by a
    /// process-wide count of waits, so that copies of one `Pacing` do not retry in step.
    fn begin(mut self) -> Pacing {
        static WAITS: StaticAtomicUsize = StaticAtomicUsize::new(0);
        if self.jitter_ns != 0 {
            // Relaxed: the count only has to differ between waits; the RMW guarantees that.
            let wait = WAITS.fetch_add(1, Ordering::Relaxed) as u64;
            self.rng ^= wait.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        self
    }

    /// A random extra wait in `0..=jitter_ns` (splitmix64).
    fn next_jitter(&mut self) -> u64 {
        if self.jitter_ns == 0 {
            return 0;
        }
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        match self.jitter_ns.checked_add(1) {
            Some(bound) => z % bound,
            None => z,
        }
    }

    /// What to do after the denial `d`, `elapsed` into the wait: sleep this long, or give up.
    fn next_wait(&mut self, d: Decision, elapsed: Duration) -> Result<Duration, WaitError> {
        if d.exceeds_capacity() {
            return Err(WaitError::ExceedsCapacity(d));
        }
        let retry = d.retry_after().ok_or(WaitError::NeverPasses(d))?;
        // A zero wait would only ask again at once; one nanosecond lets time move.
        let retry = retry.max(Duration::from_nanos(1));
        let wait = retry.saturating_add(Duration::from_nanos(self.next_jitter()));
        match self.deadline {
            None => Ok(wait),
            Some(deadline) => {
                let left = deadline.saturating_sub(elapsed);
                if retry > left {
                    Err(WaitError::DeadlineExceeded(d))
                } else {
                    Ok(wait.min(left))
                }
            }
        }
    }
}

/// Waiting for capacity on any [`Limiter`]: implemented for every one.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, Limiter, ManualClock, Pacing, Quota, TokenBucket, Wait};
///
/// // A crawler at 10 requests per second, no bursts: every request waits its turn.
/// let clock = ManualClock::new();
/// let api = TokenBucket::with_clock(Quota::per_second(10)?.with_burst(1)?, clock.clone());
/// for _ in 0..5 {
///     let _ = api.blocking_until_ready_with(1, &clock, Pacing::new()).unwrap();
/// }
/// assert_eq!(clock.now(), Duration::from_millis(400)); // exactly 4 waits of 100 ms
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Wait: Limiter {
    /// A future that resolves to the admission of `n` units, sleeping on tokio's timer
    /// between attempts (feature `tokio`). See [`UntilReady`].
    ///
    /// ```
    /// use tollgate::{Limiter, Quota, TokenBucket, Wait};
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let api = TokenBucket::new(Quota::per_second(1000)?);
    /// for _ in 0..3 {
    ///     api.until_ready(1).await.expect("a unit request fits");
    /// }
    /// # Ok::<(), tollgate::QuotaError>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "tokio")]
    fn until_ready(&self, n: u64) -> UntilReady<'_, Self, TokioTimer> {
        self.until_ready_with(n, TokioTimer::new())
    }

    /// A future that resolves to the admission of `n` units, sleeping on `timer` between
    /// attempts. See [`UntilReady`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, Limiter, ManualClock, Quota, TokenBucket, Wait};
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, clock.clone());
    /// let _ = bucket.try_acquire_n(2);
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let d = bucket.until_ready_with(1, clock.clone()).await.unwrap();
    /// assert!(d.is_allowed());
    /// # });
    /// assert_eq!(clock.now(), Duration::from_millis(500));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn until_ready_with<T: Timer>(&self, n: u64, timer: T) -> UntilReady<'_, Self, T> {
        UntilReady {
            limiter: self,
            n,
            timer,
            pacing: Pacing::new(),
            started: None,
            sleep: None,
        }
    }

    /// Blocks the calling thread until `n` units are admitted, sleeping exactly each denial's
    /// `retry_after` with [`std::thread::sleep`].
    ///
    /// # Errors
    /// [`WaitError::ExceedsCapacity`] or [`WaitError::NeverPasses`]: waiting cannot help.
    ///
    /// ```
    /// use tollgate::{Limiter, Quota, TokenBucket, Wait};
    /// let bucket = TokenBucket::new(Quota::per_second(1000)?);
    /// assert!(bucket.blocking_until_ready(1).unwrap().is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn blocking_until_ready(&self, n: u64) -> Result<Decision, WaitError> {
        self.blocking_until_ready_with(n, ThreadSleep, Pacing::new())
    }

    /// Blocks until `n` units are admitted, sleeping on `sleep` and pacing as `pacing` says.
    ///
    /// # Errors
    /// [`WaitError::ExceedsCapacity`], [`WaitError::NeverPasses`], or
    /// [`WaitError::DeadlineExceeded`] once the next retry would cross `pacing`'s deadline.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Pacing, Quota, TokenBucket, Wait, WaitError};
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_minute(1)?, clock.clone());
    /// let _ = bucket.try_acquire();
    /// let hurry = Pacing::new().deadline(Duration::from_secs(10));
    /// let err = bucket.blocking_until_ready_with(1, &clock, hurry).unwrap_err();
    /// assert!(matches!(err, WaitError::DeadlineExceeded(_)));
    /// assert_eq!(tollgate::Clock::now(&clock), Duration::ZERO); // gave up without sleeping
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn blocking_until_ready_with<S: Sleep>(
        &self,
        n: u64,
        sleep: S,
        pacing: Pacing,
    ) -> Result<Decision, WaitError> {
        let mut pacing = pacing.begin();
        let started = sleep.elapsed();
        loop {
            let d = self.try_acquire_n(n);
            if d.is_allowed() {
                return Ok(d);
            }
            let wait = pacing.next_wait(d, sleep.elapsed().saturating_sub(started))?;
            sleep.sleep(wait);
        }
    }
}

impl<L: Limiter + ?Sized> Wait for L {}

/// The future of [`Wait::until_ready_with`]: resolves to the admission of `n` units, or to
/// a [`WaitError`] when waiting cannot help (or the deadline would pass).
///
/// Runtime-agnostic: it sleeps on its [`Timer`] and needs nothing else from the executor.
/// Cancel-safe: dropping it at any point charges nothing (see the module docs). Each sleep
/// is boxed once, since a timer's sleep future may not be `Unpin`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, Limiter, ManualClock, Pacing, Quota, TokenBucket, Wait};
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, clock.clone());
/// let _ = bucket.try_acquire();
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let d = bucket
///     .until_ready_with(1, clock.clone())
///     .pacing(Pacing::new().jitter(Duration::from_millis(100)))
///     .await
///     .unwrap();
/// assert!(d.is_allowed());
/// # });
/// let waited = clock.now();
/// assert!(waited >= Duration::from_secs(1) && waited <= Duration::from_millis(1100));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[must_use = "a future does nothing unless polled"]
pub struct UntilReady<'a, L: ?Sized, T: Timer> {
    limiter: &'a L,
    n: u64,
    timer: T,
    pacing: Pacing,
    started: Option<Duration>,
    sleep: Option<Pin<Box<T::Sleep>>>,
}

impl<L: ?Sized, T: Timer> UntilReady<'_, L, T> {
    /// Paces the retries: jitter, deadline (see [`Pacing`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Pacing, Quota, TokenBucket, Wait};
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, clock.clone());
    /// let wait = bucket.until_ready_with(1, clock).pacing(Pacing::new().deadline(Duration::from_secs(2)));
    /// # drop(wait);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn pacing(mut self, pacing: Pacing) -> Self {
        self.pacing = pacing.begin();
        self
    }
}

impl<L: ?Sized, T: Timer> fmt::Debug for UntilReady<'_, L, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilReady")
            .field("n", &self.n)
            .field("pacing", &self.pacing)
            .field("sleeping", &self.sleep.is_some())
            .finish()
    }
}

// Nothing in `UntilReady` is pinned in place: the sleep is boxed.
impl<L: ?Sized, T: Timer> Unpin for UntilReady<'_, L, T> {}

impl<L: Limiter + ?Sized, T: Timer> Future for UntilReady<'_, L, T> {
    type Output = Result<Decision, WaitError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let started = *this.started.get_or_insert_with(|| this.timer.elapsed());
        loop {
            if let Some(sleep) = this.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.sleep = None;
            }
            // The only charging call: an admission completes the future in this same poll.
            let d = this.limiter.try_acquire_n(this.n);
            if d.is_allowed() {
                return Poll::Ready(Ok(d));
            }
            let elapsed = this.timer.elapsed().saturating_sub(started);
            match this.pacing.next_wait(d, elapsed) {
                Ok(wait) => this.sleep = Some(Box::pin(this.timer.sleep(wait))),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(retry_ms: u64) -> Decision {
        Decision::denied(0, 0, retry_ms * 1_000_000, 0)
    }

    #[test]
    fn without_options_the_wait_is_exactly_retry_after() {
        let mut p = Pacing::new();
        assert_eq!(
            p.next_wait(denial(250), Duration::ZERO),
            Ok(Duration::from_millis(250))
        );
    }

    #[test]
    fn jitter_stays_within_its_bound_and_varies() {
        let mut p = Pacing::new().jitter(Duration::from_millis(10));
        let waits: Vec<_> = (0..200)
            .map(|_| p.next_wait(denial(100), Duration::ZERO).unwrap())
            .collect();
        assert!(waits
            .iter()
            .all(|w| *w >= Duration::from_millis(100) && *w <= Duration::from_millis(110)));
        assert!(waits.iter().any(|w| *w != waits[0]));
    }

    #[test]
    fn the_deadline_refuses_a_retry_past_it_and_cuts_jitter() {
        let mut p = Pacing::new()
            .jitter(Duration::from_secs(1))
            .deadline(Duration::from_millis(150));
        let d = denial(100);
        assert_eq!(
            p.next_wait(d, Duration::from_millis(60)),
            Err(WaitError::DeadlineExceeded(d))
        );
        let w = p.next_wait(d, Duration::from_millis(50)).unwrap();
        assert_eq!(w, Duration::from_millis(100)); // 100 + jitter, cut to what is left
    }
}
