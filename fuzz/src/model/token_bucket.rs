//! The token bucket as documented: tokens refill continuously at `limit / period`, up to
//! `burst`; a fresh bucket is full.
//!
//! Time is counted in ticks of `1/s` ns, `s = limit / gcd(limit, period)` capped at 32 (the
//! README: "exact refill, no drift: ticks of 1/s ns ... otherwise the interval rounds up by
//! < 1/32 ns, never fast"). One token takes `ceil(period × s / limit)` ticks to refill.
//!
//! The model keeps the bucket as its *debt*: the instant (in ticks) from which it is full
//! again. At tick `t` it holds `burst` tokens if the debt is paid (`full_at ≤ t`), else
//! `(burst × interval − (full_at − t)) / interval`, rounded down. A clock that steps back
//! sees the bucket as it was at that earlier instant: more of the debt is unpaid.
//!
//! A live bucket (`Live`'s documentation) keeps the tick of its first quota, at most 16 per ns,
//! and takes every later quota in that tick: one token takes `ceil(period × s / limit)` ticks
//! of the first quota's `s`, rounded up, never fast. A change carries the debt over counted in
//! tokens: `d` ticks owed at `o` ticks per token are `ceil(d × i / o)` ticks owed at `i` per
//! token, at most the new capacity; a bucket that owes nothing stays as it is.

use std::time::Duration;

use tollgate::{Quota, QuotaError};

use super::gcd;
use crate::{Outcome, HORIZON};

/// The finest tick of a live bucket, in ticks per ns.
const LIVE_MAX_TICKS_PER_NS: u128 = 16;

/// A bucket's capacity in ticks stays below 2^62 (`src/algo/token_bucket.rs`): with the
/// horizon in ticks, one more admission still fits a 64-bit word.
const CAPACITY_LIMIT: u128 = 1 << 62;

/// The token bucket's reference model.
#[derive(Clone, Debug)]
pub struct TokenBucketModel {
    ticks_per_ns: u128,
    ticks_per_token: u128,
    burst: u128,
    full_at: u128,
}

impl TokenBucketModel {
    /// A full bucket for `quota`.
    pub fn new(quota: &Quota) -> Self {
        Self::with_max_ticks_per_ns(quota, 32)
    }

    /// A full live bucket for `quota`: its tick is the quota's own, or 1/16 ns if that is
    /// finer. A quota of more than 16 per ns gets one token per tick (rounded up, never fast).
    pub fn live(quota: &Quota) -> Self {
        Self::with_max_ticks_per_ns(quota, LIVE_MAX_TICKS_PER_NS)
    }

    fn with_max_ticks_per_ns(quota: &Quota, max: u128) -> Self {
        let limit = u128::from(quota.limit());
        let period = quota.period().as_nanos();
        let ticks_per_ns = (limit / gcd(limit, period)).min(max);
        TokenBucketModel {
            ticks_per_ns,
            ticks_per_token: (period * ticks_per_ns).div_ceil(limit),
            burst: u128::from(quota.burst()),
            full_at: 0,
        }
    }

    /// Clock reading `now_ns` in ticks, clamped at the horizon.
    fn ticks(&self, now_ns: u64) -> u128 {
        u128::from(now_ns.min(HORIZON)) * self.ticks_per_ns
    }

    /// Ticks still owed at tick `t`.
    fn debt(&self, t: u128) -> u128 {
        self.full_at.saturating_sub(t)
    }

    /// Whole tokens in the bucket at tick `t`.
    fn tokens(&self, t: u128) -> u64 {
        let capacity = self.burst * self.ticks_per_token;
        let tokens = capacity.saturating_sub(self.debt(t)) / self.ticks_per_token;
        u64::try_from(tokens).expect("at most burst tokens")
    }

    /// Ticks → ns, rounded up (a wait is never reported short).
    fn ns(&self, ticks: u128) -> u64 {
        u64::try_from(ticks.div_ceil(self.ticks_per_ns)).expect("within the horizon's range")
    }

