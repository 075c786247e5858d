//! [`KeyedBuilder`]: a keyed map's settings beyond algorithm and quota, and its build.

use core::hash::{BuildHasher, Hash};
use core::num::NonZeroUsize;

use crate::algo::fixed_window::Fixed;
use crate::algo::sliding_window::Sliding;
use crate::algo::Algo;
use crate::clock::{Clock, MonotonicClock, Origin};
use crate::quota::{Quota, QuotaError};
use crate::sync::AtomicU64;

use super::error::KeyedError;
use super::live::LivePlans;
use super::map::{Bound, Keyed, KeyedLimiter, Maps, Shared};
use super::options::{Algorithm, KeyHasher, WhenFull};
use super::plans::{Boxed, Plans};

/// Settings for a [`KeyedLimiter`] beyond algorithm and quota: the hasher and a bound on the
/// number of keys. Made by [`KeyedLimiter::builder`].
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::{Algorithm, KeyedLimiter, Quota, WhenFull};
///
/// let per_ip = KeyedLimiter::<std::net::IpAddr>::builder(Algorithm::TokenBucket, Quota::per_second(10)?)
///     .max_keys(NonZeroUsize::new(100_000).unwrap(), WhenFull::Deny)
///     .hasher(std::collections::hash_map::RandomState::new()) // SipHash, if you prefer
///     .build()?;
/// # let _ = per_ip;
/// # Ok::<(), tollgate::KeyedError>(())
/// ```
#[derive(Clone, Debug)]
pub struct KeyedBuilder<K, S = KeyHasher> {
    pub(super) algorithm: Algorithm,
    pub(super) quota: Quota,
    pub(super) hasher: S,
    pub(super) bound: Option<(NonZeroUsize, WhenFull)>,
    pub(super) capacity: usize,
    pub(super) live: bool,
    pub(super) _key: core::marker::PhantomData<fn(K)>,
}

