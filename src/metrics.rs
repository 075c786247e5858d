//! Counters per limiter: allowed, denied, exceeded capacity, evicted keys.
//!
//! [`Metered`] wraps a limiter (or a keyed map) and counts every decision it passes through;
//! a limiter that is not wrapped pays nothing. [`Metered::snapshot`] sums the counters into a
//! [`MetricsSnapshot`], for an exporter (copy it into your metrics library's counters when
//! scraped). With the `tracing` feature every denial is also a `tracing` event (target
//! `tollgate`, level DEBUG, fields `limiter`, `cost`, `remaining`, `retry_after_ns`,
//! `exceeds_capacity`).
//!
//! # Layout
//!
//! | stripe (one per cache line pair)    | counter             | counts                         |
//! |-------------------------------------|---------------------|--------------------------------|
//! | `stripes[thread index & mask]`      | `allowed`           | admissions                     |
//! |                                     | `denied`            | denials that a retry can pass  |
//! |                                     | `exceeded`          | costs above the capacity       |
//!
//! Evicted keys are not counted by the wrapper: a keyed map counts its own sweeps (its
//! `evict_idle` and a bounded map's sweeps when full), and a snapshot reads that count.
//!
//! Each thread is given an index once, round robin, and always counts in the stripe of that
//! index, so threads fewer than the stripes never share a line: a denial flood writes no line
//! that another thread writes or that the limiter's state lives on.
//!
//! # Orderings
//!
//! Every counter is a `Relaxed` `fetch_add`: a counter is a number, not a message, and an
//! RMW never loses an increment however many threads share a stripe. A snapshot is `Relaxed`
//! loads of every stripe: each counter in it is one the counters really passed through, but
//! a snapshot taken during traffic is not one instant across the counters.

use core::fmt;
use std::borrow::Cow;
use std::boxed::Box;

use crossbeam_utils::CachePadded;

use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::sync::{AtomicU64, Ordering, StaticAtomicUsize};

/// The most stripes a limiter's counters are split into.
const MAX_STRIPES: usize = 64;

/// Each thread's stripe index, handed out round robin on its first count.
fn thread_index() -> usize {
    static NEXT: StaticAtomicUsize = StaticAtomicUsize::new(0);
    std::thread_local! {
        // Relaxed: an index only has to differ from the last few threads', and RMWs on one
        // word hand out distinct values whatever the ordering.
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

#[derive(Debug, Default)]
struct Stripe {
    allowed: AtomicU64,
    denied: AtomicU64,
    exceeded: AtomicU64,
}

/// What a [`Metered`] limiter has counted so far. Each counter only grows.
///
/// `allowed`, `denied` and `exceeded_capacity` are disjoint: every decision counts once, in
/// one of them. `evicted_keys` is the keys a metered keyed map has evicted, by
/// [`evict_idle`](Metered::evict_idle) or by its bound's own sweeps (see [`Observed`]).
///
/// ```
/// use tollgate::{Limiter, ManualClock, Metered, Quota, TokenBucket};
/// let bucket = Metered::new(TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new()));
/// for _ in 0..3 {
///     let _ = bucket.try_acquire();
/// }
/// let _ = bucket.try_acquire_n(10);
/// let s = bucket.snapshot();
/// assert_eq!((s.allowed, s.denied, s.exceeded_capacity), (2, 1, 1));
/// assert_eq!(s.decisions(), 4);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Requests admitted.
    pub allowed: u64,
    /// Requests denied that a later retry could pass.
    pub denied: u64,
    /// Requests denied because their cost is above what the limiter can ever allow.
    pub exceeded_capacity: u64,
    /// Keys removed by eviction (keyed maps only).
    pub evicted_keys: u64,
}

impl MetricsSnapshot {
    /// All decisions counted: allowed, denied and exceeded capacity.
    ///
    /// ```
    /// let s = tollgate::MetricsSnapshot::default();
    /// assert_eq!(s.decisions(), 0);
    /// ```
    pub fn decisions(&self) -> u64 {
        self.allowed + self.denied + self.exceeded_capacity
    }
}

/// A limiter (or a keyed one, any [`KeyedLimit`](crate::KeyedLimit)) that counts its decisions.
///
/// It answers exactly as the limiter it wraps, and adds one `Relaxed` increment of a counter
/// in the calling thread's stripe per decision (see the module's layout). A limiter that is
/// not wrapped pays nothing.
///
/// ```
/// use tollgate::{Limiter, ManualClock, Metered, Quota, SlidingWindow};
/// let clock = ManualClock::new();
/// let api = Metered::named("api", SlidingWindow::with_clock(Quota::per_second(100)?, clock));
/// let passed = (0..150).filter(|_| api.try_acquire().is_allowed()).count();
/// assert_eq!(passed, 100);
/// assert_eq!(api.snapshot().denied, 50);
/// assert_eq!(api.name(), "api");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct Metered<L> {
    inner: L,
    name: Cow<'static, str>,
    stripes: Box<[CachePadded<Stripe>]>,
}

