//! Keyed limiters: one limiter per client (IP, API key, route) in a concurrent map.
//!
//! [`KeyedLimiter`] keeps a `papaya::HashMap` from keys to slots, one map type per algorithm
//! (static dispatch, no allocation on the hot path). The one-word limiters (token bucket,
//! fixed window) store their word and a pointer to their plan's shared parameters: 16 bytes
//! per key, the eviction mark folded into the word (see `word.rs`). The sliding window and
//! log store a boxed core beside a state word for eviction (see `slot.rs`). The map owns one
//! clock, read once per lookup.
//!
//! # Hot path
//!
//! Pin the map (an epoch guard, no allocation); hash the key and look it up; read the clock
//! (after the lookup, so that a request that finds its key evicted reads a time no earlier
//! than the evictor's); for the one-word limiters, one load and, to admit, one
//! compare-exchange that both commits and proves the limiter was not evicted. Only a miss allocates: it makes the key's limiter
//! and inserts it with `try_insert`, so that two racing first requests end on one limiter
//! (the loser's is dropped unused).
//!
//! # Eviction and capacity
//!
//! [`KeyedLimiter::evict_idle`] removes exactly the keys whose limiter is fresh (full capacity
//! at the map's now, less the clock's [`Clock::max_skew_nanos`]: a request redone on another
//! thread may read up to that much earlier, and the limiter must be fresh at its reading too);
//! a request racing the eviction redoes itself on the key's new limiter.
//!
//! # Time
//!
//! The map counts time from its own start: its first reading, aligned down to a multiple of
//! the map's quota's window (fixed window) or slot (sliding window) length, is its origin for
//! every key and every sweep. Windows of the map's quota stay aligned to the clock's zero; a
//! plan of another period counts its windows from the map's origin.
//! [`KeyedBuilder::max_keys`] bounds the map: a new key that finds it full first sweeps idle
//! keys (throttled, see [`KeyedBuilder::max_keys`]), then [`WhenFull`] decides.

mod live;
#[cfg(tollgate_loom)]
pub(crate) use live::loom_model as live_loom;
#[cfg(tollgate_loom)]
pub(crate) mod loom;
mod plans;
mod slot;
mod word;

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::num::NonZeroUsize;
use core::ptr;

use crate::algo::fixed_window::Fixed;
use crate::algo::sliding_log::Log;
use crate::algo::sliding_window::Sliding;
use crate::algo::token_bucket::Gcra;
use crate::algo::Algo;
use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Origin, Since};
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::sync::{AtomicU64, Ordering};

use live::{LiveMap, LivePlans};
use plans::{Boxed, KeySlot, Plans, SlotMaker};
use slot::Attempt;

/// The algorithm every limiter of a [`KeyedLimiter`] runs, picked by setting.
///
/// | variant         | per-key state (beside the key)                          |
/// |-----------------|---------------------------------------------------------|
/// | `TokenBucket`   | 16 bytes: the GCRA word and a pointer to the plan       |
/// | `FixedWindow`   | 16 bytes: the window word and a pointer to the plan     |
/// | `SlidingWindow` | 8-byte box of 144 bytes (state word, 8 slots, ring)     |
/// | `SlidingLog`    | 8-byte box of 48 bytes + 8 × limit                      |
///
/// A map built [`live`](KeyedBuilder::live) keeps 32 bytes per token bucket key (`tat` beside
/// the version of the parameters it is counted in, one 16-byte word, and the plan pointer)
/// and 16 per fixed window key.
///
/// ```
/// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
/// let by_ip = KeyedLimiter::<u32, _>::with_clock(
///     Algorithm::SlidingWindow,
///     Quota::per_second(5)?,
///     ManualClock::new(),
/// )?;
/// assert!(by_ip.try_acquire(&0x7f00_0001).is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// GCRA token bucket, as [`TokenBucket`](crate::TokenBucket).
    TokenBucket,
    /// Fixed window, as [`FixedWindow`](crate::FixedWindow).
    FixedWindow,
    /// Sliding-window counter of 8 slots, as [`SlidingWindow`](crate::SlidingWindow).
    SlidingWindow,
    /// Exact sliding log, as [`SlidingLog`](crate::SlidingLog): `8 × limit` bytes per key.
    SlidingLog,
}

