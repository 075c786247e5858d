//! [`Stats`]: the counters every clone of a layer shares.

use core::sync::atomic::{AtomicU64, Ordering};

/// Counters shared by every clone of one layer. Admissions are not counted (that would put
/// a shared write on every request); everything else is.
///
/// ```
/// use tollgate::{Algorithm, Quota};
/// use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
/// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?);
/// assert_eq!(layer.stats().denied(), 0);
/// # Ok::<(), tollgate::KeyedError>(())
/// ```
#[derive(Debug, Default)]
pub struct Stats {
    pub(crate) denied: AtomicU64,
    pub(crate) shadow_denied: AtomicU64,
    pub(crate) missing_key: AtomicU64,
    pub(crate) invalid_key: AtomicU64,
    pub(crate) errors: AtomicU64,
}

impl Stats {
    /// Requests answered with a denial.
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().denied(), 0);
    /// ```
    pub fn denied(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.denied.load(Ordering::Relaxed)
    }

    /// Requests a shadow-mode layer let through that it would have denied.
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().shadow_denied(), 0);
    /// ```
    pub fn shadow_denied(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.shadow_denied.load(Ordering::Relaxed)
    }

    /// Requests without a key (whatever [`MissingKey`](crate::MissingKey) then did with them).
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().missing_key(), 0);
    /// ```
    pub fn missing_key(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.missing_key.load(Ordering::Relaxed)
    }

    /// Requests refused (or, in shadow mode, passed) for naming their key more than once
    /// ([`KeyError::Ambiguous`](crate::KeyError::Ambiguous)).
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().invalid_key(), 0);
    /// ```
    pub fn invalid_key(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.invalid_key.load(Ordering::Relaxed)
    }

    /// Requests the backend could not decide (whatever [`OnError`](crate::OnError) then did with them).
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().errors(), 0);
    /// ```
    pub fn errors(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.errors.load(Ordering::Relaxed)
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        // Relaxed: an independent counter; readers need no ordering with other memory.
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
