//! [`KeyedLimiter`]: the map of one algorithm's slots, its requests, sweeps and bound.

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};

use crate::algo::fixed_window::Fixed;
use crate::algo::sliding_log::Log;
use crate::algo::sliding_window::Sliding;
use crate::algo::token_bucket::Gcra;
use crate::clock::{Clock, MonotonicClock, Origin, Since};
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::sync::{AtomicU64, Ordering};

use super::builder::KeyedBuilder;
use super::error::KeyedError;
use super::live::{LiveMap, LivePlans};
use super::options::{Algorithm, KeyHasher, WhenFull};
use super::pin::KeyedPin;
use super::plans::{Boxed, Plans, SlotMaker};

/// Every this many new keys, the inserting thread hands what the map retired (old tables,
/// removed entries) to the epoch collector.
pub(super) const FLUSH_EVERY: usize = 1024;

/// Entries a write copies from the old table while the map grows (papaya's default: 64).
pub(super) const RESIZE_CHUNK: usize = 1024;

/// The capacity bound and its sweep throttle.
pub(super) struct Bound {
    pub(super) max_keys: usize,
    pub(super) when_full: WhenFull,
    /// The map's now at the last sweep. Relaxed throughout: a throttle hint, not a publication.
    pub(super) last_sweep_ns: AtomicU64,
    /// New keys that found the map full since the last sweep.
    pub(super) full_misses: AtomicU64,
}

/// One rate limiter per key, made on the key's first request: per client IP, API key, user
/// or route, with a quota per plan if wanted, idle eviction, and an optional bound on memory.
///
/// Every key's limiter runs the same [`Algorithm`]; its quota is the map's, or the one given
/// with the key's first request ([`KeyedLimiter::try_acquire_with`]). One clock serves the
/// whole map and is read once per request (again if the request races its key's eviction).
/// Lookups take the key by reference, in any borrowed form (`&str` for `String` keys); only a
/// key's first request allocates.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
///
/// // One limiter per user, a rule per plan.
/// let free = Quota::per_second(5)?;
/// let pro = Quota::per_second(50)?;
/// let clock = ManualClock::new();
/// let users = KeyedLimiter::<String, _>::try_with_clock(Algorithm::TokenBucket, free, clock.clone())?;
///
/// let alice = (0..10).filter(|_| users.try_acquire("alice").is_allowed()).count();
/// let carol = (0..60).filter(|_| users.try_acquire_with("carol", &pro).is_allowed()).count();
/// assert_eq!((alice, carol), (5, 50));
///
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(users.evict_idle(), 2); // both full again: removed, memory returned
/// assert!(users.is_empty());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct KeyedLimiter<K, C = MonotonicClock, S = KeyHasher> {
    pub(super) maps: Maps<K, S>,
    pub(super) shared: Shared,
    pub(super) clock: C,
    /// Where the map's time starts: every key's limiter, and every sweep, counts from it.
    pub(super) origin: Origin,
}

/// What every map type's request path reads besides its map.
pub(super) struct Shared {
    pub(super) algorithm: Algorithm,
    pub(super) quota: Quota,
    /// Keys removed by sweeps, `evict_idle`'s and the bound's. Relaxed: a count, written once
    /// per sweep.
    pub(super) evicted: AtomicU64,
    pub(super) bound: Option<Bound>,
    /// The clock's [`Clock::max_skew_nanos`], read once: the margin a sweep keeps.
    pub(super) skew: u64,
}

/// The map of one algorithm: one value type per algorithm, so that a request dispatches once
/// (on this enum) and the slot's code is specialized.
pub(super) enum Maps<K, S> {
    TokenBucket(Keyed<K, Plans<Gcra>, S>),
    FixedWindow(Keyed<K, Plans<Fixed>, S>),
    SlidingWindow(Keyed<K, Boxed<Sliding>, S>),
    SlidingLog(Keyed<K, Boxed<Log>, S>),
    LiveTokenBucket(Keyed<K, LivePlans<Gcra>, S>),
    LiveFixedWindow(Keyed<K, LivePlans<Fixed>, S>),
}

/// Runs `$body` with `$m` bound to the map, whichever algorithm it is.
macro_rules! with_map {
    ($maps:expr, $m:ident => $body:expr) => {
        match $maps {
            Maps::TokenBucket($m) => $body,
            Maps::FixedWindow($m) => $body,
            Maps::SlidingWindow($m) => $body,
            Maps::SlidingLog($m) => $body,
            Maps::LiveTokenBucket($m) => $body,
            Maps::LiveFixedWindow($m) => $body,
        }
    };
}