impl Algorithm {
    /// The four algorithms, for code (and tests) that try each.
    ///
    /// ```
    /// assert_eq!(tollgate::Algorithm::ALL.len(), 4);
    /// ```
    pub const ALL: [Algorithm; 4] = [
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];
}

/// What a bounded [`KeyedLimiter`] does with a new key when the map is full of keys that are
/// not idle (after sweeping the idle ones).
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota, WhenFull};
///
/// let limiter = KeyedLimiter::builder(Algorithm::TokenBucket, Quota::per_second(1)?)
///     .max_keys(NonZeroUsize::new(1).unwrap(), WhenFull::AdmitUntracked)
///     .build_with_clock(ManualClock::new())?;
/// assert!(limiter.try_acquire(&"alice").is_allowed());
/// assert!(limiter.try_acquire(&"bob").is_allowed()); // judged by a throwaway limiter
/// assert_eq!(limiter.len(), 1);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WhenFull {
    /// Deny the new key's request (fail closed). The default: no key is ever admitted beyond
    /// its quota, at the price of turning new clients away while the map is full. The denial
    /// has `remaining() == 0` and `retry_after()` of the period of the key's quota in force.
    #[default]
    Deny,
    /// Judge the request by a fresh limiter made for it and dropped (fail open): new keys are
    /// not limited while the map is full, but are never turned away.
    AdmitUntracked,
}

/// The default key hasher: foldhash's fast hasher, seeded at random per map.
///
/// About 1 ns for a `u64` key here, against ~10 ns for std's SipHash-1-3 (`papaya`'s own
/// default); the per-map random seed keeps a client from choosing keys that collide. Pick
/// another with [`KeyedBuilder::hasher`].
///
/// ```
/// use std::hash::BuildHasher;
/// let h = tollgate::KeyHasher::default();
/// assert_eq!(h.hash_one(42u64), h.clone().hash_one(42u64));
/// ```
#[derive(Clone, Debug, Default)]
pub struct KeyHasher(foldhash::fast::RandomState);

impl BuildHasher for KeyHasher {
    type Hasher = foldhash::fast::FoldHasher<'static>;

