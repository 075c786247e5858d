//! Where decisions come from: the [`Backend`] trait, and [`KeyedBackend`] over any
//! in-process keyed limiter (a [`KeyedLimit`]): [`LocalBackend`] over a [`KeyedLimiter`], a
//! fixed-size [`KeyedTable`], or a fixed-memory [`SketchLimiter`].
//!
//! Memory: [`LocalBackend::try_new`] bounds its map at [`LocalBackend::DEFAULT_MAX_KEYS`]
//! keys, and the map sweeps its own idle keys when a new key finds it full (the core's
//! `KeyedBuilder::max_keys`), so no task is needed to keep it bounded. A sweep removes only
//! keys whose limiter is back to full capacity: a key in use keeps its count. A
//! [`KeyedTable`] and a [`SketchLimiter`] hold every key in the memory they were built with,
//! and never sweep (a table's new key takes an idle key's slot over).

use core::convert::Infallible;
use core::future::{ready, Future, Ready};
use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;
use core::num::NonZeroUsize;

use tollgate::{
    Algorithm, Clock, Decision, HybridSketchLimiter, KeyHasher, KeyedError, KeyedLimit,
    KeyedLimiter, KeyedTable, MonotonicClock, Quota, SketchLimiter, WhenFull,
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
/// let b = ByTenant(KeyedLimiter::try_with_clock(Algorithm::TokenBucket, q, ManualClock::new())?, q);
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

    /// The quota every key is limited to now, for the `RateLimit-Policy` header (asked when
    /// headers are rendered, so a quota changed at run time is announced as it changes).
    fn quota(&self) -> Quota;
}

/// What the layer can take as a backend: any [`Backend`], or a [`KeyedLimiter`] or
/// [`SketchLimiter`] you built (it becomes a [`KeyedBackend`] as it is: a map's bound, plans
/// and live quotas kept).
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::{Algorithm, KeyedLimiter, Quota, SketchLimiter, SketchSize, WhenFull};
/// use tollgate_tower::{PeerIp, RateLimitLayer};
/// let per_ip = KeyedLimiter::<std::net::IpAddr>::builder(Algorithm::TokenBucket, Quota::per_second(20)?)
///     .max_keys(NonZeroUsize::new(200_000).unwrap(), WhenFull::Deny)
///     .build()?;
/// let layer = RateLimitLayer::new(PeerIp::default(), per_ip);
/// // Any number of clients in 1 MiB, never sweeping.
/// let per_ip = SketchLimiter::<std::net::IpAddr>::new(Quota::per_second(20)?, SketchSize::columns(1 << 16)?);
/// let layer = RateLimitLayer::new(PeerIp::default(), per_ip);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait IntoBackend {
    /// The backend made.
    type Backend: Backend;
    /// Makes it.
    fn into_backend(self) -> Self::Backend;
}

impl<B: Backend> IntoBackend for B {
    type Backend = B;
    fn into_backend(self) -> B {
        self
    }
}

/// An in-process keyed limiter is a backend as a [`KeyedBackend`] over it (for the map,
/// [`LocalBackend`]).
macro_rules! keyed_into_backend {
    ($($ty:ident),*) => {$(
        impl<K, C, S> IntoBackend for $ty<K, C, S>
        where
            K: Hash + Eq + Clone + Send + Sync + 'static,
            C: Clock + 'static,
            S: BuildHasher + Send + Sync + 'static,
        {
            type Backend = KeyedBackend<K, $ty<K, C, S>>;
            fn into_backend(self) -> Self::Backend {
                KeyedBackend::new(self)
            }
        }
    )*};
}

keyed_into_backend!(KeyedLimiter, KeyedTable, SketchLimiter, HybridSketchLimiter);