/// One algorithm's map and how it makes a new key's limiter.
pub(super) struct Keyed<K, M: SlotMaker, S> {
    pub(super) maker: M,
    pub(super) map: papaya::HashMap<K, M::Slot, S>,
}

impl<K: Hash + Eq> KeyedLimiter<K> {
    /// A keyed limiter on the default [`MonotonicClock`], unbounded, with the default hasher.
    ///
    /// # Errors
    /// The algorithm cannot represent the quota (see [`KeyedBuilder::build`]).
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, Quota};
    /// let per_ip = KeyedLimiter::<std::net::IpAddr>::try_new(Algorithm::TokenBucket, Quota::per_second(100)?)?;
    /// assert!(per_ip.try_acquire(&"10.0.0.1".parse().unwrap()).is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_new(algorithm: Algorithm, quota: Quota) -> Result<Self, QuotaError> {
        KeyedLimiter::builder(algorithm, quota).assemble(MonotonicClock::new())
    }

    /// Settings beyond algorithm and quota: a bound on the keys, another hasher.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64>::builder(Algorithm::FixedWindow, Quota::per_second(1)?)
    ///     .build_with_clock(ManualClock::new())?;
    /// assert!(l.is_empty());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn builder(algorithm: Algorithm, quota: Quota) -> KeyedBuilder<K> {
        KeyedBuilder {
            algorithm,
            quota,
            hasher: KeyHasher::default(),
            bound: None,
            capacity: 0,
            live: false,
            _key: core::marker::PhantomData,
        }
    }
}

impl<K: Hash + Eq, C: Clock> KeyedLimiter<K, C> {
    /// A keyed limiter reading time from `clock`, unbounded, with the default hasher.
    ///
    /// # Errors
    /// The algorithm cannot represent the quota (see [`KeyedBuilder::build`]).
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64, _>::try_with_clock(Algorithm::SlidingWindow, Quota::per_second(2)?, ManualClock::new())?;
    /// assert!(l.try_acquire(&1).is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_with_clock(
        algorithm: Algorithm,
        quota: Quota,
        clock: C,
    ) -> Result<Self, QuotaError> {
        KeyedLimiter::builder(algorithm, quota).assemble(clock)
    }
}

