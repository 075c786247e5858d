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
//! grows, so a later value would deny too. A live bucket (`Retune for Gcra`) loads `Acquire`
//! and a quota change carries the word `Release`, so parameters and word belong together.
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
use crate::limiter::{DefaultClock, RateLimiter};
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

/// The `tat` that carries a bucket's level from `old` to `new` at tick `now`: the debt
/// `tat - now` (the tokens used, in ticks of `old`) counted in tokens of `new`, rounded up,
/// and at most the new capacity (a bucket is never emptier than empty). `None` when full.
#[cfg(feature = "std")]
pub(crate) fn carried(old: &GcraParams, new: &GcraParams, tat: u64, now: u64) -> Option<u64> {
    if tat <= now {
        return None;
    }
    let debt = (u128::from(tat - now) * u128::from(new.interval))
        .div_ceil(u128::from(old.interval))
        .min(u128::from(new.capacity));
    // debt ≤ capacity < 2^62 and now ≤ 2^63: no overflow.
    Some(now + debt as u64)
}

#[cfg(feature = "std")]
use crate::live::ParamCell;
#[cfg(feature = "std")]
use crate::sync::AtomicU128;

#[cfg(all(feature = "std", tollgate_loom))]
pub(crate) mod planted;

/// The finest tick of a live bucket, in ticks per ns.
#[cfg(feature = "std")]
const LIVE_MAX_SCALE: u32 = 16;

/// A live bucket's word: `epoch` (the version of the parameters `tat` is counted in) beside
/// `tat`, compared and exchanged together.
#[cfg(feature = "std")]
#[inline]
fn join(epoch: u64, tat: u64) -> u128 {
    u128::from(epoch) << 64 | u128::from(tat)
}

/// A live word's `(epoch, tat)`.
#[cfg(feature = "std")]
#[inline]
fn split(word: u128) -> (u64, u64) {
    ((word >> 64) as u64, word as u64)
}

/// The parameters a live word of epoch `epoch` is counted in, and that epoch: `version`'s
/// (read after the word), or if a change to `version` has not carried the word yet, the
/// previous ones; `None` if the cell no longer holds those (the word has been carried since
/// it was loaded).
#[cfg(feature = "std")]
#[inline]
fn counted_in(cell: &ParamCell, epoch: u64) -> Option<(GcraParams, u64)> {
    let (version, words) = cell.read_versioned();
    if epoch == version {
        return Some((GcraParams::from_words(words), version));
    }
    let previous = version.wrapping_sub(1);
    if epoch != previous {
        return None;
    }
    let words = cell.read_version(previous)?;
    Some((GcraParams::from_words(words), epoch))
}

/// The live bucket's compare-exchange loop: `f` decides on a `tat` under the parameters it
/// is counted in, read after the word (a request that finds the word not yet carried by a
/// change is decided under the previous quota, on the state before the change: it never
/// waits for the change). Its compare-exchange compares the epoch too, and epochs only
/// grow: a word carried since the load never matches again, however many changes ran.
#[cfg(feature = "std")]
#[inline]
fn live_update<T>(
    word: &AtomicU128,
    cell: &ParamCell,
    now_ns: u64,
    f: impl Fn(&GcraParams, u64, u64) -> (T, Option<u64>),
) -> T {
    // Acquire: a word a change carried to version v (or any later write, through the
    // release sequence) makes the parameters read after it version v or later.
    let mut current = word.load(Ordering::Acquire);
    loop {
        let (epoch, tat) = split(current);
        let Some((p, epoch)) = counted_in(cell, epoch) else {
            // The word has been carried since it was loaded: load it again.
            crate::sync::Backoff::new().snooze();
            // Acquire: as the first load.
            current = word.load(Ordering::Acquire);
            continue;
        };
        let (outcome, write) = f(&p, tat, ticks(&p, now_ns));
        let Some(tat) = write else {
            return outcome;
        };
        // Relaxed success: an admission publishes nothing. Acquire failure: as the first
        // load. Weak: a spurious failure loops once more.
        match word.compare_exchange_weak(
            current,
            join(epoch, tat),
            Ordering::Relaxed,
            Ordering::Acquire,
        ) {
            Ok(_) => return outcome,
            Err(actual) => current = actual,
        }
    }
}