impl<K, S> KeyedBuilder<K, S> {
    /// Hash keys with `hasher` instead of [`KeyHasher`].
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64>::builder(Algorithm::FixedWindow, Quota::per_second(3)?)
    ///     .hasher(std::hash::RandomState::new())
    ///     .build_with_clock(ManualClock::new())?;
    /// assert!(l.try_acquire(&7).is_allowed());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn hasher<S2>(self, hasher: S2) -> KeyedBuilder<K, S2> {
        KeyedBuilder {
            algorithm: self.algorithm,
            quota: self.quota,
            hasher,
            bound: self.bound,
            capacity: self.capacity,
            live: self.live,
            _key: core::marker::PhantomData,
        }
    }

    /// Let the map's quota and its plans' change while it runs, with
    /// [`KeyedLimiter::set_quota`] and [`KeyedLimiter::set_plan_quota`]. For the token bucket
    /// and the fixed window; [`KeyedBuilder::build`] refuses it for the others
    /// ([`KeyedError::NotLive`]).
    ///
    /// A change reaches every key of its plan as the single [`Live`](crate::Live) limiters'
    /// does (what was used carries over: see there). Requests read their plan's parameters
    /// from a two-slot cell (a few loads, never a wait); a live token bucket keeps each key's
    /// `tat` beside the version it is counted in, in one 16-byte word (32 bytes a key in all,
    /// against 16), and a token bucket change walks the map once to carry the plan's keys. Maps
    /// built without `live` pay nothing for it.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let per_ip = KeyedLimiter::<u32, _>::builder(Algorithm::TokenBucket, Quota::per_second(10)?)
    ///     .live()
    ///     .build_with_clock(ManualClock::new())?;
    /// assert!(per_ip.try_acquire_n(&7, 10).is_allowed()); // drained
    /// per_ip.set_quota(Quota::per_second(100)?)?; // loosened: at once, 10 of 100 used
    /// assert_eq!(per_ip.try_acquire(&7).remaining(), 89);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn live(mut self) -> Self {
        self.live = true;
        self
    }

    /// Keep at most about `max_keys` keys (the automatic mode, for users who never call
    /// [`KeyedLimiter::evict_idle`]).
    ///
    /// A new key that finds the map full sweeps it with `evict_idle` first; sweeps are
    /// throttled so that a flood of new keys cannot make every request scan the map: at most
    /// one per quota period, or sooner once `max_keys / 16` new keys have found the map full
    /// since the last one. If the map is still full, `when_full` decides. Racing first
    /// requests may overshoot the bound by at most the number of threads inserting at once.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota, WhenFull};
    /// let l = KeyedLimiter::builder(Algorithm::TokenBucket, Quota::per_second(1)?)
    ///     .max_keys(NonZeroUsize::new(1).unwrap(), WhenFull::Deny)
    ///     .build_with_clock(ManualClock::new())?;
    /// assert!(l.try_acquire(&1u8).is_allowed());
    /// assert!(!l.try_acquire(&2u8).is_allowed()); // full of a key that is not idle
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn max_keys(mut self, max_keys: NonZeroUsize, when_full: WhenFull) -> Self {
        self.bound = Some((max_keys, when_full));
        self
    }

    /// Make room for `keys` keys up front, so that the map does not grow (and copy itself)
    /// while the first `keys` keys arrive. Only a hint: the map grows past it as needed.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64>::builder(Algorithm::TokenBucket, Quota::per_second(5)?)
    ///     .capacity(10_000)
    ///     .build_with_clock(ManualClock::new())?;
    /// assert!(l.is_empty());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn capacity(mut self, keys: usize) -> Self {
        self.capacity = keys;
        self
    }

    /// The limiter, on the default [`MonotonicClock`].
    ///
    /// # Errors
    /// The algorithm cannot represent the quota: [`QuotaError::RateTooHigh`] for the sliding
    /// window, [`QuotaError::LogTooLarge`] for the sliding log.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, Quota};
    /// let l = KeyedLimiter::<String>::builder(Algorithm::TokenBucket, Quota::per_minute(60)?).build()?;
    /// assert!(l.try_acquire("key-123").is_allowed());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn build(self) -> Result<KeyedLimiter<K, MonotonicClock, S>, KeyedError>
    where
        K: Hash + Eq,
        S: BuildHasher,
    {
        self.build_with_clock(MonotonicClock::new())
    }

    /// The limiter, reading time from `clock`.
    ///
    /// # Errors
    /// As [`KeyedBuilder::build`].
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64>::builder(Algorithm::SlidingLog, Quota::per_second(2)?)
    ///     .build_with_clock(ManualClock::new())?;
    /// assert!(l.try_acquire(&1).is_allowed());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn build_with_clock<C: Clock>(self, clock: C) -> Result<KeyedLimiter<K, C, S>, KeyedError>
    where
        K: Hash + Eq,
        S: BuildHasher,
    {
        if self.live
            && !matches!(
                self.algorithm,
                Algorithm::TokenBucket | Algorithm::FixedWindow
            )
        {
            return Err(KeyedError::NotLive);
        }
        Ok(self.assemble(clock)?)
    }

    /// The limiter, once `live` is known to fit the algorithm (the sliding window and the
    /// sliding log are built in their one form).
    pub(super) fn assemble<C: Clock>(self, clock: C) -> Result<KeyedLimiter<K, C, S>, QuotaError>
    where
        K: Hash + Eq,
        S: BuildHasher,
    {
        // Validate once: every key's limiter is made from this quota (or a plan's, checked when
        // its key is first seen).
        let (quota, hasher, capacity) = (&self.quota, self.hasher, self.capacity);
        let maps = match (self.algorithm, self.live) {
            (Algorithm::TokenBucket, false) => {
                Maps::TokenBucket(Keyed::new(Plans::new(quota)?, hasher, capacity))
            }
            (Algorithm::FixedWindow, false) => {
                Maps::FixedWindow(Keyed::new(Plans::new(quota)?, hasher, capacity))
            }
            (Algorithm::SlidingWindow, _) => {
                Maps::SlidingWindow(Keyed::checked(Boxed::new(), quota, hasher, capacity)?)
            }
            (Algorithm::SlidingLog, _) => {
                Maps::SlidingLog(Keyed::checked(Boxed::new(), quota, hasher, capacity)?)
            }
            (Algorithm::TokenBucket, true) => {
                Maps::LiveTokenBucket(Keyed::new(LivePlans::new(quota)?, hasher, capacity))
            }
            (Algorithm::FixedWindow, true) => {
                Maps::LiveFixedWindow(Keyed::new(LivePlans::new(quota)?, hasher, capacity))
            }
        };
        // The map's time starts now, aligned to the map's quota's window (or slot) length, so
        // that its windows stay aligned to the clock's zero (see `KeyedLimiter`).
        let grain = match self.algorithm {
            Algorithm::FixedWindow => {
                <Fixed as Algo>::params(quota).map_or(1, |p| Fixed::grain(&p))
            }
            Algorithm::SlidingWindow => {
                <Sliding as Algo>::params(quota).map_or(1, |g| Sliding::grain(&g))
            }
            Algorithm::TokenBucket | Algorithm::SlidingLog => 1,
        };
        let origin = Origin::of(&clock, grain);
        Ok(KeyedLimiter {
            maps,
            shared: Shared {
                algorithm: self.algorithm,
                quota: self.quota,
                evicted: AtomicU64::new(0),
                skew: clock.max_skew_nanos(),
                bound: self.bound.map(|(max_keys, when_full)| Bound {
                    max_keys: max_keys.get(),
                    when_full,
                    last_sweep_ns: AtomicU64::new(0),
                    full_misses: AtomicU64::new(0),
                }),
            },
            clock,
            origin,
        })
    }
}