    #[inline]
    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

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
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Debug)]
pub struct KeyedBuilder<K, S = KeyHasher> {
    algorithm: Algorithm,
    quota: Quota,
    hasher: S,
    bound: Option<(NonZeroUsize, WhenFull)>,
    capacity: usize,
    live: bool,
    _key: core::marker::PhantomData<fn(K)>,
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
    /// # Ok::<(), tollgate::QuotaError>(())
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
    /// ([`QuotaError::NotLive`]).
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
    /// # Ok::<(), tollgate::QuotaError>(())
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
    /// # Ok::<(), tollgate::QuotaError>(())
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
    /// # Ok::<(), tollgate::QuotaError>(())
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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn build(self) -> Result<KeyedLimiter<K, MonotonicClock, S>, QuotaError>
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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn build_with_clock<C: Clock>(self, clock: C) -> Result<KeyedLimiter<K, C, S>, QuotaError>
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
            (Algorithm::SlidingWindow, false) => {
                Maps::SlidingWindow(Keyed::checked(Boxed::new(), quota, hasher, capacity)?)
            }
            (Algorithm::SlidingLog, false) => {
                Maps::SlidingLog(Keyed::checked(Boxed::new(), quota, hasher, capacity)?)
            }
            (Algorithm::TokenBucket, true) => {
                Maps::LiveTokenBucket(Keyed::new(LivePlans::new(quota)?, hasher, capacity))
            }
            (Algorithm::FixedWindow, true) => {
                Maps::LiveFixedWindow(Keyed::new(LivePlans::new(quota)?, hasher, capacity))
            }
            (Algorithm::SlidingWindow | Algorithm::SlidingLog, true) => {
                return Err(QuotaError::NotLive)
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

/// Planted defect: a sweep judges keys at its own reading, with no margin for a clock whose
/// readings on other threads may be earlier.
const SWEEP_WITHOUT_MARGIN: slot::Plant = 31;

/// Every this many new keys, the inserting thread hands what the map retired (old tables,
/// removed entries) to the epoch collector.
const FLUSH_EVERY: usize = 1024;

/// Entries a write copies from the old table while the map grows (papaya's default: 64).
const RESIZE_CHUNK: usize = 1024;

/// The capacity bound and its sweep throttle.
struct Bound {
    max_keys: usize,
    when_full: WhenFull,
    /// The map's now at the last sweep. Relaxed throughout: a throttle hint, not a publication.
    last_sweep_ns: AtomicU64,
    /// New keys that found the map full since the last sweep.
    full_misses: AtomicU64,
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
/// let users = KeyedLimiter::<String, _>::with_clock(Algorithm::TokenBucket, free, clock.clone())?;
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
    maps: Maps<K, S>,
    shared: Shared,
    clock: C,
    /// Where the map's time starts: every key's limiter, and every sweep, counts from it.
    origin: Origin,
}

/// What every map type's request path reads besides its map.
struct Shared {
    algorithm: Algorithm,
    quota: Quota,
    /// Keys removed by sweeps, `evict_idle`'s and the bound's. Relaxed: a count, written once
    /// per sweep.
    evicted: AtomicU64,
    bound: Option<Bound>,
    /// The clock's [`Clock::max_skew_nanos`], read once: the margin a sweep keeps.
    skew: u64,
}

/// The map of one algorithm: one value type per algorithm, so that a request dispatches once
/// (on this enum) and the slot's code is specialized.
enum Maps<K, S> {
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
struct Keyed<K, M: SlotMaker, S> {
    maker: M,
    map: papaya::HashMap<K, M::Slot, S>,
}

impl<K: Hash + Eq> KeyedLimiter<K> {
    /// A keyed limiter on the default [`MonotonicClock`], unbounded, with the default hasher.
    ///
    /// # Errors
    /// The algorithm cannot represent the quota (see [`KeyedBuilder::build`]).
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, Quota};
    /// let per_ip = KeyedLimiter::<std::net::IpAddr>::new(Algorithm::TokenBucket, Quota::per_second(100)?)?;
    /// assert!(per_ip.try_acquire(&"10.0.0.1".parse().unwrap()).is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(algorithm: Algorithm, quota: Quota) -> Result<Self, QuotaError> {
        KeyedLimiter::builder(algorithm, quota).build()
    }

    /// Settings beyond algorithm and quota: a bound on the keys, another hasher.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64>::builder(Algorithm::FixedWindow, Quota::per_second(1)?)
    ///     .build_with_clock(ManualClock::new())?;
    /// assert!(l.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
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
    /// let l = KeyedLimiter::<u64, _>::with_clock(Algorithm::SlidingWindow, Quota::per_second(2)?, ManualClock::new())?;
    /// assert!(l.try_acquire(&1).is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(algorithm: Algorithm, quota: Quota, clock: C) -> Result<Self, QuotaError> {
        KeyedLimiter::builder(algorithm, quota).build_with_clock(clock)
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
    /// let l = KeyedLimiter::<&str, _>::with_clock(Algorithm::FixedWindow, Quota::per_second(1)?, ManualClock::new())?;
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
    /// let l = KeyedLimiter::<u64, _>::with_clock(Algorithm::TokenBucket, Quota::per_second(10)?, ManualClock::new())?;
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
    /// let l = KeyedLimiter::<&str, _>::with_clock(Algorithm::SlidingLog, free, ManualClock::new())?;
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
    /// let l = KeyedLimiter::<u64, _>::with_clock(Algorithm::SlidingLog, Quota::per_second(5)?, ManualClock::new())?;
    /// assert!(l.check_quota(&Quota::per_second(50)?).is_ok());
    /// let huge = Quota::new(1 << 47, Duration::from_secs(86_400))?; // a 1 PiB log per key
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
    /// [`QuotaError::NotLive`] if the map was not built with [`KeyedBuilder::live`]; what the
    /// algorithm's live limiter refuses for `quota` (a window's new period, see
    /// [`Live::set_quota`](crate::Live::set_quota)). The map keeps its quota.
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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), QuotaError> {
        self.set_planted::<{ crate::live::SOUND }>(&self.shared.quota, quota)
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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn set_plan_quota(&self, plan: &Quota, quota: Quota) -> Result<(), QuotaError> {
        self.set_planted::<{ crate::live::SOUND }>(plan, quota)
    }

    /// A change under a chosen protocol (the loom models plant defects).
    fn set_planted<const PLANT: crate::live::Plant>(
        &self,
        plan: &Quota,
        quota: Quota,
    ) -> Result<(), QuotaError> {
        let now = || self.now();
        match &self.maps {
            Maps::LiveTokenBucket(m) => m.set_quota::<PLANT>(plan, quota, now),
            Maps::LiveFixedWindow(m) => m.set_quota::<PLANT>(plan, quota, now),
            _ => Err(QuotaError::NotLive),
        }
    }

    /// The quota in force for the keys made from the map's own quota: that quota, or what a
    /// live map's [`KeyedLimiter::set_quota`] changed it to.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, Quota};
    /// let l = KeyedLimiter::<u64>::new(Algorithm::SlidingLog, Quota::per_minute(30)?)?;
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
    /// let l = KeyedLimiter::<u64>::new(Algorithm::TokenBucket, Quota::per_second(1)?)?;
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
    /// let l = KeyedLimiter::<u64, _>::with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?;
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
    /// let l = KeyedLimiter::<u64, _>::with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?;
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
    /// let l = KeyedLimiter::<u64, _>::with_clock(Algorithm::TokenBucket, Quota::per_second(2)?, clock.clone())?;
    /// let _ = l.try_acquire(&1);
    /// let _ = l.try_acquire_n(&2, 2); // drained
    /// clock.advance(Duration::from_millis(500));
    /// assert_eq!(l.evict_idle(), 1); // key 1 is full again, key 2 is not
    /// assert_eq!(l.len(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn evict_idle(&self) -> usize {
        self.evict_idle_planted::<{ slot::SOUND }>()
    }