/// A [`Backend`] over an in-process keyed limiter `L`, asked by keys `K`: decisions in
/// nanoseconds, never an error. `L` is any [`KeyedLimit<K>`](KeyedLimit): a [`KeyedLimiter`]
/// ([`LocalBackend`] names that case), a [`KeyedTable`], a [`SketchLimiter`], a `Metered` one.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::{ManualClock, Metered, Quota, SketchLimiter, SketchSize};
/// use tollgate_tower::{Backend, KeyedBackend, PeerIp, RateLimitLayer};
/// let sketch = SketchLimiter::<IpAddr, _>::with_clock(Quota::per_second(1)?, SketchSize::columns(1024)?, ManualClock::new());
/// let b = KeyedBackend::<IpAddr, _>::new(Metered::new(sketch));
/// assert_eq!(b.quota(), Quota::per_second(1)?);
/// let _ = b.try_acquire(&IpAddr::from([10, 0, 0, 1]), 1);
/// assert_eq!(b.limiter().snapshot().allowed, 1);
/// let layer = RateLimitLayer::new(PeerIp::default(), b);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedBackend<K, L> {
    limiter: L,
    /// The key a request asks by: `L` may answer several forms of it.
    _key: PhantomData<fn(&K)>,
}

/// A [`Backend`] over an in-process [`KeyedLimiter`]: decisions in nanoseconds, never an error.
///
/// Build it from your own map ([`LocalBackend::new`], or `From`) to choose its bound, hasher,
/// plans or live quotas; [`LocalBackend::try_new`] builds a bounded one.
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota, WhenFull};
/// use tollgate_tower::{Backend, LocalBackend};
/// let map = KeyedLimiter::<u32>::builder(Algorithm::TokenBucket, Quota::per_second(1)?)
///     .max_keys(NonZeroUsize::new(10_000).unwrap(), WhenFull::Deny)
///     .live()
///     .build_with_clock(ManualClock::new())?;
/// let b = LocalBackend::new(map);
/// assert!(b.limiter().try_acquire(&7).is_allowed());
/// b.limiter().set_quota(Quota::per_second(5)?)?;
/// assert_eq!(b.quota(), Quota::per_second(5)?); // the quota in force
/// # Ok::<(), tollgate::KeyedError>(())
/// ```
pub type LocalBackend<K, C = MonotonicClock, S = KeyHasher> =
    KeyedBackend<K, KeyedLimiter<K, C, S>>;

impl<K, L> KeyedBackend<K, L> {
    /// Decisions from `limiter`, as you built it. For a [`KeyedLimiter`], its bound
    /// ([`max_keys`]), hasher, plans and live quotas are kept as they are: build it with
    /// [`max_keys`] (or sweep it yourself with [`KeyedLimiter::evict_idle`]), since an
    /// unbounded map keeps every client key it ever saw.
    ///
    /// [`max_keys`]: tollgate::KeyedBuilder::max_keys
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedLimiter, Quota, WhenFull};
    /// let per_ip = KeyedLimiter::<std::net::IpAddr>::builder(Algorithm::SlidingWindow, Quota::per_minute(60)?)
    ///     .max_keys(NonZeroUsize::new(50_000).unwrap(), WhenFull::Deny)
    ///     .build()?;
    /// let b = tollgate_tower::LocalBackend::new(per_ip);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn new(limiter: L) -> Self {
        KeyedBackend {
            limiter,
            _key: PhantomData,
        }
    }
}

impl<K: Hash + Eq, C: Clock, S: BuildHasher> From<KeyedLimiter<K, C, S>> for LocalBackend<K, C, S> {
    /// As [`LocalBackend::new`].
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimiter, Quota};
    /// let b: tollgate_tower::LocalBackend<u8> = KeyedLimiter::try_new(Algorithm::FixedWindow, Quota::per_second(2)?)?.into();
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn from(limiter: KeyedLimiter<K, C, S>) -> Self {
        KeyedBackend::new(limiter)
    }
}

impl<K: Hash, C: Clock, S: BuildHasher> From<KeyedTable<K, C, S>>
    for KeyedBackend<K, KeyedTable<K, C, S>>
{
    /// As [`KeyedBackend::new`].
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, Quota};
    /// use tollgate_tower::KeyedBackend;
    /// let table = KeyedTable::<u8>::try_new(Algorithm::TokenBucket, Quota::per_second(2)?, NonZeroUsize::new(64).unwrap())?;
    /// let b: KeyedBackend<u8, _> = table.into();
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    fn from(limiter: KeyedTable<K, C, S>) -> Self {
        KeyedBackend::new(limiter)
    }
}