/// What a [`Metered`] snapshot reads from the limiter it wraps, besides the decisions it
/// counted: the keys a keyed map has evicted ([`KeyedLimiter::evicted_keys`], none for the
/// other limiters). Implemented for every [`Limiter`], for
/// [`KeyedLimiter`](crate::KeyedLimiter) and for [`SketchLimiter`](crate::SketchLimiter)
/// (which never evicts); sealed.
///
/// [`KeyedLimiter::evicted_keys`]: crate::KeyedLimiter::evicted_keys
///
/// ```
/// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Metered, Observed, Quota, TokenBucket};
/// fn evicted<L: Observed>(m: &Metered<L>) -> u64 {
///     m.snapshot().evicted_keys
/// }
/// let bucket = Metered::new(TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new()));
/// let map = Metered::new(KeyedLimiter::<u64, _>::try_with_clock(
///     Algorithm::FixedWindow, Quota::per_second(1)?, ManualClock::new())?);
/// assert_eq!((evicted(&bucket), evicted(&map)), (0, 0));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Observed: sealed::Sealed {
    /// Keys evicted since the limiter was made.
    ///
    /// ```
    /// use tollgate::{ManualClock, Observed, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// assert_eq!(bucket.evicted_keys(), 0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn evicted_keys(&self) -> u64;
}

mod sealed {
    pub trait Sealed {}
    impl<L: super::Limiter + ?Sized> Sealed for L {}
    impl<K, C, S> Sealed for crate::keyed::KeyedLimiter<K, C, S> {}
    impl<K: ?Sized, C, S> Sealed for crate::sketch::SketchLimiter<K, C, S> {}
}

impl<L: Limiter + ?Sized> Observed for L {
    #[inline]
    fn evicted_keys(&self) -> u64 {
        0
    }
}

impl<L> Metered<L> {
    /// Counts the decisions of `inner`, with no name.
    ///
    /// ```
    /// use tollgate::{Limiter, ManualClock, Metered, Quota, FixedWindow};
    /// let w = Metered::new(FixedWindow::with_clock(Quota::per_second(1)?, ManualClock::new()));
    /// assert!(w.try_acquire().is_allowed());
    /// assert_eq!(w.snapshot().allowed, 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(inner: L) -> Self {
        Metered::named("", inner)
    }

    /// Counts the decisions of `inner` under `name` (for exporters and `tracing` events).
    ///
    /// ```
    /// use tollgate::{ManualClock, Metered, Quota, TokenBucket};
    /// let b = Metered::named("per-route", TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new()));
    /// assert_eq!(b.name(), "per-route");
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn named(name: impl Into<Cow<'static, str>>, inner: L) -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let stripes = threads.next_power_of_two().min(MAX_STRIPES);
        Metered {
            inner,
            name: name.into(),
            stripes: (0..stripes).map(|_| CachePadded::default()).collect(),
        }
    }

    /// The name given to [`Metered::named`] (empty for [`Metered::new`]).
    ///
    /// ```
    /// use tollgate::{ManualClock, Metered, Quota, TokenBucket};
    /// let b = Metered::new(TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new()));
    /// assert_eq!(b.name(), "");
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The wrapped limiter. Requests made on it directly are not counted.
    ///
    /// ```
    /// use tollgate::{Limiter, ManualClock, Metered, Quota, TokenBucket};
    /// let b = Metered::new(TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new()));
    /// let _ = b.get_ref().try_acquire();
    /// assert_eq!(b.snapshot().allowed, 0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn get_ref(&self) -> &L {
        &self.inner
    }
}

