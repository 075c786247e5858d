//! [`check_costs_above_capacity`]: what every limiter answers a cost it can never allow.

use tollgate::Decision;

/// Checks a fresh limiter of `capacity` units (the burst of a bucket, the limit of a window)
/// through `acquire` (a request of `n` units): a cost above the capacity is refused at once,
/// with no retry and nothing taken (the whole capacity then passes), and a cost within the
/// capacity but above what is left is a plain denial. `name` names the limiter in the
/// messages.
///
/// ```
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
/// use tollgate_test_support::check_costs_above_capacity;
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(5).unwrap(), &clock);
/// check_costs_above_capacity("TokenBucket", 5, |n| bucket.try_acquire_n(n));
/// ```
pub fn check_costs_above_capacity(name: &str, capacity: u64, acquire: impl Fn(u64) -> Decision) {
    let d = acquire(capacity + 1);
    assert!(d.exceeds_capacity() && !d.is_allowed(), "{name}");
    assert_eq!(d.retry_after(), None, "{name}");
    assert_eq!(d.remaining(), capacity, "{name}");
    assert!(acquire(u64::MAX).exceeds_capacity(), "{name}");
    // Nothing was taken: the whole capacity still passes.
    assert!(acquire(capacity).is_allowed(), "{name}");
    // A cost within capacity but above what is left is a plain denial.
    let d = acquire(capacity);
    assert!(!d.exceeds_capacity() && d.retry_after().is_some(), "{name}");
}
