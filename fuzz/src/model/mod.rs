//! Reference models: each algorithm's documented semantics, written again for clarity rather
//! than speed, from the module headers in `src/algo/*.rs` and the README's algorithm table,
//! without tollgate's decision functions. Plain integers (u128 where products may be wide),
//! plain collections, searches instead of closed forms where a search says it more plainly.
//!
//! Each model answers `acquire(now_ns, n)` with an [`Outcome`](crate::Outcome), the reading
//! of the clock passed in as is (the model clamps it at the horizon itself). The token
//! bucket, fixed window and sliding window models also answer `refund(now_ns, n)` and take
//! `set_quota`: a live limiter's change of quota (`tollgate::Live`), its level carried over as
//! documented there.

mod fixed_window;
mod sliding_log;
mod sliding_window;
mod token_bucket;

pub use fixed_window::FixedWindowModel;
pub use sliding_log::SlidingLogModel;
pub use sliding_window::SlidingWindowModel;
pub use token_bucket::TokenBucketModel;

/// Greatest common divisor.
pub(crate) fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A live window keeps its period (`period_ns`): `quota` of another one is refused.
pub(crate) fn same_period(
    period_ns: u64,
    quota: &tollgate::Quota,
) -> Result<(), tollgate::QuotaError> {
    let fixed = std::time::Duration::from_nanos(period_ns);
    if quota.period() != fixed {
        return Err(tollgate::QuotaError::PeriodFixed {
            period: quota.period(),
            fixed,
        });
    }
    Ok(())
}
