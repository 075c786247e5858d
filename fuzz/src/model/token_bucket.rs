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

use tollgate::Quota;

use super::gcd;
use crate::{Outcome, HORIZON};

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
        let limit = u128::from(quota.limit());
        let period = quota.period().as_nanos();
        let ticks_per_ns = (limit / gcd(limit, period)).min(32);
        TokenBucketModel {
            ticks_per_ns,
            ticks_per_token: (period * ticks_per_ns).div_ceil(limit),
            burst: u128::from(quota.burst()),
            full_at: 0,
        }
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
        let now = u128::from(now_ns.min(HORIZON)) * self.ticks_per_ns;
        let n = u128::from(n);
        let capacity = self.burst * self.ticks_per_token;
        let held = self.tokens(now);
        if n > self.burst {
            return Outcome::exceeds(held, self.ns(self.debt(now)));
        }
        // n tokens are there iff the debt plus n tokens' worth still fits the capacity.
        let debt_after = self.debt(now) + n * self.ticks_per_token;
        if debt_after <= capacity {
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
}