/// Why a live bucket ticking `scale` times per ns cannot take `quota`: a rate above one token
/// per tick, or a capacity of 2^62 ticks or more (a burst too large, or a single token's
/// interval that long: a period too long for the tick).
#[cfg(feature = "std")]
fn refusal(quota: &Quota, scale: u32) -> QuotaError {
    let (limit, period) = (u128::from(quota.limit()), quota.period());
    let ticks = u128::from(quota.period_ns()) * u128::from(scale);
    if ticks < limit {
        return QuotaError::RateTooHigh {
            limit: quota.limit(),
            period,
        };
    }
    let interval = ticks.div_ceil(limit);
    let max = ((1u128 << 62) - 1) / interval;
    if max == 0 {
        // The longest period whose one token's interval still fits: (2^62 - 1) ticks a token.
        let longest = ((1u128 << 62) - 1) * limit / u128::from(scale);
        return QuotaError::PeriodTooLong {
            period,
            max: core::time::Duration::from_nanos(longest.min(u128::from(u64::MAX)) as u64),
        };
    }
    QuotaError::BurstTooLarge {
        burst: quota.burst(),
        max: max as u64,
    }
}

#[cfg(feature = "std")]
impl crate::live::Retune for Gcra {
    /// `(epoch, tat)`: a fresh bucket is full, counted in version 0.
    type LiveState = AtomicU128;

    fn live_state(_: &GcraParams) -> Result<AtomicU128, QuotaError> {
        Ok(AtomicU128::new(join(0, 0)))
    }

    /// The quota's own tick, or 1/16 ns if it is finer (a rate above 16 per ns then runs at
    /// 16 per ns: slower, never faster).
    fn live_params(quota: &Quota) -> Result<GcraParams, QuotaError> {
        let p = Self::params(quota)?;
        if p.scale <= LIVE_MAX_SCALE {
            return Ok(p);
        }
        quota
            .gcra_at_scale_or_slower(LIVE_MAX_SCALE)
            .ok_or_else(|| refusal(quota, LIVE_MAX_SCALE))
    }

    /// The new quota in the first quota's ticks.
    fn retune(current: &GcraParams, _: &Quota, to: &Quota) -> Result<GcraParams, QuotaError> {
        to.gcra_at_scale(current.scale)
            .ok_or_else(|| refusal(to, current.scale))
    }

    /// Publishes the new parameters, then carries the word to them (unless a request did).
    fn publish(
        word: &AtomicU128,
        cell: &ParamCell,
        old: &GcraParams,
        new: &GcraParams,
        now_ns: u64,
    ) {
        let version = cell.write(new.to_words());
        let now = ticks(new, now_ns);
        // Relaxed: the changer wrote the parameters itself; the word is only compared.
        let mut current = word.load(Ordering::Relaxed);
        // The previous change carried the word before it returned: it is counted in
        // `version - 1`.
        while split(current).0 != version {
            let tat = split(current).1;
            let carried = join(version, carried(old, new, tat, now).unwrap_or(tat));
            // Release: the carried word publishes the parameters it is counted in. Relaxed
            // failure: the value is only compared again.
            match word.compare_exchange_weak(current, carried, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    #[inline]
    fn acquire_live(word: &AtomicU128, cell: &ParamCell, now_ns: u64, n: u64) -> Decision {
        // As `acquire_at`: the loop runs `admit_at` alone, the decision is made once settled.
        let (p, now, admitted, tat) = live_update(word, cell, now_ns, |p, tat, now| {
            let write = admit_at(p, tat, now, n);
            ((*p, now, write, tat), write)
        });
        match admitted {
            Some(new_tat) => allowed(&p, now, new_tat),
            None if n == 0 => decide_at(&p, tat, now, 0).0,
            None => refused(&p, tat, now, n),
        }
    }

    #[inline]
    fn peek_live(word: &AtomicU128, cell: &ParamCell, now_ns: u64, n: u64) -> Decision {
        // Acquire: as in `live_update`.
        let mut current = word.load(Ordering::Acquire);
        loop {
            let (epoch, tat) = split(current);
            if let Some((p, _)) = counted_in(cell, epoch) {
                return decide(&p, tat, now_ns, n).0;
            }
            crate::sync::Backoff::new().snooze();
            // Acquire: as in `live_update`.
            current = word.load(Ordering::Acquire);
        }
    }

    fn refund_live(word: &AtomicU128, cell: &ParamCell, now_ns: u64, n: u64) -> u64 {
        live_update(word, cell, now_ns, |p, tat, now| refunded(p, tat, now, n))
    }

    fn pack(p: &GcraParams) -> crate::live::ParamWords {
        p.to_words()
    }

    fn unpack(words: crate::live::ParamWords) -> GcraParams {
        GcraParams::from_words(words)
    }
}

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
