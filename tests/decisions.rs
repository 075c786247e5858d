//! What every decision says: remaining, retry_after (retrying after exactly that passes, a
//! nanosecond earlier does not), reset_after, costs above capacity, a clock stepping back,
//! and the token bucket's exact refill over a year. ManualClock only.

mod common;

use std::time::Duration;

use common::{admitted, all, ms, pair, Algo, Rng, ALGOS};
use tollgate::{Clock, Limiter, ManualClock, Quota, TokenBucket};
use tollgate_test_support::{check_costs_above_capacity, clock_and_cost, stream_quotas};

const NS: Duration = Duration::from_nanos(1);

/// 3 per 7 s must stay exact over a year: the m-th token after the burst arrives at exactly
/// ceil(m × 7/3 s), and at every multiple of 7 s exactly 3 more have arrived. The bucket and
/// its twin each in a test of their own: two runs of a year, side by side.
#[test]
fn three_per_seven_seconds_is_exact_over_a_year() {
    exact_over_a_year(0);
}

/// The same year on the token bucket's mutex twin.
#[test]
fn three_per_seven_seconds_is_exact_over_a_year_on_the_twin() {
    exact_over_a_year(1);
}

/// The year of 3 per 7 s on the `which`-th limiter of the token bucket's pair.
fn exact_over_a_year(which: usize) {
    let clock = ManualClock::new();
    let quota = Quota::try_new(3, Duration::from_secs(7)).unwrap();
    let pair = pair(Algo::TokenBucket, quota, &clock);
    let s = &pair[which];
    clock.set(Duration::ZERO);
    assert_eq!(admitted(&*s.limiter, 10), 3, "{}", s.name);
    // Under miri (~1000× slower) 100 steps (700 s) instead of a year: the same exactness
    // check at every step, over a span miri finishes in seconds.
    let year_in_steps = if cfg!(miri) { 100 } else { 365 * 24 * 3600 / 7 };
    for k in 1..=year_in_steps {
        clock.set(Duration::from_secs(7 * k));
        let d = s.limiter.try_acquire_n(3);
        assert!(d.is_allowed(), "{} at step {k}", s.name);
        let denied = s.limiter.try_acquire();
        // The next token: ceil((3k + 1) × 7e9 / 3) ns from zero.
        let next = (u128::from(3 * k + 1) * 7_000_000_000).div_ceil(3);
        let wait = next - u128::from(7_000_000_000 * k);
        assert_eq!(
            denied.retry_after(),
            Some(Duration::from_nanos(wait as u64)),
            "{} step {k}",
            s.name
        );
    }
    // A year later, at an odd instant: exactly floor(t × 3/7) tokens since the last drain.
    let t = Duration::from_secs(7 * year_in_steps) + Duration::from_millis(4_000);
    clock.set(t);
    assert_eq!(
        admitted(&*s.limiter, 3),
        1,
        "{}: 4 s is 1.71 tokens",
        s.name
    );
}

/// Fractional intervals (7 per 3 s, 3/s, 13/min): token m arrives at exactly
/// ceil(m × period / limit), every time. (Burst 2, taken on arrival: the bucket never caps,
/// so no fraction of a token is dropped at capacity.)
#[test]
fn refill_has_no_drift_for_fractional_intervals() {
    for (limit, period_ms) in [(7u64, 3_000u64), (3, 1_000), (50, 1_000), (13, 60_000)] {
        let quota = Quota::try_new(limit, ms(period_ms)).unwrap();
        assert!(quota.is_exact());
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(quota.with_burst(2).unwrap(), clock.clone());
        assert!(bucket.try_acquire().is_allowed());
        let mut now = 0u128;
        // Under miri, 100 tokens per rate instead of 10,000 (miri is ~1000× slower).
        let tokens: u128 = if cfg!(miri) { 100 } else { 10_000 };
        for m in 1..=tokens {
            assert!(bucket.try_acquire().is_allowed());
            let wait = bucket.try_acquire().retry_after().unwrap();
            now += wait.as_nanos();
            // Token m arrives at ceil(m × period / limit) exactly.
            assert_eq!(
                now,
                (m * u128::from(period_ms) * 1_000_000).div_ceil(u128::from(limit))
            );
            clock.set(Duration::from_nanos(now as u64));
        }
    }
}