impl<K: Hash, C: Clock, S: BuildHasher> From<SketchLimiter<K, C, S>>
    for KeyedBackend<K, SketchLimiter<K, C, S>>
{
    /// As [`KeyedBackend::new`].
    ///
    /// ```
    /// use tollgate::{Quota, SketchLimiter, SketchSize};
    /// use tollgate_tower::KeyedBackend;
    /// let b: KeyedBackend<u8, _> = SketchLimiter::<u8>::new(Quota::per_second(2)?, SketchSize::columns(64)?).into();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn from(limiter: SketchLimiter<K, C, S>) -> Self {
        KeyedBackend::new(limiter)
    }
}

impl<K: Hash, C: Clock, S: BuildHasher> From<HybridSketchLimiter<K, C, S>>
    for KeyedBackend<K, HybridSketchLimiter<K, C, S>>
{
    /// As [`KeyedBackend::new`].
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, Quota, SketchSize};
    /// use tollgate_tower::KeyedBackend;
    /// let hybrid = HybridSketchLimiter::<u8>::new(Quota::per_second(2)?, SketchSize::columns(64)?, 16);
    /// let b: KeyedBackend<u8, _> = hybrid.into();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn from(limiter: HybridSketchLimiter<K, C, S>) -> Self {
        KeyedBackend::new(limiter)
    }
}

/// The bound of the maps [`LocalBackend::try_new`] builds.
const DEFAULT_MAX_KEYS: usize = 100_000;
const DEFAULT_BOUND: NonZeroUsize = match NonZeroUsize::new(DEFAULT_MAX_KEYS) {
    Some(n) => n,
    None => panic!("the default bound is not zero"),
};

impl<K, L: core::fmt::Debug> core::fmt::Debug for KeyedBackend<K, L> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyedBackend")
            .field("limiter", &self.limiter)
            .finish()
    }
}

impl<K: Hash + Eq> LocalBackend<K> {
    /// The most keys a map of [`LocalBackend::try_new`] holds: 100,000 (a few MiB for a
    /// token bucket map of IP keys). A new key that finds the map full sweeps the keys whose
    /// limiter is full again (at most once per quota period, or after `max_keys / 16` such
    /// new keys); if none is idle, the new key's request is denied (`WhenFull::Deny`: fail
    /// closed, never a fresh limit). Pick another bound with [`LocalBackend::new`].
    ///
    /// ```
    /// assert_eq!(tollgate_tower::LocalBackend::<()>::DEFAULT_MAX_KEYS, 100_000);
    /// ```
    pub const DEFAULT_MAX_KEYS: usize = DEFAULT_MAX_KEYS;

    /// One `algorithm` limiter per key, each with `quota`, on the default clock, in a map
    /// bounded at [`LocalBackend::DEFAULT_MAX_KEYS`] keys that sweeps its idle keys itself.
    ///
    /// # Errors
    /// The algorithm cannot represent the quota (see `KeyedBuilder::build`).
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota};
    /// let b = tollgate_tower::LocalBackend::<std::net::IpAddr>::try_new(Algorithm::SlidingWindow, Quota::per_minute(60)?)?;
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn try_new(algorithm: Algorithm, quota: Quota) -> Result<Self, KeyedError> {
        Self::try_with_clock(algorithm, quota, MonotonicClock::new())
    }
}

impl<K: Hash + Eq, C: Clock> LocalBackend<K, C> {
    /// As [`LocalBackend::try_new`] (bounded the same way), reading time from `clock` (a
    /// `ManualClock` in tests).
    ///
    /// # Errors
    /// The algorithm cannot represent the quota.
    ///
    /// ```
    /// use tollgate::{Algorithm, ManualClock, Quota};
    /// let b = tollgate_tower::LocalBackend::<u64, _>::try_with_clock(Algorithm::FixedWindow, Quota::per_second(9)?, ManualClock::new())?;
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn try_with_clock(
        algorithm: Algorithm,
        quota: Quota,
        clock: C,
    ) -> Result<Self, KeyedError> {
        let limiter = KeyedLimiter::builder(algorithm, quota)
            .max_keys(DEFAULT_BOUND, WhenFull::Deny)
            .build_with_clock(clock)?;
        Ok(KeyedBackend::new(limiter))
    }
}

impl<K, L> KeyedBackend<K, L> {
    /// The keyed limiter, e.g. to run [`KeyedLimiter::evict_idle`] from a periodic task.
    ///
    /// ```
    /// use tollgate::{Algorithm, ManualClock, Quota};
    /// let b = tollgate_tower::LocalBackend::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(9)?, ManualClock::new())?;
    /// assert_eq!(b.limiter().evict_idle(), 0);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn limiter(&self) -> &L {
        &self.limiter
    }
}

