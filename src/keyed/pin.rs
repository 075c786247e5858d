//! [`KeyedPin`]: a keyed map pinned on one thread for a batch of requests.

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};

use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::quota::Quota;

use super::map::{KeyedLimiter, Maps};
use super::options::KeyHasher;

/// A [`KeyedLimiter`] pinned on one thread for a batch of requests, made by
/// [`KeyedLimiter::pin`]. Not `Send`: drop it on the thread that made it, soon.
///
/// ```
/// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
/// let l = KeyedLimiter::<&str, _>::try_with_clock(Algorithm::FixedWindow, Quota::per_second(1)?, ManualClock::new())?;
/// let pin = l.pin();
/// assert!(pin.try_acquire(&"alice").is_allowed());
/// assert!(!pin.try_acquire(&"alice").is_allowed());
/// assert!(l.try_acquire(&"bob").is_allowed()); // the limiter itself stays usable
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct KeyedPin<'a, K, C = MonotonicClock, S = KeyHasher> {
    pub(super) limiter: &'a KeyedLimiter<K, C, S>,
    /// A guard of the collector of `limiter`'s one map.
    pub(super) guard: papaya::LocalGuard<'a>,
}

impl<K, C, S> KeyedPin<'_, K, C, S>
where
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    /// [`KeyedLimiter::try_acquire`], under this pin.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64, _>::try_with_clock(Algorithm::SlidingWindow, Quota::per_second(1)?, ManualClock::new())?;
    /// let pin = l.pin();
    /// assert!(pin.try_acquire(&1).is_allowed());
    /// assert!(!pin.try_acquire(&1).is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire(key, 1, &self.limiter.shared.quota)
    }

    /// [`KeyedLimiter::try_acquire_n`], under this pin.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(10)?, ManualClock::new())?;
    /// let pin = l.pin();
    /// assert!(pin.try_acquire_n(&9, 7).is_allowed());
    /// assert!(!pin.try_acquire_n(&9, 4).is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire(key, n, &self.limiter.shared.quota)
    }

    /// [`KeyedLimiter::try_acquire_with`], under this pin.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<&str, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?;
    /// let pro = Quota::per_second(3)?;
    /// let pin = l.pin();
    /// assert_eq!((0..5).filter(|_| pin.try_acquire_with(&"carol", &pro).is_allowed()).count(), 3);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire_with<Q>(&self, key: &Q, quota: &Quota) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire(key, 1, quota)
    }

    #[inline]
    fn acquire<Q>(&self, key: &Q, n: u64, quota: &Quota) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let l = self.limiter;
        with_map!(&l.maps, m => m.acquire(&l.shared, &l.time(), key, n, quota, &self.guard))
    }
}

impl<K, C, S> fmt::Debug for KeyedPin<'_, K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedPin").finish_non_exhaustive()
    }
}
