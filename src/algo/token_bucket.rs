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
//! One load and one compare-exchange to admit; one load to deny (nothing is written). Between
//! the clock read and the compare-exchange only a max, an add and a compare (scale 1); the
//! decision carries its durations in ticks and divides only when asked.
//!
//! # Time going backwards
//!
//! A `now` earlier than before reads as fewer tokens (the bucket is as it was at that earlier
//! instant, minus nothing it has not earned): never more admissions, never a panic. A zero
//! cost still passes. A refund on a `tat` more than the capacity past its `now` gives nothing.

use super::{update, Algo, AlwaysFits, Step};
use crate::decision::{Decision, NO_RETRY};
use crate::quota::{GcraParams, Quota, QuotaError, HORIZON};
use crate::sync::{AtomicU64, Ordering};

/// `now_ns` in ticks, clamped at the horizon.
#[inline]
pub fn ticks(p: &GcraParams, now_ns: u64) -> u64 {
    now_ns.min(HORIZON) * u64::from(p.scale)
}

/// An admission that moved `tat` to `new_tat` at tick `now`. The decision keeps its
/// durations in ticks; its accessors round them to ns when asked.
#[inline]
pub fn allowed(p: &GcraParams, now: u64, new_tat: u64) -> Decision {
    Decision::allowed(p.tokens(now + p.capacity - new_tat), new_tat - now).in_ticks(p.scale)
}

/// A denial at tick `now`, on a bucket whose `tat.max(now)` is `base`, of a cost that would
/// have moved it to `new_tat`.
#[inline]
fn denied(p: &GcraParams, now: u64, base: u64, new_tat: u64, n: u64) -> Decision {
    // Denied means fewer than `n` tokens are there: none at all for a unit request, and the
    // common denial skips the multiply.
    let remaining = if n == 1 {
        0
    } else {
        p.tokens((now + p.capacity).saturating_sub(base))
    };
    // Only when tat > now: the request passes once now ≥ new_tat - capacity, unless that lies
    // past the horizon (`HORIZON × scale` in ticks), where time stands still.
    let pass_at = new_tat - p.capacity;
    let retry = if pass_at > HORIZON * u64::from(p.scale) {
        NO_RETRY
    } else {
        pass_at - now
    };
    Decision::denied_after(remaining, retry, base - now).in_ticks(p.scale)
}

/// A cost above the burst: denied, nothing taken, no retry.
#[inline]
fn exceeds(p: &GcraParams, now: u64, base: u64) -> Decision {
    let remaining = p.tokens((now + p.capacity).saturating_sub(base));
    Decision::exceeds(remaining, base - now).in_ticks(p.scale)
}

/// The pure decision at a clock reading in ns (the leased bucket, the tests and the loom
/// mutants call it; the hot path calls [`decide_at`] on the ticks it already has).
#[inline]
pub fn decide(p: &GcraParams, tat: u64, now_ns: u64, n: u64) -> Step {
    decide_at(p, tat, ticks(p, now_ns), n)
}

/// The pure decision: state, now (in ticks, scaled and clamped), cost → decision and new
/// state. No atomics, no clock. No division either: the decision's durations stay in ticks.
#[inline]
pub fn decide_at(p: &GcraParams, tat: u64, now: u64, n: u64) -> Step {
    let base = tat.max(now);
    if p.exceeds(n) {
        return (exceeds(p, now, base), None);
    }
    // now ≤ 2^63 and every written tat ≤ (some now) + capacity, with capacity < 2^62 and
    // n × interval ≤ capacity: new_tat < 2^63 + 2 × 2^62 = 2^64.
    let new_tat = base + n * p.interval;
    if new_tat - now <= p.capacity {
        (allowed(p, now, new_tat), (n != 0).then_some(new_tat))
    } else if n == 0 {
        // A zero cost passes even on a `tat` more than the capacity past `now`: a reading
        // behind the one another request wrote it with. No tokens left, full at `tat`.
        (Decision::allowed(0, base - now).in_ticks(p.scale), None)
    } else {
        (denied(p, now, base, new_tat, n), None)
    }
}

/// [`admit_at`] at a clock reading in ns (the keyed map's one-word commit loop runs it).
#[cfg(feature = "std")]
#[inline]
pub(crate) fn admit(p: &GcraParams, tat: u64, now_ns: u64, n: u64) -> Option<u64> {
    admit_at(p, tat, ticks(p, now_ns), n)
}

/// The admission alone: the new `tat` when [`decide_at`] would admit and write, else `None`.
/// A compare and an add: the compare-exchange loop runs this, so the window between the load
/// and the compare-exchange stays a few instructions long.
#[inline]
pub fn admit_at(p: &GcraParams, tat: u64, now: u64, n: u64) -> Option<u64> {
    if n == 0 || p.exceeds(n) {
        return None;
    }
    let new_tat = tat.max(now) + n * p.interval;
    (new_tat - now <= p.capacity).then_some(new_tat)
}