impl<L: Observed> Metered<L> {
    /// The counters so far, summed over the stripes.
    ///
    /// ```
    /// use tollgate::{Limiter, ManualClock, Metered, Quota, TokenBucket};
    /// let b = Metered::new(TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new()));
    /// let _ = (b.try_acquire(), b.try_acquire());
    /// let s = b.snapshot();
    /// assert_eq!((s.allowed, s.denied), (1, 1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut s = MetricsSnapshot {
            evicted_keys: self.inner.evicted_keys(),
            ..MetricsSnapshot::default()
        };
        for stripe in self.stripes.iter() {
            // Relaxed: each counter is read on its own; see the module's orderings.
            s.allowed += stripe.allowed.load(Ordering::Relaxed);
            s.denied += stripe.denied.load(Ordering::Relaxed);
            s.exceeded_capacity += stripe.exceeded.load(Ordering::Relaxed);
        }
        s
    }
}

impl<L> Metered<L> {
    /// Counts `d` in the calling thread's stripe (and, with `tracing`, reports a denial).
    #[inline]
    fn record(&self, n: u64, d: &Decision) {
        let stripe = &self.stripes[thread_index() & (self.stripes.len() - 1)];
        let counter = if d.is_allowed() {
            &stripe.allowed
        } else if d.exceeds_capacity() {
            &stripe.exceeded
        } else {
            &stripe.denied
        };
        // Relaxed: a count publishes nothing; the RMW loses no increment.
        counter.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "tracing")]
        if !d.is_allowed() {
            tracing::debug!(
                target: "tollgate",
                limiter = %self.name,
                cost = n,
                remaining = d.remaining(),
                retry_after_ns = d.retry_after().map(crate::clock::duration_to_nanos),
                exceeds_capacity = d.exceeds_capacity(),
                "request denied"
            );
        }
        #[cfg(not(feature = "tracing"))]
        let _ = n;
    }
}

impl<L: fmt::Debug + Observed> fmt::Debug for Metered<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metered")
            .field("name", &self.name)
            .field("inner", &self.inner)
            .field("counts", &self.snapshot())
            .finish()
    }
}

impl<L: Limiter> Limiter for Metered<L> {
    #[inline]
    fn try_acquire_n(&self, n: u64) -> Decision {
        let d = self.inner.try_acquire_n(n);
        self.record(n, &d);
        d
    }

    /// The wrapped limiter's peek; not counted (nothing was decided).
    #[inline]
    fn peek(&self, n: u64) -> Decision {
        self.inner.peek(n)
    }

    /// The wrapped limiter's refund; the counts stay (the decision was made).
    fn refund(&self, n: u64) -> u64 {
        self.inner.refund(n)
    }
}

mod keyed {
    use super::*;
    use crate::clock::Clock;
    use crate::keyed::{KeyedLimit, KeyedLimiter};
    use crate::quota::Quota;
    use crate::sketch::SketchLimiter;
    use core::borrow::Borrow;
    use core::hash::{BuildHasher, Hash};

    /// A metered keyed limiter: the wrapped limiter's answers, each counted.
    ///
    /// ```
    /// use tollgate::{KeyedLimit, ManualClock, Metered, Quota, SketchLimiter, SketchSize};
    /// let per_ip = Metered::new(SketchLimiter::<str, _>::with_clock(
    ///     Quota::per_second(1)?, SketchSize::columns(64)?, ManualClock::new()));
    /// let _ = (per_ip.try_acquire("10.0.0.1"), per_ip.try_acquire("10.0.0.1"));
    /// assert_eq!((per_ip.snapshot().allowed, per_ip.snapshot().denied), (1, 1));
    /// assert_eq!(KeyedLimit::<str>::quota(&per_ip), Quota::per_second(1)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    impl<Q: ?Sized, L: KeyedLimit<Q>> KeyedLimit<Q> for Metered<L> {
        #[inline]
        fn try_acquire_n(&self, key: &Q, n: u64) -> Decision {
            let d = self.inner.try_acquire_n(key, n);
            self.record(n, &d);
            d
        }

