//! Token bucket as GCRA: the whole state is one theoretical arrival time (TAT).
//!
//! # State word
//!
//! | bits   | field | meaning                                                              |
//! |--------|-------|----------------------------------------------------------------------|
//! | 0..=63 | `tat` | theoretical arrival time, in ticks of `1/scale` ns since clock zero  |
//!
//! The bucket at tick `now` holds `min(burst, (now + capacity - tat) / interval)` tokens, where
//! `interval` is the ticks between two tokens and `capacity = burst × interval`. A fresh bucket
//! has `tat = 0`: full. Taking `n` tokens moves `tat` to `max(tat, now) + n × interval`.
//!
//! Ticks make fractional rates exact: for 3 per 7 s, `scale = 3` and `interval = 7·10^9`
//! ticks (7/3 s), so no rounding ever accumulates. `scale` is `limit / gcd(limit, period)`
//! capped at 32 (see [`Quota::is_exact`](crate::Quota::is_exact)); with the horizon of 2^58 ns,
//! `tat + n × interval < 2^63 + 2 × capacity ≤ 2^64` (capacity < 2^62): no overflow is possible.
//!
//! # Invariant
//!
//! `tat ≤ max(tat_before, now) + capacity` after every admission, so at any instant the
//! admissions in `[t0, t1]` never exceed `burst + (t1 - t0) × limit / period` (rounded down).
//!
//! # Orderings
//!
//! `tat` is the only shared state and publishes nothing else: every access is `Relaxed`.
//! Admissions are compare-exchanges on that one word, so they are totally ordered by its
//! modification order and each one decided on the latest value (a stale load fails the
//! compare-exchange). A denial decided on a stale, smaller `tat` is still right: `tat` only
//! grows, so a later value would deny too.
//!
//! # Hot path
//!
//! One load and one compare-exchange to admit; one load to deny (nothing is written).
//!
//! # Time going backwards
//!
//! A `now` earlier than before reads as fewer tokens (the bucket is as it was at that earlier
//! instant, minus nothing it has not earned): never more admissions, never a panic.

use super::{update, Algo, AlwaysFits, Step};
use crate::decision::Decision;
use crate::limiter::{DefaultClock, RateLimiter};
use crate::quota::{GcraParams, Quota, QuotaError, HORIZON};
use crate::sync::{AtomicU64, Ordering};

/// The pure decision: state, now, cost → decision and new state. No atomics, no clock.
#[inline]
pub fn decide(p: &GcraParams, tat: u64, now_ns: u64, n: u64) -> Step {
    let now = now_ns.min(HORIZON) * u64::from(p.scale);
    let base = tat.max(now);
    // Most quotas tick in whole ns (scale 1): skip the division there.
    let ticks_to_ns = |ticks: u64| {
        if p.scale == 1 {
            ticks
        } else {
            ticks.div_ceil(u64::from(p.scale))
        }
    };
    if p.exceeds(n) {
        let remaining = p.tokens((now + p.capacity).saturating_sub(base));
        return (Decision::exceeds(remaining, ticks_to_ns(base - now)), None);
    }
    // now ≤ 2^63 and every written tat ≤ (some now) + capacity, with capacity < 2^62 and
    // n × interval ≤ capacity: new_tat < 2^63 + 2 × 2^62 = 2^64.
    let new_tat = base + n * p.interval;
    if new_tat - now <= p.capacity {
        let remaining = p.tokens(now + p.capacity - new_tat);
        let write = (n != 0).then_some(new_tat);
        (
            Decision::allowed(remaining, ticks_to_ns(new_tat - now)),
            write,
        )
    } else {
        // Only when tat > now: the request passes once now ≥ new_tat - capacity.
        // Denied means fewer than `n` tokens are there: none at all for a unit request, and
        // the common denial skips the division.
        let remaining = if n == 1 {
            0
        } else {
            p.tokens((now + p.capacity).saturating_sub(base))
        };
        let pass_at = ticks_to_ns(new_tat - p.capacity);
        (
            Decision::denied(remaining, now_ns, pass_at, ticks_to_ns(base - now)),
            None,
        )
    }
}

