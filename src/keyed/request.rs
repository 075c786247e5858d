//! [`KeyedLimit`]: what every keyed limiter answers, the keyed analogue of
//! [`Limiter`](crate::Limiter).

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};

use crate::clock::Clock;
use crate::decision::Decision;
use crate::quota::Quota;
use crate::sketch::{HybridSketchLimiter, SketchLimiter};

use super::map::KeyedLimiter;
use super::pin::KeyedPin;
use super::table::KeyedTable;

/// A keyed rate limiter: one limit per key, asked by a key of type `Q`.
///
/// [`KeyedLimiter`], its [`KeyedPin`], [`KeyedTable`], a [`Metered`](crate::Metered) keyed
/// limiter, [`SketchLimiter`] and [`HybridSketchLimiter`] implement it, so code can take `&dyn KeyedLimit<str>` or be generic over
/// which keyed limiter it asks (tollgate-tower's layer takes any of them). Each type's own
/// methods of the same names answer the same: the trait's methods call them.
///
/// `Q` is the form of the key a request passes, as for the types' own methods: a map of
/// `String` keys is a `KeyedLimit<String>` and a `KeyedLimit<str>`. `Q` is the trait's
/// parameter rather than each method's so that the trait can be a `dyn` object, and so that
/// a limiter that stores no key (the sketch and the table, which only hash it) can take one
/// that cannot be owned (`SketchLimiter<str>`), while the map, which stores a new key, asks for
/// `Q: ToOwned` of its key type.
///
/// Not `Send + Sync`: a [`KeyedPin`] serves one thread. Code that shares a keyed limiter
/// between threads asks for `KeyedLimit<Q> + Send + Sync`.
///
/// ```
/// use tollgate::{Algorithm, KeyedLimit, KeyedLimiter, ManualClock, Metered, Quota};
/// use tollgate::{SketchLimiter, SketchSize};
///
/// fn admitted(limiter: &dyn KeyedLimit<str>, key: &str, requests: u32) -> usize {
///     (0..requests).filter(|_| limiter.try_acquire(key).is_allowed()).count()
/// }
/// let quota = Quota::per_second(5)?;
/// let map = || KeyedLimiter::<String, _>::try_with_clock(Algorithm::FixedWindow, quota, ManualClock::new());
/// let sketch = SketchLimiter::<str, _>::with_clock(quota, SketchSize::columns(1024)?, ManualClock::new());
///
/// let (exact, metered) = (map()?, Metered::new(map()?));
/// assert_eq!(admitted(&exact, "alice", 10), 5);
/// assert_eq!(admitted(&exact.pin(), "bob", 10), 5);
/// assert_eq!(admitted(&metered, "alice", 10), 5);
/// assert_eq!(admitted(&sketch, "alice", 10), 5); // no collision in 1024 columns
/// assert_eq!(metered.snapshot().denied, 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyedLimit<Q: ?Sized> {
    /// Asks for one unit for `key`.
    ///
    /// ```
    /// use tollgate::{KeyedLimit, ManualClock, Quota, SketchLimiter, SketchSize};
    /// fn one<L: KeyedLimit<u64>>(l: &L) -> bool {
    ///     l.try_acquire(&7).is_allowed()
    /// }
    /// let l = SketchLimiter::<u64, _>::with_clock(Quota::per_second(1)?, SketchSize::columns(64)?, ManualClock::new());
    /// assert!(one(&l));
    /// assert!(!one(&l));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    fn try_acquire(&self, key: &Q) -> Decision {
        self.try_acquire_n(key, 1)
    }

    /// Asks for `n` units for `key` at once: all are taken or none. `n = 0` always passes and
    /// takes nothing; `n` above the key's capacity is denied with
    /// [`Decision::exceeds_capacity`].
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimit, KeyedLimiter, ManualClock, Quota};
    /// fn cost<L: KeyedLimit<str>>(l: &L, key: &str, n: u64) -> bool {
    ///     l.try_acquire_n(key, n).is_allowed()
    /// }
    /// let l = KeyedLimiter::<String, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(10)?, ManualClock::new())?;
    /// assert!(cost(&l, "alice", 7));
    /// assert!(!cost(&l, "alice", 4)); // only 3 left: none taken
    /// assert!(cost(&l, "alice", 3));
    /// assert!(l.try_acquire_n("alice", 11).exceeds_capacity());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn try_acquire_n(&self, key: &Q, n: u64) -> Decision;

    /// The quota a key is limited to when its request names no plan: the one in force now (a
    /// live map's [`set_quota`](KeyedLimiter::set_quota) changes it), for a
    /// `RateLimit-Policy` header.
    ///
    /// ```
    /// use tollgate::{Algorithm, KeyedLimit, KeyedLimiter, Quota};
    /// fn policy<L: KeyedLimit<u64>>(l: &L) -> Quota {
    ///     l.quota()
    /// }
    /// let l = KeyedLimiter::<u64>::builder(Algorithm::TokenBucket, Quota::per_second(5)?).live().build()?;
    /// l.set_quota(Quota::per_second(8)?)?;
    /// assert_eq!(policy(&l), Quota::per_second(8)?);
    /// assert_eq!(policy(&l.pin()), Quota::per_second(8)?);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    fn quota(&self) -> Quota;
}

/// `KeyedLimit` for a type whose own methods of the trait's names answer it: each trait method
/// calls the type's own.
macro_rules! keyed_limit_by_own_methods {
    ($($ty:ident where [$($bound:tt)*];)*) => {$(
        impl<K, Q, C, S> KeyedLimit<Q> for $ty<K, C, S>
        where
            $($bound)*
            C: Clock,
            S: BuildHasher,
        {
            #[inline]
            fn try_acquire(&self, key: &Q) -> Decision {
                $ty::try_acquire(self, key)
            }

            #[inline]
            fn try_acquire_n(&self, key: &Q, n: u64) -> Decision {
                $ty::try_acquire_n(self, key, n)
            }

            #[inline]
            fn quota(&self) -> Quota {
                $ty::quota(self)
            }
        }
    )*};
}

keyed_limit_by_own_methods! {
    KeyedLimiter where [K: Hash + Eq + Borrow<Q>, Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,];
    SketchLimiter where [K: Borrow<Q> + ?Sized, Q: Hash + ?Sized,];
    HybridSketchLimiter where [K: Borrow<Q> + ?Sized, Q: Hash + ?Sized,];
    KeyedTable where [K: Borrow<Q> + ?Sized, Q: Hash + ?Sized,];
}

impl<K, Q, C, S> KeyedLimit<Q> for KeyedPin<'_, K, C, S>
where
    K: Hash + Eq + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
    S: BuildHasher,
{
    #[inline]
    fn try_acquire(&self, key: &Q) -> Decision {
        KeyedPin::try_acquire(self, key)
    }

    #[inline]
    fn try_acquire_n(&self, key: &Q, n: u64) -> Decision {
        KeyedPin::try_acquire_n(self, key, n)
    }

    #[inline]
    fn quota(&self) -> Quota {
        self.limiter.quota()
    }
}
