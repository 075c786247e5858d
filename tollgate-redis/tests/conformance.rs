//! The in-process decision sequences replayed on a real Redis with the test clock: every
//! call is made on both the in-process limiter and the Redis one, at the same instant of one
//! `ManualClock`, and the two decisions must be identical, all fields. The scenarios are the
//! core's (tests/decisions.rs, tests/seeds.rs): their own assertions run on top.

mod common;

use std::time::Duration;

use common::{admitted, all, both, RedisServer, Rng};
use tollgate::{Algorithm, Clock, Limiter, ManualClock, Quota};
use tollgate_redis::Target;
use tollgate_test_support::{check_costs_above_capacity, stream_quotas};

const NS: Duration = Duration::from_nanos(1);

/// Long random streams (advances, steps back, jumps, costs of every size, 0 and u64::MAX):
/// identical decisions on every call, for every algorithm and a spread of quotas.
#[test]
fn random_streams_decide_identically() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    common::random_streams(&target, &stream_quotas(), 500);
}

/// decisions.rs: whenever a request is denied with `retry_after = r`, it is still denied at
/// `r - 1 ns` and passes at exactly `r`.
#[test]
fn retrying_after_exactly_retry_after_passes() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    let quotas = [
        Quota::per_second(5).unwrap(),
        Quota::try_new(3, Duration::from_secs(7)).unwrap(),
        Quota::try_new(10, Duration::from_millis(250))
            .unwrap()
            .with_burst(4)
            .unwrap(),
        Quota::per_second(999).unwrap(),
        Quota::try_new(1, Duration::from_nanos(3)).unwrap(),
    ];
    let mut rng = Rng(7);
    for quota in quotas {
        for (s, clock) in all(&target, quota) {
            let capacity = if s.name.starts_with("TokenBucket") {
                quota.burst()
            } else {
                quota.limit()
            };
            let mut checked = 0;
            for _ in 0..150 {
                clock.advance(Duration::from_nanos(
                    rng.below(quota.period().as_nanos() as u64 / 3 + 1),
                ));
                let n = 1 + rng.below(capacity);
                let d = s.try_acquire_n(n);
                let Some(r) = d.retry_after() else {
                    assert!(d.is_allowed(), "{}", s.name);
                    continue;
                };
                let start = clock.now();
                clock.set(start + r - NS);
                assert!(!s.try_acquire_n(n).is_allowed(), "{}: 1 ns early", s.name);
                clock.set(start + r);
                assert!(
                    s.try_acquire_n(n).is_allowed(),
                    "{}: at retry_after",
                    s.name
                );
                checked += 1;
            }
            assert!(checked > 5, "{}: only {checked} denials checked", s.name);
        }
    }
}

/// decisions.rs: full again at exactly `reset_after`, not a nanosecond before.
#[test]
fn reset_after_is_when_capacity_is_full_again() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    let quota = Quota::try_new(6, Duration::from_millis(900)).unwrap();
    let mut rng = Rng(11);
    for (s, clock) in all(&target, quota) {
        for _ in 0..80 {
            clock.advance(Duration::from_nanos(rng.below(400_000_000)));
            let reset = s.try_acquire_n(1 + rng.below(3)).reset_after();
            if reset.is_zero() {
                continue;
            }
            let start = clock.now();
            clock.set(start + reset - NS);
            assert!(s.try_acquire_n(0).remaining() < 6, "{}", s.name);
            clock.set(start + reset);
            let full = s.try_acquire_n(0);
            assert_eq!(full.remaining(), 6, "{}", s.name);
            assert_eq!(full.reset_after(), Duration::ZERO, "{}", s.name);
            clock.set(start);
        }
    }
}

/// decisions.rs: remaining counts down; denials take nothing; n = 0 peeks; costs above
/// capacity are refused with no retry and no state touched.
#[test]
fn remaining_zero_cost_and_costs_above_capacity() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    for (s, _) in all(&target, Quota::per_second(4).unwrap()) {
        let got: Vec<u64> = (0..6).map(|_| s.try_acquire().remaining()).collect();
        assert_eq!(got, [3, 2, 1, 0, 0, 0], "{}", s.name);
        let d = s.try_acquire_n(0);
        assert!(d.is_allowed() && d.remaining() == 0, "{}", s.name);
    }
    let quota = Quota::per_second(10).unwrap().with_burst(8).unwrap();
    for (s, _) in all(&target, quota) {
        let capacity = if s.name.starts_with("TokenBucket") {
            8
        } else {
            10
        };
        check_costs_above_capacity(&s.name, capacity, |n| s.try_acquire_n(n));
    }
}