/// The admission alone: the new `tat` when `decide` would admit and write, else `None`.
/// No division: the compare-exchange loop runs this, and `decide` only once it is settled,
/// so the window between the load and the compare-exchange stays a few instructions long.
#[inline]
pub fn admit(p: &GcraParams, tat: u64, now_ns: u64, n: u64) -> Option<u64> {
    if n == 0 || p.exceeds(n) {
        return None;
    }
    let now = now_ns.min(HORIZON) * u64::from(p.scale);
    let new_tat = tat.max(now) + n * p.interval;
    (new_tat - now <= p.capacity).then_some(new_tat)
}

/// The token bucket: parameters [`GcraParams`], state one `tat` word.
#[derive(Debug)]
pub struct Gcra;

impl Algo for Gcra {
    type Params = GcraParams;
    type State = AtomicU64;

    fn params(quota: &Quota) -> Result<GcraParams, QuotaError> {
        quota.gcra().ok_or(QuotaError::RateTooHigh {
            limit: quota.limit(),
            period: quota.period(),
        })
    }

    fn state(_: &GcraParams) -> Result<AtomicU64, QuotaError> {
        Ok(AtomicU64::new(0))
    }

    /// The compare-exchange loop around [`admit`], then [`decide`] once it is settled.
    #[inline]
    fn acquire(tat: &AtomicU64, p: &GcraParams, now_ns: u64, n: u64) -> Decision {
        // The `tat` the decision is made on: the one a denial read, or the one an admission's
        // compare-exchange replaced. Relaxed load and CAS: the CAS orders admissions on this
        // one word, and nothing else is published (see the module's orderings).
        let ((), decided_on) = update(
            tat,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |tat| {
                let write = admit(p, tat, now_ns, n);
                debug_assert_eq!(write, decide(p, tat, now_ns, n).1);
                ((), write)
            },
        );
        decide(p, decided_on, now_ns, n).0
    }
}

impl AlwaysFits for Gcra {}

/// A lock-free token bucket (GCRA): bursts up to the quota's burst, then a steady
/// `limit / period`, refilled continuously and exactly. The whole state is one `AtomicU64`.
///
/// A fresh bucket is full; an idle bucket refills to its capacity and no further.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(5)?, clock.clone());
/// let passed = (0..10).filter(|_| bucket.try_acquire().is_allowed()).count();
/// assert_eq!(passed, 5); // the burst
/// clock.advance(Duration::from_millis(200));
/// assert!(bucket.try_acquire().is_allowed()); // one token per 200 ms
/// assert!(!bucket.try_acquire().is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type TokenBucket<C = DefaultClock> = RateLimiter<Gcra, C>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    fn params(limit: u64, period: Duration) -> GcraParams {
        Quota::new(limit, period).unwrap().gcra().unwrap()
    }

    #[test]
    fn decide_takes_the_whole_burst_then_denies() {
        let p = params(5, Duration::from_secs(1));
        let mut tat = 0;
        for left in (0..5).rev() {
            let (d, w) = decide(&p, tat, 0, 1);
            assert!(d.is_allowed());
            assert_eq!(d.remaining(), left);
            tat = w.unwrap();
        }
        let (d, w) = decide(&p, tat, 0, 1);
        assert!(!d.is_allowed() && w.is_none());
        assert_eq!(d.retry_after(), Some(Duration::from_millis(200)));
        assert_eq!(d.reset_after(), Duration::from_secs(1));
    }

    #[test]
    fn decide_zero_cost_never_writes() {
        let p = params(5, Duration::from_secs(1));
        let (d, w) = decide(&p, 0, 0, 0);
        assert!(d.is_allowed() && w.is_none());
        assert_eq!(d.remaining(), 5);
    }

    #[test]
    fn decide_clamps_time_at_the_horizon() {
        let p = params(1, Duration::from_secs(1));
        let (d, w) = decide(&p, 0, u64::MAX, 1);
        assert!(d.is_allowed());
        let (d, _) = decide(&p, w.unwrap(), u64::MAX, 1);
        // Time stands still at the horizon: the next token would come after it.
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
    }
}