/// Random streams: whenever a request is denied with `retry_after = r`, the same request is
/// still denied at `r - 1 ns` and passes at exactly `r` (denials write nothing, so probing
/// does not disturb the state).
#[test]
fn retrying_after_exactly_retry_after_passes() {
    let quotas = [
        Quota::per_second(5).unwrap(),
        Quota::try_new(3, Duration::from_secs(7)).unwrap(),
        Quota::try_new(10, ms(250)).unwrap().with_burst(4).unwrap(),
        Quota::per_second(999).unwrap(),
        Quota::try_new(1, Duration::from_nanos(3)).unwrap(),
    ];
    let mut rng = Rng(7);
    for quota in quotas {
        for (s, clock) in all(quota) {
            let capacity = if s.algo == Algo::TokenBucket {
                quota.burst()
            } else {
                quota.limit()
            };
            let mut checked = 0;
            // Under miri, 20 requests per stream instead of 400 (miri is ~1000× slower, and
            // some streams admit hundreds of log entries at once), so fewer denials to check.
            for _ in 0..if cfg!(miri) { 20 } else { 400 } {
                clock.advance(Duration::from_nanos(
                    rng.below(quota.period().as_nanos() as u64 / 3 + 1),
                ));
                let n = 1 + rng.below(capacity);
                let d = s.limiter.try_acquire_n(n);
                let Some(r) = d.retry_after() else {
                    assert!(
                        d.is_allowed(),
                        "{}: denied within capacity must have a retry",
                        s.name
                    );
                    continue;
                };
                assert!(!d.is_allowed() && !d.exceeds_capacity());
                assert!(r > Duration::ZERO, "{}", s.name);
                let start = clock.now();
                clock.set(start + r - NS);
                assert!(
                    !s.limiter.try_acquire_n(n).is_allowed(),
                    "{}: passed 1 ns early",
                    s.name
                );
                clock.set(start + r);
                assert!(
                    s.limiter.try_acquire_n(n).is_allowed(),
                    "{}: denied at retry_after",
                    s.name
                );
                checked += 1;
            }
            let enough = if cfg!(miri) { 5 } else { 20 };
            assert!(
                checked > enough,
                "{}: only {checked} denials checked",
                s.name
            );
        }
    }
}

/// `reset_after` is when the limiter is back to full capacity with no further traffic:
/// full at exactly that instant, not a nanosecond before.
#[test]
fn reset_after_is_when_capacity_is_full_again() {
    let quota = Quota::try_new(6, ms(900)).unwrap();
    let mut rng = Rng(11);
    for (s, clock) in all(quota) {
        // Under miri, 20 requests per limiter instead of 200 (miri is ~1000× slower).
        for _ in 0..if cfg!(miri) { 20 } else { 200 } {
            clock.advance(Duration::from_nanos(rng.below(400_000_000)));
            let d = s.limiter.try_acquire_n(1 + rng.below(3));
            let reset = d.reset_after();
            if reset.is_zero() {
                continue;
            }
            let start = clock.now();
            clock.set(start + reset - NS);
            assert!(
                s.limiter.try_acquire_n(0).remaining() < 6,
                "{}: full 1 ns early",
                s.name
            );
            clock.set(start + reset);
            let full = s.limiter.try_acquire_n(0);
            assert_eq!(full.remaining(), 6, "{}: not full at reset_after", s.name);
            assert_eq!(full.reset_after(), Duration::ZERO, "{}", s.name);
            clock.set(start);
        }
    }
}

/// `remaining` counts down per decision; denials leave it where it was.
#[test]
fn remaining_counts_down_and_denials_take_nothing() {
    for (s, _clock) in all(Quota::per_second(4).unwrap()) {
        let got: Vec<u64> = (0..6)
            .map(|_| s.limiter.try_acquire().remaining())
            .collect();
        assert_eq!(got, [3, 2, 1, 0, 0, 0], "{}", s.name);
        let d = s.limiter.try_acquire_n(2);
        assert!(!d.is_allowed() && d.remaining() == 0, "{}", s.name);
    }
}