/// decisions.rs: a clock stepping back mints nothing.
#[test]
fn a_clock_stepping_back_mints_nothing() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    for (s, clock) in all(&target, Quota::per_second(5).unwrap()) {
        clock.set(Duration::from_secs(10));
        assert_eq!(admitted(&s, 10), 5, "{}", s.name);
        for back in [
            Duration::from_secs(9),
            Duration::from_millis(500),
            Duration::ZERO,
        ] {
            clock.set(back);
            assert_eq!(admitted(&s, 10), 0, "{}: back to {back:?}", s.name);
        }
        clock.set(Duration::from_secs(12));
        assert_eq!(admitted(&s, 10), 5, "{}: time caught up", s.name);
    }
}

/// decisions.rs: 3 per 7 s stays exact (here over 2,000 steps of 7 s).
#[test]
fn three_per_seven_seconds_is_exact() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    let clock = ManualClock::new();
    let quota = Quota::try_new(3, Duration::from_secs(7)).unwrap();
    let s = both(&target, Algorithm::TokenBucket, quota, &clock);
    assert_eq!(admitted(&s, 10), 3);
    for k in 1..=2_000u64 {
        clock.set(Duration::from_secs(7 * k));
        assert!(s.try_acquire_n(3).is_allowed(), "step {k}");
        let next = (u128::from(3 * k + 1) * 7_000_000_000).div_ceil(3);
        let wait = (next - u128::from(7_000_000_000 * k)) as u64;
        assert_eq!(
            s.try_acquire().retry_after(),
            Some(Duration::from_nanos(wait))
        );
    }
}

/// seeds.rs: a burst of 10 lets 5 through; the bucket refills one token in 200 ms;
/// separate keys and tiers do not share counts.
#[test]
fn bursts_refills_and_independent_keys() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    let free = Quota::per_second(5).unwrap();
    for (s, _) in all(&target, free) {
        assert_eq!(admitted(&s, 10), 5, "{}", s.name);
    }
    let clock = ManualClock::new();
    let s = both(&target, Algorithm::TokenBucket, free, &clock);
    assert_eq!(admitted(&s, 10), 5);
    clock.advance(Duration::from_millis(199));
    assert_eq!(admitted(&s, 10), 0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(admitted(&s, 10), 1);
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new();
        let alice = both(&target, algorithm, free, &clock);
        let bob = both(&target, algorithm, free, &clock);
        let carol = both(&target, algorithm, Quota::per_second(50).unwrap(), &clock);
        assert_eq!(admitted(&alice, 10), 5);
        assert_eq!(
            admitted(&bob, 10),
            5,
            "{algorithm:?}: bob has his own limit"
        );
        assert_eq!(admitted(&carol, 60), 50, "{algorithm:?}: pro gets 50");
    }
}

/// The sliding log on a sorted set: admissions in the same nanosecond stay distinct members
/// (a set would collapse them and admit more), and one weighted member holds a cost of n.
#[test]
fn same_instant_admissions_never_collapse() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    let clock = ManualClock::new();
    let s = both(
        &target,
        Algorithm::SlidingLog,
        Quota::per_second(100).unwrap(),
        &clock,
    );
    assert_eq!(admitted(&s, 150), 100);
    // The key's `}` and `\` are escaped inside the tag (`\]`, `\\`).
    let user = String::from_utf8_lossy(&s.key)
        .replace('\\', "\\\\")
        .replace('}', "\\]");
    let key = format!("{{tollgate:{user}}}:log");
    assert_eq!(server.cli(&["ZCARD", &key]).trim(), "100");
    clock.advance(Duration::from_secs(1));
    assert!(s.try_acquire_n(40).is_allowed());
    // The 100 expired members were trimmed by that admission; one member holds the 40.
    assert_eq!(server.cli(&["ZCARD", &key]).trim(), "1");
    assert_eq!(admitted(&s, 100), 60);
}

/// The sliding log trims its expired members once per eighth of its limit admitted, not on
/// every admission: under a steady stream, the sorted set holds at most the limit plus an
/// eighth of it, and every decision stays the in-process log's (`both` compares each).
#[test]
fn the_log_holds_at_most_an_eighth_of_its_limit_beyond_its_live_members() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    let clock = ManualClock::new();
    let quota = Quota::per_second(64).unwrap();
    let s = both(&target, Algorithm::SlidingLog, quota, &clock);
    let user = String::from_utf8_lossy(&s.key)
        .replace('\\', "\\\\")
        .replace('}', "\\]");
    let key = format!("{{tollgate:{user}}}:log");
    // Ten periods at 80 requests a second (more than the limit: some are denied).
    for i in 0..800u64 {
        clock.advance(Duration::from_micros(12_500));
        let _ = s.try_acquire_n(1 + i % 2); // `both` checks it against the in-process log
        let stored: u64 = server.cli(&["ZCARD", &key]).trim().parse().unwrap();
        assert!(
            stored <= 64 + 64 / 8,
            "request {i}: {stored} members stored"
        );
    }
}
