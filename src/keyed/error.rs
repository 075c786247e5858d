//! [`KeyedError`]: why a keyed map could not be built or could not change a quota.

use core::fmt;

use crate::quota::QuotaError;

/// Why a keyed map could not be built, or could not change a quota: the quota itself refused
/// ([`KeyedError::Quota`]), a change asked of a map without the live form
/// ([`KeyedError::NotLive`]), which is a use of the map, not a problem of the quota, or a
/// [`KeyedTable`](crate::KeyedTable) asked of an algorithm it does not hold or of a size that
/// cannot be allocated.
///
/// ```
/// use tollgate::{Algorithm, KeyedError, KeyedLimiter, Quota};
/// let fixed = KeyedLimiter::<u64>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?;
/// assert_eq!(fixed.set_quota(Quota::per_second(9)?), Err(KeyedError::NotLive));
/// let log = KeyedLimiter::<u64>::builder(Algorithm::SlidingLog, Quota::per_second(5)?).live().build();
/// assert!(matches!(log, Err(KeyedError::NotLive)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedError {
    /// A quota change was asked of a keyed map built without
    /// [`KeyedBuilder::live`](crate::KeyedBuilder::live), or `live` of an algorithm whose
    /// keyed limiters have no live form (the sliding window and the sliding log keep per-key
    /// state sized and indexed by the quota they were made with).
    NotLive,
    /// The algorithm refused the quota.
    Quota(QuotaError),
    /// A [`KeyedTable`](crate::KeyedTable) holds one-word limiters (token bucket, fixed
    /// window); this algorithm's keep several words per key.
    Algorithm(super::Algorithm),
    /// A [`KeyedTable`](crate::KeyedTable) for that many keys cannot be allocated.
    Capacity,
}

impl From<QuotaError> for KeyedError {
    /// A refused quota.
    ///
    /// ```
    /// use tollgate::{KeyedError, QuotaError};
    /// assert_eq!(KeyedError::from(QuotaError::ZeroLimit), KeyedError::Quota(QuotaError::ZeroLimit));
    /// ```
    fn from(error: QuotaError) -> Self {
        KeyedError::Quota(error)
    }
}

impl fmt::Display for KeyedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedError::NotLive => f.write_str(
                "this keyed map's quotas are fixed: build it with `live()` (token bucket or \
                 fixed window) to change them while it runs",
            ),
            KeyedError::Quota(error) => fmt::Display::fmt(error, f),
            KeyedError::Algorithm(algorithm) => write!(
                f,
                "a keyed table holds token buckets and fixed windows, one word per key; \
                 {algorithm:?} keeps several: use KeyedLimiter"
            ),
            KeyedError::Capacity => {
                f.write_str("a keyed table for that many keys cannot be allocated")
            }
        }
    }
}

impl std::error::Error for KeyedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KeyedError::NotLive | KeyedError::Algorithm(_) | KeyedError::Capacity => None,
            KeyedError::Quota(error) => Some(error),
        }
    }
}