    /// One request of `n` units at clock reading `now_ns`.
    pub fn acquire(&mut self, now_ns: u64, n: u64) -> Outcome {
        let now = self.ticks(now_ns);
        let n = u128::from(n);
        let capacity = self.burst * self.ticks_per_token;
        let held = self.tokens(now);
        if n > self.burst {
            return Outcome::exceeds(held, self.ns(self.debt(now)));
        }
        // n tokens are there iff the debt plus n tokens' worth still fits the capacity.
        let debt_after = self.debt(now) + n * self.ticks_per_token;
        // A zero cost passes and takes nothing, even on a debt above the capacity (a reading
        // older than the one the newest admission was made at).
        if debt_after <= capacity || n == 0 {
            if n > 0 {
                self.full_at = now + debt_after;
            }
            return Outcome::allowed(self.tokens(now), self.ns(self.debt(now)));
        }
        // The request passes once enough of the debt is paid: at tick
        // full_at' = max(full_at, now) + n tokens, minus the capacity.
        let pass_at_tick = now + debt_after - capacity;
        Outcome::denied(held, now_ns, self.ns(pass_at_tick), self.ns(self.debt(now)))
    }

    /// A live bucket's change to `quota` at clock reading `now_ns`, in the tick it keeps:
    /// refused (and nothing changed) if a token would take less than one tick (the rate is too
    /// high), or if the capacity would not fit in its ticks: the burst is too large, or, when
    /// not even one token's interval fits, the period is too long.
    pub fn set_quota(&mut self, quota: &Quota, now_ns: u64) -> Result<(), QuotaError> {
        let too_fine = QuotaError::RateTooHigh {
            limit: quota.limit(),
            period: quota.period(),
        };
        let limit = u128::from(quota.limit());
        let period_ticks = quota.period().as_nanos() * self.ticks_per_ns;
        if period_ticks < limit {
            return Err(too_fine);
        }
        let ticks_per_token = period_ticks.div_ceil(limit);
        let burst = u128::from(quota.burst());
        let capacity = ticks_per_token * burst;
        if capacity >= CAPACITY_LIMIT {
            let max_burst = (CAPACITY_LIMIT - 1) / ticks_per_token;
            if max_burst == 0 {
                let longest = (CAPACITY_LIMIT - 1) * limit / self.ticks_per_ns;
                return Err(QuotaError::PeriodTooLong {
                    period: quota.period(),
                    max: Duration::from_nanos(u64::try_from(longest).unwrap_or(u64::MAX)),
                });
            }
            return Err(QuotaError::BurstTooLarge {
                burst: quota.burst(),
                max: u64::try_from(max_burst).expect("below the burst asked for"),
            });
        }
        // A debt above the capacity: the reading is older than the one the debt was written
        // at (a clock stepped back). Carried from the earliest reading it could have been
        // written at, the whole debt is counted, never cut to the capacity.
        let now = self.ticks(now_ns).max(
            self.full_at
                .saturating_sub(self.burst * self.ticks_per_token),
        );
        let debt = self.debt(now);
        if debt > 0 {
            let carried = (debt * ticks_per_token).div_ceil(self.ticks_per_token);
            self.full_at = now + carried.min(capacity);
        }
        self.ticks_per_token = ticks_per_token;
        self.burst = burst;
        Ok(())
    }

    /// A refund of `n` units at clock reading `now_ns`: the debt lowered by `n` tokens, never
    /// below nothing owed now; the whole tokens that took. Nothing on a debt above the
    /// capacity.
    pub fn refund(&mut self, now_ns: u64, n: u64) -> u64 {
        let now = self.ticks(now_ns);
        if self.full_at <= now {
            return 0;
        }
        // A debt above the capacity: the reading is older than the newest admission's, too
        // old to say what is still owed. Nothing is given back.
        if self.debt(now) > self.burst * self.ticks_per_token {
            return 0;
        }
        let back_to = self
            .full_at
            .saturating_sub(u128::from(n) * self.ticks_per_token)
            .max(now);
        let given = (self.full_at - back_to) / self.ticks_per_token;
        self.full_at = back_to;
        u64::try_from(given).expect("at most the tokens asked for")
    }
}