/// [`Gcra::acquire`] at tick `now` (scaled and clamped): the compare-exchange loop.
#[inline(always)]
fn acquire_at(tat: &AtomicU64, p: &GcraParams, now: u64, n: u64) -> Decision {
    // Relaxed load and CAS: the CAS orders admissions on this one word, and nothing else is
    // published (see the module's orderings). The loop runs `admit_at` alone (a closure this
    // small is always inlined); the decision is made once it is settled, on the `tat` the
    // compare-exchange replaced, or the one a denial read.
    let (admitted, decided_on) = update(
        tat,
        Ordering::Relaxed,
        Ordering::Relaxed,
        Ordering::Relaxed,
        |tat| {
            let write = admit_at(p, tat, now, n);
            (write, write)
        },
    );
    let d = match admitted {
        Some(new_tat) => allowed(p, now, new_tat),
        // A zero cost passes and takes nothing.
        None if n == 0 => decide_at(p, decided_on, now, 0).0,
        // A denial, or a cost above the burst: nothing was written. Never allowed on this
        // path, which lets a caller that asks only `is_allowed` skip all of it.
        None => refused(p, decided_on, now, n),
    };
    debug_assert_eq!((d, admitted), decide_at(p, decided_on, now, n));
    d
}

/// The decision on a request `admit_at` refused at tick `now` (`n` > 0): above the burst, or
/// more than the bucket holds. The same answer as [`decide_at`]'s, from its two refusing arms.
#[inline]
pub fn refused(p: &GcraParams, tat: u64, now: u64, n: u64) -> Decision {
    let base = tat.max(now);
    if p.exceeds(n) {
        exceeds(p, now, base)
    } else {
        denied(p, now, base, base + n * p.interval, n)
    }
}

/// [`Gcra::acquire`] for a fractional quota (scale above 1), or a reading past the horizon.
#[inline(never)]
fn acquire_scaled(tat: &AtomicU64, p: &GcraParams, now_ns: u64, n: u64) -> Decision {
    acquire_at(tat, p, ticks(p, now_ns), n)
}

/// A refund of `n` on `tat` at `now` (ticks): the whole tokens given back and the new `tat`,
/// never before `now` (a bucket is never fuller than full). Nothing when `tat` lies more than
/// the capacity past `now`: no admission at `now` writes that, so another request wrote it
/// with a later reading, and `now` is too old to say how much of the charge is still owed
/// (moving `tat` back towards it could give back more than the burst). Pure.
#[inline]
pub(crate) fn refunded(p: &GcraParams, tat: u64, now: u64, n: u64) -> (u64, Option<u64>) {
    if tat <= now || n == 0 {
        return (0, None); // full: nothing to give back
    }
    if tat - now > p.capacity {
        return (0, None); // a reading behind the word's: a refund lost, never one too many
    }
    let new = tat.saturating_sub(n.saturating_mul(p.interval)).max(now);
    ((tat - new) / p.interval, Some(new))
}

/// The token bucket: parameters [`GcraParams`], state one `tat` word.
#[derive(Debug)]
pub struct Gcra;

impl super::sealed::Sealed for Gcra {}

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

    /// The compare-exchange loop around [`admit_at`]; [`decide_at`] answers a denial.
    /// Always inlined: a caller that only asks `is_allowed` then computes nothing else (the
    /// remaining tokens and the durations are dead code to it).
    #[inline(always)]
    fn acquire(tat: &AtomicU64, p: &GcraParams, now_ns: u64, n: u64) -> Decision {
        // Most quotas tick in whole ns (scale 1), and clocks read below the horizon for their
        // first 9 years: then a tick is the reading itself, and nothing stands between the
        // clock read and the compare-exchange but a max and an add.
        if now_ns > HORIZON || p.scale != 1 {
            return acquire_scaled(tat, p, now_ns, n);
        }
        acquire_at(tat, p, now_ns, n)
    }

    /// One load and [`decide`].
    #[inline]
    fn peek(tat: &AtomicU64, p: &GcraParams, now_ns: u64, n: u64) -> Decision {
        // Relaxed: a value of the one word, as a denial reads it (see the module's orderings).
        decide(p, tat.load(Ordering::Relaxed), now_ns, n).0
    }

    /// `tat` back by `n` tokens, never before now; the whole tokens it moved. Nothing on a
    /// `tat` more than the capacity past now (the reading is behind the word's).
    fn refund(tat: &AtomicU64, p: &GcraParams, now_ns: u64, n: u64) -> u64 {
        let now = ticks(p, now_ns);
        // Relaxed load and CAS: the one word publishes nothing (see the module's orderings).
        let (given, _) = update(
            tat,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |tat| refunded(p, tat, now, n),
        );
        given
    }
}

impl AlwaysFits for Gcra {}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    fn params(limit: u64, period: Duration) -> GcraParams {
        Quota::try_new(limit, period).unwrap().gcra().unwrap()
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