impl<K, L> Backend for KeyedBackend<K, L>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    L: KeyedLimit<K> + Send + Sync + 'static,
{
    type Key = K;
    type Error = Infallible;
    type Future = Ready<Result<Decision, Infallible>>;

    #[inline]
    fn try_acquire(&self, key: &K, cost: u64) -> Self::Future {
        ready(Ok(self.limiter.try_acquire_n(key, cost)))
    }

    fn quota(&self) -> Quota {
        self.limiter.quota()
    }
}

/// A shared keyed limiter as an always-ready, never-failing backend: each type answers by its
/// own `try_acquire_n` and `quota`.
macro_rules! shared_keyed_backend {
    ($($(#[$doc:meta])* $ty:ident;)*) => {$(
        $(#[$doc])*
        impl<K, C, S> Backend for std::sync::Arc<$ty<K, C, S>>
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
                ready(Ok(self.try_acquire_n(key, cost)))
            }

            fn quota(&self) -> Quota {
                $ty::quota(self)
            }
        }
    )*};
}

shared_keyed_backend! {
    /// A shared [`KeyedLimiter`] as a backend: keep a clone of the `Arc` to change a live map's
    /// quotas ([`KeyedLimiter::set_quota`]) or sweep it while the layer runs; the headers announce
    /// the quota in force.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Algorithm, KeyedLimiter, Quota};
    /// use tollgate_tower::{PeerIp, RateLimitLayer};
    /// let per_ip = Arc::new(KeyedLimiter::<std::net::IpAddr>::builder(Algorithm::TokenBucket, Quota::per_second(10)?).live().build()?);
    /// let layer = RateLimitLayer::new(PeerIp::default(), Arc::clone(&per_ip));
    /// per_ip.set_quota(Quota::per_second(50)?)?; // the running layer limits at 50/s from now
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    KeyedLimiter;

    /// A shared [`KeyedTable`] as a backend: keep a clone of the `Arc` to ask it outside the
    /// layer too (one limiter per key for both).
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use std::sync::Arc;
    /// use tollgate::{Algorithm, KeyedTable, Quota};
    /// use tollgate_tower::{PeerIp, RateLimitLayer};
    /// let keys = NonZeroUsize::new(100_000).unwrap();
    /// let per_ip = Arc::new(KeyedTable::<std::net::IpAddr>::try_new(Algorithm::TokenBucket, Quota::per_second(10)?, keys)?);
    /// let layer = RateLimitLayer::new(PeerIp::default(), Arc::clone(&per_ip));
    /// assert!(per_ip.try_acquire(&std::net::IpAddr::from([10, 0, 0, 1])).is_allowed());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    KeyedTable;

    /// A shared [`SketchLimiter`] as a backend: keep a clone of the `Arc` to ask it outside the
    /// layer too (one count per key for both).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, SketchLimiter, SketchSize};
    /// use tollgate_tower::{PeerIp, RateLimitLayer};
    /// let per_ip = Arc::new(SketchLimiter::<std::net::IpAddr>::new(Quota::per_second(10)?, SketchSize::columns(1 << 12)?));
    /// let layer = RateLimitLayer::new(PeerIp::default(), Arc::clone(&per_ip));
    /// assert!(per_ip.try_acquire(&std::net::IpAddr::from([10, 0, 0, 1])).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    SketchLimiter;

    /// A shared [`HybridSketchLimiter`] as a backend, as a shared [`SketchLimiter`] is.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{HybridSketchLimiter, Quota, SketchSize};
    /// use tollgate_tower::{PeerIp, RateLimitLayer};
    /// let per_ip = Arc::new(HybridSketchLimiter::<std::net::IpAddr>::new(
    ///     Quota::per_second(10)?,
    ///     SketchSize::columns(1 << 12)?,
    ///     1 << 10,
    /// ));
    /// let layer = RateLimitLayer::new(PeerIp::default(), Arc::clone(&per_ip));
    /// assert!(per_ip.try_acquire(&std::net::IpAddr::from([10, 0, 0, 1])).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    HybridSketchLimiter;
}