impl<K, C, S> KeyedLimiter<K, C, S>
where
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    /// Asks for one unit for `key`, making the key's limiter (from the map's quota) on its
    /// first request.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<&str, _>::try_with_clock(Algorithm::FixedWindow, Quota::per_second(1)?, ManualClock::new())?;
    /// assert!(l.try_acquire(&"alice").is_allowed());
    /// assert!(!l.try_acquire(&"alice").is_allowed());
    /// assert!(l.try_acquire(&"bob").is_allowed()); // every key has its own limiter
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire(key, 1, &self.shared.quota)
    }

    /// Asks for `n` units for `key` at once: all or none (see
    /// [`Limiter::try_acquire_n`](crate::Limiter::try_acquire_n)).
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(10)?, ManualClock::new())?;
    /// assert!(l.try_acquire_n(&9, 7).is_allowed());
    /// assert!(!l.try_acquire_n(&9, 4).is_allowed());
    /// assert!(l.try_acquire_n(&9, 11).exceeds_capacity());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire(key, n, &self.shared.quota)
    }

    /// Asks for one unit for `key`; if the key has no limiter yet, makes it from `quota` (a
    /// plan's rule) instead of the map's. A key keeps the quota it was made with until it is
    /// evicted.
    ///
    /// For the token bucket and the fixed window, the keys of one quota share its parameters:
    /// each distinct quota is kept once (about 100 bytes) for the map's life, so pass a few
    /// plans' quotas, not a quota computed per key.
    ///
    /// If the map's algorithm cannot represent `quota` (see [`KeyedLimiter::check_quota`]),
    /// the request is denied with [`Decision::exceeds_capacity`]: check plans up front.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let (free, pro) = (Quota::per_second(5)?, Quota::per_second(50)?);
    /// let l = KeyedLimiter::<&str, _>::try_with_clock(Algorithm::SlidingLog, free, ManualClock::new())?;
    /// let pro_passed = (0..60).filter(|_| l.try_acquire_with(&"carol", &pro).is_allowed()).count();
    /// assert_eq!(pro_passed, 50);
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

    /// Whether this map's algorithm can make a limiter from `quota`: the check to run on each
    /// plan's quota before passing it to [`KeyedLimiter::try_acquire_with`].
    ///
    /// # Errors
    /// [`QuotaError::RateTooHigh`] (sliding window), [`QuotaError::LogTooLarge`] (sliding log).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64, _>::try_with_clock(Algorithm::SlidingLog, Quota::per_second(5)?, ManualClock::new())?;
    /// assert!(l.check_quota(&Quota::per_second(50)?).is_ok());
    /// let huge = Quota::try_new(1 << 47, Duration::from_secs(86_400))?; // a 1 PiB log per key
    /// assert!(l.check_quota(&huge).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn check_quota(&self, quota: &Quota) -> Result<(), QuotaError> {
        with_map!(&self.maps, m => m.maker.check(quota))
    }

    /// Replaces the map's own quota (the one [`KeyedLimiter::try_acquire`] makes keys from) on
    /// every key made from it, and on keys made from it later. What each key has used carries
    /// over, as for a single [`Live`](crate::Live) limiter: a loosened quota takes effect at
    /// once, a tightened one counts what was used up to its burst, and nothing is refilled.
    /// Requests never wait for a change; changes of one plan are made one at a time. A token
    /// bucket change walks the map once (its keys of this plan), on the caller's thread.
    ///
    /// # Errors
    /// [`KeyedError::NotLive`] if the map was not built with [`KeyedBuilder::live`]; what the
    /// algorithm's live limiter refuses for `quota`, as [`KeyedError::Quota`] (a window's new
    /// period, see [`Live::set_quota`](crate::Live::set_quota)). The map keeps its quota.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<&str, _>::builder(Algorithm::FixedWindow, Quota::per_second(5)?)
    ///     .live()
    ///     .build_with_clock(ManualClock::new())?;
    /// assert!(l.try_acquire_n(&"alice", 4).is_allowed());
    /// l.set_quota(Quota::per_second(2)?)?; // tightened: alice's 4 count against the new 2
    /// assert!(!l.try_acquire(&"alice").is_allowed());
    /// assert!(l.try_acquire_n(&"bob", 2).is_allowed());
    /// assert_eq!(l.quota(), Quota::per_second(2)?);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), KeyedError> {
        self.set(&self.shared.quota, quota)
    }

    /// Replaces the quota of the plan named `plan`: the keys first given `plan` in
    /// [`KeyedLimiter::try_acquire_with`] (keys given it later join it at its new quota). A
    /// plan keeps its name, the quota it was first used with, for the map's life. As
    /// [`KeyedLimiter::set_quota`] otherwise.
    ///
    /// # Errors
    /// As [`KeyedLimiter::set_quota`].
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let (free, pro) = (Quota::per_second(1)?, Quota::per_second(10)?);
    /// let l = KeyedLimiter::<&str, _>::builder(Algorithm::TokenBucket, free)
    ///     .live()
    ///     .build_with_clock(ManualClock::new())?;
    /// assert!(l.try_acquire_with(&"carol", &pro).is_allowed());
    /// l.set_plan_quota(&pro, Quota::per_second(20)?)?; // every pro key, now and later
    /// assert_eq!(l.try_acquire_with(&"carol", &pro).remaining(), 18);
    /// assert_eq!(l.try_acquire_with(&"dave", &pro).remaining(), 19);
    /// assert_eq!(l.plan_quota(&pro), Quota::per_second(20)?);
    /// assert_eq!(l.quota(), free); // other plans keep theirs
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn set_plan_quota(&self, plan: &Quota, quota: Quota) -> Result<(), KeyedError> {
        self.set(plan, quota)
    }

    /// A change of the plan named `plan`.
    fn set(&self, plan: &Quota, quota: Quota) -> Result<(), KeyedError> {
        let now = || self.now();
        match &self.maps {
            Maps::LiveTokenBucket(m) => Ok(m.set_quota(plan, quota, now)?),
            Maps::LiveFixedWindow(m) => Ok(m.set_quota(plan, quota, now)?),
            _ => Err(KeyedError::NotLive),
        }
    }

    /// The quota in force for the keys made from the map's own quota: that quota, or what a
    /// live map's [`KeyedLimiter::set_quota`] changed it to.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, Quota};
    /// let l = KeyedLimiter::<u64>::try_new(Algorithm::SlidingLog, Quota::per_minute(30)?)?;
    /// assert_eq!(l.quota(), Quota::per_minute(30)?);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.plan_quota(&self.shared.quota)
    }

    /// The quota in force for the plan named `plan` (see [`KeyedLimiter::set_plan_quota`]):
    /// `plan` itself unless a live map changed it.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, Quota};
    /// let l = KeyedLimiter::<u64>::try_new(Algorithm::TokenBucket, Quota::per_second(1)?)?;
    /// let pro = Quota::per_second(50)?;
    /// assert_eq!(l.plan_quota(&pro), pro);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn plan_quota(&self, plan: &Quota) -> Quota {
        with_map!(&self.maps, m => m.maker.in_force(plan))
    }

    /// How many keys have a limiter (an estimate while other threads insert or evict).
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?;
    /// let _ = l.try_acquire(&1);
    /// let _ = l.try_acquire(&2);
    /// let _ = l.try_acquire(&1);
    /// assert_eq!(l.len(), 2);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn len(&self) -> usize {
        with_map!(&self.maps, m => m.map.len())
    }

    /// Whether no key has a limiter.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?;
    /// assert!(l.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        with_map!(&self.maps, m => m.map.is_empty())
    }

    /// Removes every key whose limiter is back to its fresh state (full capacity at the map's
    /// now, less the clock's [`Clock::max_skew_nanos`]) and returns how many. A key that still owes time (a drained bucket, a window with
    /// admissions in it) is kept: removing it would hand it a fresh burst. A request racing
    /// the eviction of its key is never lost: it redoes itself on the key's new limiter.
    ///
    /// One pass over the map; run it from a timer (every period or so), or bound the map with
    /// [`KeyedBuilder::max_keys`] and let new keys run it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let l = KeyedLimiter::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(2)?, clock.clone())?;
    /// let _ = l.try_acquire(&1);
    /// let _ = l.try_acquire_n(&2, 2); // drained
    /// clock.advance(Duration::from_millis(500));
    /// assert_eq!(l.evict_idle(), 1); // key 1 is full again, key 2 is not
    /// assert_eq!(l.len(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn evict_idle(&self) -> usize {
        let now = self.now();
        with_map!(&self.maps, m => m.sweep(&self.shared, now))
    }

    /// How many keys the map has evicted since it was made: by [`KeyedLimiter::evict_idle`]
    /// and by the sweeps a bounded map runs by itself when it is full
    /// ([`KeyedBuilder::max_keys`]). Counted once per sweep, never on the request path.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota, WhenFull};
    /// let clock = ManualClock::new();
    /// let l = KeyedLimiter::builder(Algorithm::TokenBucket, Quota::per_second(1)?)
    ///     .max_keys(NonZeroUsize::new(1).unwrap(), WhenFull::Deny)
    ///     .build_with_clock(clock.clone())?;
    /// assert!(l.try_acquire(&"alice").is_allowed());
    /// clock.advance(Duration::from_secs(1)); // alice is full again
    /// assert!(l.try_acquire(&"bob").is_allowed()); // the full map swept alice out
    /// assert_eq!(l.evicted_keys(), 1);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn evicted_keys(&self) -> u64 {
        // Relaxed: a count.
        self.shared.evicted.load(Ordering::Relaxed)
    }

    #[inline]
    fn acquire<Q>(&self, key: &Q, n: u64, quota: &Quota) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        with_map!(&self.maps, m => m.acquire(&self.shared, &self.time(), key, n, quota, &m.map.guard()))
    }

    /// The map's clock read in the map's time (ns since its origin), for the request path.
    #[inline(always)]
    pub(super) fn time(&self) -> Since<'_, C> {
        Since {
            clock: &self.clock,
            origin: self.origin,
        }
    }

    /// The clock's now in the map's time.
    #[inline]
    fn now(&self) -> u64 {
        self.origin.now(&self.clock)
    }

    /// Pins the map for a batch of requests on this thread: the requests of the returned
    /// [`KeyedPin`] skip the epoch pin (a thread-local lookup and a store to enter, a swap to
    /// leave) that every [`KeyedLimiter::try_acquire`] pays. Decisions are the same.
    ///
    /// While a pin is held, nothing the map retires (removed keys, the old tables a growing
    /// map leaves behind) is freed: hold it for a batch (an event-loop turn, a buffer of
    /// requests), never for the life of a thread.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(2)?, ManualClock::new())?;
    /// let batch = [7, 7, 7, 8];
    /// let pin = l.pin();
    /// let allowed: Vec<bool> = batch.iter().map(|k| pin.try_acquire(k).is_allowed()).collect();
    /// drop(pin);
    /// assert_eq!(allowed, [true, true, false, true]);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn pin(&self) -> KeyedPin<'_, K, C, S> {
        KeyedPin {
            limiter: self,
            guard: with_map!(&self.maps, m => m.map.guard()),
        }
    }
}

impl<K: Hash + Eq, C, S: BuildHasher> fmt::Debug for KeyedLimiter<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = &self.shared;
        f.debug_struct("KeyedLimiter")
            .field("algorithm", &shared.algorithm)
            .field("quota", &shared.quota)
            .field("keys", &with_map!(&self.maps, m => m.map.len()))
            .field("max_keys", &shared.bound.as_ref().map(|b| b.max_keys))
            .finish_non_exhaustive()
    }
}
