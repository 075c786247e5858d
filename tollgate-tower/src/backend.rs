//! Where decisions come from: the [`Backend`] trait, and [`LocalBackend`] over an in-process
//! [`KeyedLimiter`].

use core::convert::Infallible;
use core::future::{ready, Future, Ready};
use core::hash::{BuildHasher, Hash};

use tollgate::{
    Algorithm, Clock, Decision, KeyHasher, KeyedLimiter, MonotonicClock, Quota, QuotaError,
};

/// A source of rate-limit decisions per key: in process ([`LocalBackend`]) or remote (a
/// shared store reached over the network).
///
/// `try_acquire` takes the key by reference and returns a `'static` future, so a remote
/// backend serializes the key before it returns and an in-process one answers with a ready
/// future. The layer polls the future once at once: a ready answer costs no task wake-up and
/// no clone of the inner service; a pending one is awaited inside the response future.
/// A remote backend bounds its own wait (a timeout) and reports it as an `Err`; the layer
/// then answers as its [`OnError`](crate::OnError) setting says, never with an admission
/// the backend did not give.
///
/// ```
/// use core::future::{ready, Ready};
/// use tollgate::{Algorithm, Decision, KeyedLimiter, ManualClock, Quota};
/// use tollgate_tower::Backend;
///
/// /// Every key in one map: a backend written by hand.
/// struct ByTenant(KeyedLimiter<String, ManualClock>, Quota);
/// impl Backend for ByTenant {
///     type Key = String;
///     type Error = core::convert::Infallible;
///     type Future = Ready<Result<Decision, Self::Error>>;
///     fn try_acquire(&self, key: &String, cost: u64) -> Self::Future {
///         ready(Ok(self.0.try_acquire_n(key, cost)))
///     }
///     fn quota(&self) -> Quota {
///         self.1
///     }
/// }
/// let q = Quota::per_second(1)?;
/// let b = ByTenant(KeyedLimiter::with_clock(Algorithm::TokenBucket, q, ManualClock::new())?, q);
/// let _ = b.try_acquire(&"acme".to_owned(), 1);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Backend: Send + Sync + 'static {
    /// The key the backend counts by.
    type Key: Hash + Eq + Clone + Send + Sync + 'static;
    /// Why a decision could not be made (unreachable store, timeout).
    type Error: std::error::Error + Send + Sync + 'static;
    /// The decision in flight. `Unpin` so the layer can poll it in place (box a remote
    /// client's future: `Pin<Box<dyn Future<…> + Send>>` is `Unpin`).
    type Future: Future<Output = Result<Decision, Self::Error>> + Send + Unpin + 'static;

    /// Asks for `cost` units for `key`: all or none.
    fn try_acquire(&self, key: &Self::Key, cost: u64) -> Self::Future;

    /// The quota every key is limited to, for the `RateLimit-Policy` header.
    fn quota(&self) -> Quota;
}

/// A [`Backend`] over an in-process [`KeyedLimiter`]: decisions in nanoseconds, never an error.
///
/// ```
/// use tollgate::{Algorithm, ManualClock, Quota};
/// use tollgate_tower::{Backend, LocalBackend};
/// let b = LocalBackend::<u32, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?;
/// assert!(b.limiter().try_acquire(&7).is_allowed());
/// assert_eq!(b.quota(), Quota::per_second(1)?);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct LocalBackend<K, C = MonotonicClock, S = KeyHasher> {
    limiter: KeyedLimiter<K, C, S>,
    quota: Quota,
}

impl<K: Hash + Eq, C, S: BuildHasher> core::fmt::Debug for LocalBackend<K, C, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LocalBackend")
            .field("limiter", &self.limiter)
            .field("quota", &self.quota)
            .finish()
    }
}

impl<K: Hash + Eq> LocalBackend<K> {
    /// One `algorithm` limiter per key, each with `quota`, on the default clock.
    ///
    /// # Errors
    /// The algorithm cannot represent the quota (see `KeyedBuilder::build`).
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota};
    /// let b = tollgate_tower::LocalBackend::<std::net::IpAddr>::try_new(Algorithm::SlidingWindow, Quota::per_minute(60)?)?;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_new(algorithm: Algorithm, quota: Quota) -> Result<Self, QuotaError> {
        Ok(LocalBackend {
            limiter: KeyedLimiter::new(algorithm, quota)?,
            quota,
        })
    }
}

impl<K: Hash + Eq, C: Clock> LocalBackend<K, C> {
    /// As [`LocalBackend::try_new`], reading time from `clock` (a `ManualClock` in tests).
    ///
    /// # Errors
    /// The algorithm cannot represent the quota.
    ///
    /// ```
    /// use tollgate::{Algorithm, ManualClock, Quota};
    /// let b = tollgate_tower::LocalBackend::<u64, _>::try_with_clock(Algorithm::FixedWindow, Quota::per_second(9)?, ManualClock::new())?;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_with_clock(
        algorithm: Algorithm,
        quota: Quota,
        clock: C,
    ) -> Result<Self, QuotaError> {
        Ok(LocalBackend {
            limiter: KeyedLimiter::with_clock(algorithm, quota, clock)?,
            quota,
        })
    }
}

impl<K, C, S> LocalBackend<K, C, S> {
    /// The keyed limiter, e.g. to run [`KeyedLimiter::evict_idle`] from a periodic task.
    ///
    /// ```
    /// use tollgate::{Algorithm, ManualClock, Quota};
    /// let b = tollgate_tower::LocalBackend::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(9)?, ManualClock::new())?;
    /// assert_eq!(b.limiter().evict_idle(), 0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn limiter(&self) -> &KeyedLimiter<K, C, S> {
        &self.limiter
    }
}

impl<K, C, S> Backend for LocalBackend<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Send + Sync + 'static,
{
    type Key = K;
    type Error = Infallible;
    type Future = Ready<Result<Decision, Infallible>>;

    #[inline]
    fn try_acquire(&self, key: &K, cost: u64) -> Self::Future {
        ready(Ok(self.limiter.try_acquire_n(key, cost)))
    }

    fn quota(&self) -> Quota {
        self.quota
    }
}
