//! The settings a keyed map is made with: the algorithm, what a full map does, the hasher.

use core::hash::{BuildHasher, Hash};

/// The algorithm every limiter of a [`KeyedLimiter`](crate::KeyedLimiter) runs, picked by setting.
///
/// | variant         | per-key state (beside the key)                          |
/// |-----------------|---------------------------------------------------------|
/// | `TokenBucket`   | 16 bytes: the GCRA word and a pointer to the plan       |
/// | `FixedWindow`   | 16 bytes: the window word and a pointer to the plan     |
/// | `SlidingWindow` | 8-byte box of 144 bytes (state word, 8 slots, ring)     |
/// | `SlidingLog`    | 8-byte box of 48 bytes + 8 × limit                      |
///
/// A map built [`live`](crate::KeyedBuilder::live) keeps 32 bytes per token bucket key (`tat` beside
/// the version of the parameters it is counted in, one 16-byte word, and the plan pointer)
/// and 16 per fixed window key.
///
/// ```
/// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
/// let by_ip = KeyedLimiter::<u32, _>::try_with_clock(
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

/// What a bounded [`KeyedLimiter`](crate::KeyedLimiter) does with a new key when the map is full of keys that are
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
/// # Ok::<(), tollgate::KeyedError>(())
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
/// another with [`KeyedBuilder::hasher`](crate::KeyedBuilder::hasher).
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

/// A key's hash mixed again (murmur3's 64-bit finalizer), for every use that reads its bits
/// as positions. A fast hasher's bits can be regular for regular keys: foldhash hashes a `u64`
/// with one multiply, and under about one random seed in a hundred the hashes of keys in
/// sequence keep a pattern; an identity hasher is common for integers. Read
/// directly, such bits crowd keys onto a few buckets or sketch columns. The finalizer is a
/// bijection, so keys of distinct hashes keep distinct mixed hashes.
#[inline(always)]
pub(crate) fn remix(hash: u64) -> u64 {
    let mut h = hash;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}