/// A cost above what the limiter can ever allow: denied at once, no retry, state untouched.
#[test]
fn costs_above_capacity_are_refused_without_touching_state() {
    let quota = Quota::per_second(10).unwrap().with_burst(8).unwrap();
    for (s, _clock) in all(quota) {
        let capacity = if s.algo == Algo::TokenBucket { 8 } else { 10 };
        check_costs_above_capacity(s.name, capacity, |n| s.limiter.try_acquire_n(n));
    }
}

/// n = 0 passes and takes nothing, even when the limiter is drained.
#[test]
fn zero_cost_passes_and_takes_nothing() {
    for (s, _clock) in all(Quota::per_second(3).unwrap()) {
        assert_eq!(s.limiter.try_acquire_n(0).remaining(), 3, "{}", s.name);
        assert_eq!(admitted(&*s.limiter, 3), 3);
        let d = s.limiter.try_acquire_n(0);
        assert!(d.is_allowed() && d.remaining() == 0, "{}", s.name);
    }
}

/// Time going backwards: no panic, no minted capacity. A drained limiter stays drained when
/// the clock steps back, however far, and is back to normal once time passes again.
#[test]
fn a_clock_stepping_back_mints_nothing() {
    let quota = Quota::per_second(5).unwrap();
    for (s, clock) in all(quota) {
        clock.set(Duration::from_secs(10));
        assert_eq!(admitted(&*s.limiter, 10), 5, "{}", s.name);
        for back in [
            Duration::from_secs(9),
            Duration::from_millis(500),
            Duration::ZERO,
        ] {
            clock.set(back);
            assert_eq!(
                admitted(&*s.limiter, 10),
                0,
                "{}: stepped back to {back:?}",
                s.name
            );
        }
        clock.set(Duration::from_secs(10));
        assert_eq!(admitted(&*s.limiter, 10), 0, "{}", s.name);
        clock.set(Duration::from_secs(12));
        assert_eq!(admitted(&*s.limiter, 10), 5, "{}: time caught up", s.name);
    }
}

/// Clock readings at the extremes (u64::MAX ns, far past the horizon) never panic or wrap:
/// time stands still at the horizon.
#[test]
fn extreme_clock_readings_stand_still_at_the_horizon() {
    for (s, clock) in all(Quota::per_second(2).unwrap()) {
        clock.set(Duration::from_nanos(u64::MAX));
        assert_eq!(admitted(&*s.limiter, 5), 2, "{}", s.name);
        let d = s.limiter.try_acquire();
        assert!(!d.is_allowed(), "{}", s.name);
        assert_eq!(
            d.retry_after(),
            None,
            "{}: would pass only past the horizon",
            s.name
        );
        clock.set(Duration::MAX);
        assert_eq!(admitted(&*s.limiter, 5), 0, "{}", s.name);
    }
}

/// Differential: the lock-free limiter and its twin answer every call of a long random
/// stream identically (advances, steps back, jumps, costs of every size).
#[test]
fn lock_free_and_twin_agree_on_random_streams() {
    let quotas = stream_quotas();
    // Under miri, without the 50,000-per-hour quota: its log admissions write up to 50,000
    // entries each, minutes of interpretation for no new code path.
    let tested = if cfg!(miri) { 5 } else { quotas.len() };
    for (qi, quota) in quotas.into_iter().take(tested).enumerate() {
        for algo in ALGOS {
            let mut rng = Rng(qi as u64 * 31 + algo as u64);
            let clock = ManualClock::new();
            let [a, b] = pair(algo, quota, &clock);
            let period = quota.period().as_nanos() as u64;
            // Under miri, 100 steps per stream instead of 5,000 (miri is ~1000× slower).
            for step in 0..if cfg!(miri) { 100 } else { 5_000 } {
                let (now, n) = clock_and_cost(&mut rng, period, quota.limit(), clock.now_nanos());
                clock.set(Duration::from_nanos(now));
                let (da, db) = (a.limiter.try_acquire_n(n), b.limiter.try_acquire_n(n));
                assert_eq!(
                    da, db,
                    "{} vs {} at step {step}, quota {quota:?}, n = {n}",
                    a.name, b.name
                );
            }
        }
    }
}
