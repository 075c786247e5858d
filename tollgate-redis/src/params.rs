//! A quota turned into a script's integer arguments, or refused when a script cannot hold it
//! exactly in Lua's numbers (doubles: integers are exact below 2^53 only).
//!
//! Time on Redis is counted in microseconds of `TIME` (about 1.8 × 10^15 now, 2^52 in the
//! year 2112); under a test clock, in nanoseconds of that clock. Every number a script
//! computes stays below 2^53: the token bucket's capacity plus one interval is at most 2^52
//! ticks, and a period is at most 2^52 units, so `now + period` and `now + capacity` fit.

use std::time::Duration;

use tollgate::{Algorithm, Quota, QuotaError, DEFAULT_SLOTS};

/// Every quantity a script stores or computes must stay at or below this (2^52): added to a
/// time below 2^52 it stays below 2^53, where doubles hold every integer.
pub(crate) const MAX_SAFE: u64 = 1 << 52;

/// The unit of time the scripts count in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Microseconds of the server's `TIME`.
    Micros,
    /// Nanoseconds of a test clock.
    Nanos,
}

impl Unit {
    pub(crate) fn nanos(self) -> u64 {
        match self {
            Unit::Micros => 1_000,
            Unit::Nanos => 1,
        }
    }
}

/// What one script call needs besides the key, the cost and the time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The algorithm's three parameters, after `n, now` (zero where it reads fewer).
    pub(crate) args: [u64; 3],
    /// The largest cost that can ever pass (burst or limit): a larger one is sent as this
    /// plus one, which the script answers with `exceeds_capacity` just the same.
    pub(crate) capacity: u64,
}

/// The script arguments for `quota` under `algorithm`, counting time in `unit`.
///
/// The same arithmetic as the in-process limiters, in `unit` instead of nanoseconds: the
/// token bucket's interval in ticks of `1/scale` unit from [`Quota::token_interval`]
/// (`scale ≤ 32`, rounded up when the rate is not exact: never toward more admissions), the
/// windows' lengths in whole units.
pub(crate) fn plan(algorithm: Algorithm, quota: &Quota, unit: Unit) -> Result<Plan, QuotaError> {
    let (limit, burst) = (quota.limit(), quota.burst());
    let period_ns = u64::try_from(quota.period().as_nanos()).unwrap_or(u64::MAX);
    let too_fine = QuotaError::RateTooHigh {
        limit,
        period: quota.period(),
    };
    // A period of a fraction of a unit would be rounded: refused.
    if period_ns % unit.nanos() != 0 {
        return Err(too_fine);
    }
    let period = period_ns / unit.nanos();
    if period > MAX_SAFE {
        return Err(QuotaError::PeriodTooLong {
            period: quota.period(),
            max: Duration::from_nanos(MAX_SAFE.saturating_mul(unit.nanos())),
        });
    }
    match algorithm {
        Algorithm::TokenBucket => {
            // The in-process bucket's arithmetic, in the script's unit.
            let (interval, scale) = quota
                .token_interval(Duration::from_nanos(unit.nanos()))
                .ok_or(too_fine)?;
            let interval = u128::from(interval);
            // capacity + one interval: the most a cost that exceeds capacity adds.
            let max_burst = (u128::from(MAX_SAFE) / interval).saturating_sub(1);
            if u128::from(burst) > max_burst {
                return Err(QuotaError::BurstTooLarge {
                    burst,
                    max: u64::try_from(max_burst).unwrap_or(u64::MAX),
                });
            }
            let interval = interval as u64;
            Ok(Plan {
                args: [interval, interval * burst, u64::from(scale)],
                capacity: burst,
            })
        }
        Algorithm::FixedWindow => Ok(Plan {
            args: [period, limit, 0],
            capacity: limit,
        }),
        Algorithm::SlidingWindow => Ok(Plan {
            args: [
                period.div_ceil(u64::from(DEFAULT_SLOTS)).max(1),
                limit,
                u64::from(DEFAULT_SLOTS),
            ],
            capacity: limit,
        }),
        Algorithm::SlidingLog => Ok(Plan {
            args: [period, limit, 0],
            capacity: limit,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_per_seven_seconds_is_exact_in_ticks_of_a_third() {
        let q = Quota::try_new(3, Duration::from_secs(7)).unwrap();
        let p = plan(Algorithm::TokenBucket, &q, Unit::Micros).unwrap();
        assert_eq!(p.args, [7_000_000, 21_000_000, 3]);
        let p = plan(Algorithm::TokenBucket, &q, Unit::Nanos).unwrap();
        assert_eq!(p.args, [7_000_000_000, 21_000_000_000, 3]);
    }

    #[test]
    fn sub_microsecond_periods_are_refused_on_server_time() {
        let q = Quota::try_new(1, Duration::from_nanos(1_500)).unwrap();
        for a in Algorithm::ALL {
            assert!(matches!(
                plan(a, &q, Unit::Micros),
                Err(QuotaError::RateTooHigh { .. })
            ));
            assert!(plan(a, &q, Unit::Nanos).is_ok());
        }
    }

    #[test]
    fn bursts_past_two_to_the_52_ticks_are_refused() {
        let q = Quota::try_new(1, Duration::from_secs(1)).unwrap();
        // interval 10^6 µs: 2^52 / 10^6 - 1 tokens fit.
        let max = (MAX_SAFE / 1_000_000) - 1;
        assert!(plan(
            Algorithm::TokenBucket,
            &q.with_burst(max).unwrap(),
            Unit::Micros
        )
        .is_ok());
        assert_eq!(
            plan(
                Algorithm::TokenBucket,
                &q.with_burst(max + 1).unwrap(),
                Unit::Micros
            ),
            Err(QuotaError::BurstTooLarge {
                burst: max + 1,
                max
            })
        );
    }

    #[test]
    fn rates_finer_than_a_tick_are_refused() {
        let q = Quota::try_new(100, Duration::from_micros(1)).unwrap();
        assert!(matches!(
            plan(Algorithm::TokenBucket, &q, Unit::Micros),
            Err(QuotaError::RateTooHigh { .. })
        ));
    }
}