        #[inline]
        fn quota(&self) -> Quota {
            self.inner.quota()
        }
    }

    /// None: a sketch counts every key in fixed memory and never evicts.
    impl<K: ?Sized, C, S> Observed for SketchLimiter<K, C, S> {
        fn evicted_keys(&self) -> u64 {
            0
        }
    }

    /// The keys a keyed map has evicted, by whichever sweep.
    impl<K, C, S> Observed for KeyedLimiter<K, C, S>
    where
        K: Hash + Eq,
        C: Clock,
        S: BuildHasher,
    {
        fn evicted_keys(&self) -> u64 {
            KeyedLimiter::evicted_keys(self)
        }
    }

    /// A metered keyed map: the map's methods, counted. Its snapshot's `evicted_keys` is the
    /// map's own count ([`KeyedLimiter::evicted_keys`]): every sweep's, the bounded map's own
    /// included.
    impl<K, C, S> Metered<KeyedLimiter<K, C, S>>
    where
        K: Hash + Eq,
        C: Clock,
        S: BuildHasher,
    {
        /// [`KeyedLimiter::try_acquire`], counted.
        ///
        /// ```
        /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Metered, Quota};
        /// let users = Metered::new(KeyedLimiter::<&str, _>::try_with_clock(
        ///     Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?);
        /// let _ = (users.try_acquire(&"alice"), users.try_acquire(&"alice"));
        /// assert_eq!(users.snapshot().denied, 1);
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        #[inline]
        pub fn try_acquire<Q>(&self, key: &Q) -> Decision
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        {
            self.try_acquire_n(key, 1)
        }

        /// [`KeyedLimiter::try_acquire_n`], counted.
        ///
        /// ```
        /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Metered, Quota};
        /// let users = Metered::new(KeyedLimiter::<u64, _>::try_with_clock(
        ///     Algorithm::FixedWindow, Quota::per_second(5)?, ManualClock::new())?);
        /// let _ = users.try_acquire_n(&7, 6);
        /// assert_eq!(users.snapshot().exceeded_capacity, 1);
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        #[inline]
        pub fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> Decision
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        {
            KeyedLimit::try_acquire_n(self, key, n)
        }

        /// [`KeyedLimiter::try_acquire_with`], counted.
        ///
        /// ```
        /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Metered, Quota};
        /// let users = Metered::new(KeyedLimiter::<u64, _>::try_with_clock(
        ///     Algorithm::SlidingLog, Quota::per_second(1)?, ManualClock::new())?);
        /// assert!(users.try_acquire_with(&1, &Quota::per_second(2)?).is_allowed());
        /// assert_eq!(users.snapshot().allowed, 1);
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        #[inline]
        pub fn try_acquire_with<Q>(&self, key: &Q, quota: &Quota) -> Decision
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        {
            let d = self.inner.try_acquire_with(key, quota);
            self.record(1, &d);
            d
        }

        /// [`KeyedLimiter::evict_idle`] (the map counts the keys it removed).
        ///
        /// ```
        /// use std::time::Duration;
        /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Metered, Quota};
        /// let clock = ManualClock::new();
        /// let users = Metered::new(KeyedLimiter::<u64, _>::try_with_clock(
        ///     Algorithm::TokenBucket, Quota::per_second(1)?, clock.clone())?);
        /// let _ = (users.try_acquire(&1), users.try_acquire(&2));
        /// clock.advance(Duration::from_secs(1));
        /// assert_eq!(users.evict_idle(), 2);
        /// assert_eq!(users.snapshot().evicted_keys, 2);
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        pub fn evict_idle(&self) -> usize {
            self.inner.evict_idle()
        }
    }
}

/// Every stripe's counters, for tests that check the striping itself.
#[cfg(test)]
impl<L> Metered<L> {
    fn per_stripe(&self) -> std::vec::Vec<u64> {
        self.stripes
            .iter()
            // Relaxed: read after the counting threads joined.
            .map(|s| s.allowed.load(Ordering::Relaxed) + s.denied.load(Ordering::Relaxed))
            .collect()
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use crate::{ManualClock, Quota, TokenBucket};

    #[test]
    fn threads_count_in_their_own_stripes_and_nothing_is_lost() {
        let m = Metered::new(TokenBucket::with_clock(
            Quota::per_second(1_000).unwrap(),
            ManualClock::new(),
        ));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1_000 {
                        let _ = m.try_acquire();
                    }
                });
            }
        });
        let snap = m.snapshot();
        assert_eq!(snap.allowed, 1_000); // the bucket's burst, exactly
        assert_eq!(snap.decisions(), 4_000);
        let per_stripe = m.per_stripe();
        assert_eq!(per_stripe.iter().sum::<u64>(), 4_000);
    }
}