    /// [`KeyedLimiter::evict_idle`], or with a defect planted for a test.
    fn evict_idle_planted<const PLANT: slot::Plant>(&self) -> usize {
        let now = self.now();
        with_map!(&self.maps, m => m.sweep::<PLANT>(&self.shared, now))
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
    /// # Ok::<(), tollgate::QuotaError>(())
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
    fn time(&self) -> Since<'_, C> {
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
    /// [`KeyedPin`] skip the epoch pin (an atomic store and a fence to enter, a swap to leave)
    /// that every [`KeyedLimiter::try_acquire`] pays. Decisions are the same.
    ///
    /// While a pin is held, nothing the map retires (removed keys, the old tables a growing
    /// map leaves behind) is freed: hold it for a batch (an event-loop turn, a buffer of
    /// requests), never for the life of a thread.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
    /// let l = KeyedLimiter::<u64, _>::with_clock(Algorithm::TokenBucket, Quota::per_second(2)?, ManualClock::new())?;
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

/// A [`KeyedLimiter`] pinned on one thread for a batch of requests, made by
/// [`KeyedLimiter::pin`]. Not `Send`: drop it on the thread that made it, soon.
///
/// ```
/// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
/// let l = KeyedLimiter::<&str, _>::with_clock(Algorithm::FixedWindow, Quota::per_second(1)?, ManualClock::new())?;
/// let pin = l.pin();
/// assert!(pin.try_acquire(&"alice").is_allowed());
/// assert!(!pin.try_acquire(&"alice").is_allowed());
/// assert!(l.try_acquire(&"bob").is_allowed()); // the limiter itself stays usable
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct KeyedPin<'a, K, C = MonotonicClock, S = KeyHasher> {
    limiter: &'a KeyedLimiter<K, C, S>,
    /// A guard of the collector of `limiter`'s one map.
    guard: papaya::LocalGuard<'a>,
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
    /// let l = KeyedLimiter::<u64, _>::with_clock(Algorithm::SlidingWindow, Quota::per_second(1)?, ManualClock::new())?;
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
    /// let l = KeyedLimiter::<u64, _>::with_clock(Algorithm::TokenBucket, Quota::per_second(10)?, ManualClock::new())?;
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
    /// let l = KeyedLimiter::<&str, _>::with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?;
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

impl<K, M, S> Keyed<K, M, S>
where
    K: Hash + Eq,
    M: SlotMaker,
    S: BuildHasher,
{
    fn new(maker: M, hasher: S, capacity: usize) -> Self {
        Keyed {
            maker,
            map: papaya::HashMap::builder()
                .hasher(hasher)
                .capacity(capacity)
                .resize_mode(papaya::ResizeMode::Incremental(RESIZE_CHUNK))
                .build(),
        }
    }

    /// [`Keyed::new`], once a limiter for `quota` could be made.
    fn checked(maker: M, quota: &Quota, hasher: S, capacity: usize) -> Result<Self, QuotaError> {
        maker.check(quota)?;
        Ok(Keyed::new(maker, hasher, capacity))
    }

    /// Evicts every key fresh at `now` less the clock's skew: a request that finds its key
    /// gone (or marked) reads the clock after this sweep, at most `shared.skew` earlier than
    /// `now`, and freshness only grows with time, so the evicted limiter was fresh at that
    /// request's reading too: its new limiter hands out nothing the old one would not have.
    fn sweep<const PLANT: slot::Plant>(&self, shared: &Shared, now: u64) -> usize {
        let margin = if PLANT == SWEEP_WITHOUT_MARGIN {
            0
        } else {
            shared.skew
        };
        let judged_at = now.saturating_sub(margin);
        let map = self.map.pin();
        let mut evicted = 0;
        for (key, slot) in map.iter() {
            if slot.try_evict(judged_at) {
                // A requester that saw the mark may have removed it already: gone either way.
                let _ = map.remove_if(key, |_, v| ptr::eq(v, slot));
                evicted += 1;
            }
        }
        drop(map);
        // Hand the removed entries (and any table a resize left behind) to the epoch
        // collector now, rather than when this thread's batch happens to fill up.
        papaya::Guard::flush(&self.map.guard());
        // Relaxed: a count.
        shared.evicted.fetch_add(evicted as u64, Ordering::Relaxed);
        evicted
    }

    /// A request under `guard`, a guard of this map's collector.
    #[inline]
    fn acquire<Q, C: Clock, G: papaya::Guard>(
        &self,
        shared: &Shared,
        clock: &C,
        key: &Q,
        n: u64,
        quota: &Quota,
        guard: &G,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let map = &self.map;
        loop {
            let found = map.get(key, guard);
            // Read after the lookup: a request that finds its key evicted (gone, or marked)
            // has synchronized with the evictor, so its reading is no earlier than the one
            // the evictor found the limiter fresh at. An earlier reading could spend a new
            // limiter's burst at an instant when the evicted one had none.
            let now = clock.now_nanos();
            let slot = match found {
                Some(slot) => slot,
                None => match self.insert(shared, guard, key, quota, now, n) {
                    Ok(slot) => slot,
                    Err(decision) => return decision,
                },
            };
            match slot.acquire(now, n) {
                Attempt::Decided(decision) => return decision,
                Attempt::Evicted => {
                    // Help the evictor remove the orphan, then redo on a new limiter (and a
                    // new reading of the clock).
                    let _ = map.remove_if(key, |_, v| ptr::eq(v, slot), guard);
                }
            }
        }
    }

    /// The miss path: make the key's limiter and insert it, unless another thread won the
    /// race (then its limiter is used and ours dropped) or the bound says otherwise.
    #[cold]
    #[inline(never)]
    fn insert<'g, Q, G>(
        &self,
        shared: &Shared,
        guard: &'g G,
        key: &Q,
        quota: &Quota,
        now: u64,
        n: u64,
    ) -> Result<&'g M::Slot, Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        G: papaya::Guard,
    {
        let Ok(slot) = self.maker.make(quota) else {
            return Err(Decision::exceeds(0, 0));
        };
        if let Some(bound) = &shared.bound {
            if !self.make_room(shared, bound, now) {
                return Err(match bound.when_full {
                    WhenFull::Deny => {
                        let period = duration_to_nanos(self.maker.in_force(quota).period());
                        Decision::denied(0, now, now.saturating_add(period), 0)
                    }
                    // Judged by the fresh limiter, which is then dropped.
                    WhenFull::AdmitUntracked => slot.untracked(now, n),
                });
            }
        }
        let map = &self.map;
        Ok(match map.try_insert(key.to_owned(), slot, guard) {
            Ok(inserted) => {
                if map.len().is_multiple_of(FLUSH_EVERY) {
                    // A growing map retires its old tables (half the new one's size, all
                    // told) into this thread's batch of garbage, freed only once the batch
                    // fills; sweeps may be rare. Hand them to the collector now and then:
                    // they are freed once the threads pinning the map let go.
                    guard.flush();
                }
                inserted
            }
            Err(occupied) => occupied.current,
        })
    }

    /// Whether a new key may be inserted under `bound`, sweeping idle keys first if the map
    /// is full and a sweep is due (at most once per period of the map's `quota`).
    fn make_room(&self, shared: &Shared, bound: &Bound, now: u64) -> bool {
        if self.map.len() < bound.max_keys {
            return true;
        }
        // Relaxed (all three): the throttle only spaces sweeps out; a lost race sweeps twice
        // or once fewer, which is harmless.
        let misses = bound.full_misses.fetch_add(1, Ordering::Relaxed) + 1;
        let last = bound.last_sweep_ns.load(Ordering::Relaxed);
        let period = duration_to_nanos(self.maker.in_force(&shared.quota).period());
        let due =
            misses >= (bound.max_keys as u64 / 16).max(1) || now.saturating_sub(last) >= period;
        if due
            && bound
                .last_sweep_ns
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            bound.full_misses.store(0, Ordering::Relaxed);
            self.sweep::<{ slot::SOUND }>(shared, now);
        }
        self.map.len() < bound.max_keys
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

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use core::time::Duration;

    /// Everything a caller can read from a decision.
    fn seen(d: Decision) -> (bool, u64, Option<Duration>, Duration, bool) {
        let parts = (d.is_allowed(), d.remaining(), d.retry_after());
        (
            parts.0,
            parts.1,
            parts.2,
            d.reset_after(),
            d.exceeds_capacity(),
        )
    }

    #[test]
    fn a_pin_decides_as_the_limiter_does() {
        for algorithm in Algorithm::ALL {
            let quota = Quota::per_second(4).unwrap();
            let plan = Quota::per_second(9).unwrap();
            let (c1, c2) = (ManualClock::new(), ManualClock::new());
            let plain = KeyedLimiter::<u64, _>::with_clock(algorithm, quota, c1.clone()).unwrap();
            let pinned = KeyedLimiter::<u64, _>::with_clock(algorithm, quota, c2.clone()).unwrap();
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let mut pin = pinned.pin();
            // Shorter under miri, which is a thousand times slower.
            for step in 0..if cfg!(miri) { 200 } else { 4_000u32 } {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = x % 5;
                let (a, b) = match (x >> 8) % 8 {
                    0 => (
                        plain.try_acquire_n(&key, x >> 16 & 7),
                        pin.try_acquire_n(&key, x >> 16 & 7),
                    ),
                    1 => (
                        plain.try_acquire_with(&key, &plan),
                        pin.try_acquire_with(&key, &plan),
                    ),
                    _ => (plain.try_acquire(&key), pin.try_acquire(&key)),
                };
                assert_eq!(seen(a), seen(b), "{algorithm:?}, step {step}");
                let dt = Duration::from_millis(x >> 20 & 127);
                c1.advance(dt);
                c2.advance(dt);
                if step % 97 == 0 {
                    // Evict under the pin: its next requests must find the keys' new limiters.
                    assert_eq!(
                        plain.evict_idle(),
                        pinned.evict_idle(),
                        "{algorithm:?}, step {step}"
                    );
                }
                if step % 1000 == 999 {
                    pin = pinned.pin();
                }
            }
            drop(pin);
            assert_eq!(plain.len(), pinned.len());
        }
    }

    std::thread_local! {
        /// Whether this thread reads the clock behind the others (a core whose counter lags).
        static BEHIND: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
    }

    /// How far behind: within the skew the clock declares.
    const LAG: u64 = 8_000;

    /// A clock whose readings on a "behind" thread are `LAG` ns earlier than on the others,
    /// and which says so ([`Clock::max_skew_nanos`]).
    #[derive(Clone, Debug, Default)]
    struct Skewed(ManualClock);

    impl Clock for Skewed {
        fn now_nanos(&self) -> u64 {
            let t = self.0.now_nanos();
            if BEHIND.with(|b| b.get()) {
                t.saturating_sub(LAG)
            } else {
                t
            }
        }
        fn max_skew_nanos(&self) -> u64 {
            LAG
        }
    }

    /// Units of `n` asked one by one on a thread that reads the clock `LAG` behind, after
    /// everything before (the join orders it after the sweep).
    fn behind(l: &KeyedLimiter<u8, Skewed>, key: u8, n: u64) -> usize {
        std::thread::scope(|s| {
            s.spawn(|| {
                BEHIND.with(|b| b.set(true));
                (0..n).filter(|_| l.try_acquire(&key).is_allowed()).count()
            })
            .join()
            .unwrap()
        })
    }

    /// A key drained on a lagging thread; a sweep on a thread ahead of it, `500` ns after the
    /// key is full again by the sweeper's reading; then the lagging thread asks again, at a
    /// reading before that. Returns what it got, with the sweep `PLANT` and without a sweep.
    fn drained_swept_and_asked<const PLANT: slot::Plant>(algorithm: Algorithm) -> (usize, usize) {
        let quota = Quota::per_second(3).unwrap();
        // When a key drained at 0 is fresh again: the sliding window's admission counts until
        // slot 0 + 8 + 1 (of 125 ms) begins.
        let fresh_at = match algorithm {
            Algorithm::SlidingWindow => 1_125_000_000,
            _ => 1_000_000_000,
        };
        let got = |sweep: bool| {
            let clock = Skewed::default();
            let l = KeyedLimiter::<u8, _>::with_clock(algorithm, quota, clock.clone()).unwrap();
            clock.0.set(Duration::from_nanos(LAG)); // the lagging thread reads 0
            assert_eq!(behind(&l, 1, 3), 3);
            clock.0.set(Duration::from_nanos(fresh_at + 500));
            if sweep {
                let _ = l.evict_idle_planted::<PLANT>();
            }
            behind(&l, 1, 3) // at fresh_at + 500 - LAG: the key is not full yet
        };
        (got(true), got(false))
    }

    #[test]
    fn a_sweep_keeps_a_margin_for_readings_that_lag_on_other_threads() {
        for algorithm in Algorithm::ALL {
            let (swept, kept) = drained_swept_and_asked::<{ slot::SOUND }>(algorithm);
            assert_eq!(swept, kept, "{algorithm:?}: the sweep handed out nothing");
            // The planted sweep with no margin evicts the key, and the lagging thread's new
            // limiter admits a fresh burst at an instant when the old one had less.
            let (swept, kept) = drained_swept_and_asked::<SWEEP_WITHOUT_MARGIN>(algorithm);
            assert!(swept > kept, "{algorithm:?}: the planted sweep over-admits");
        }
    }

    #[test]
    fn a_key_evicted_under_a_pin_starts_afresh() {
        let clock = ManualClock::new();
        let l = KeyedLimiter::<u64, _>::with_clock(
            Algorithm::TokenBucket,
            Quota::per_second(2).unwrap(),
            clock.clone(),
        )
        .unwrap();
        let pin = l.pin();
        assert!(pin.try_acquire_n(&1, 2).is_allowed());
        assert!(!pin.try_acquire(&1).is_allowed());
        clock.advance(Duration::from_secs(1));
        assert_eq!(l.evict_idle(), 1);
        assert!(l.is_empty());
        let d = pin.try_acquire(&1);
        assert!(d.is_allowed());
        assert_eq!(
            d.remaining(),
            1,
            "a new limiter: its full burst less this request"
        );
        assert_eq!(l.len(), 1);
    }
}
