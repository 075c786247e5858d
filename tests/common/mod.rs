//! Shared by the integration tests: every limiter, lock-free and twin, built the same way.
#![allow(dead_code)]

use std::time::Duration;

use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{FixedWindow, Limiter, ManualClock, Quota, SlidingLog, SlidingWindow, TokenBucket};

/// The algorithms, to name which behaviours apply to which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    TokenBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
}

pub const ALGOS: [Algo; 4] = [
    Algo::TokenBucket,
    Algo::FixedWindow,
    Algo::SlidingWindow,
    Algo::SlidingLog,
];

/// One limiter under test.
pub struct Subject {
    pub name: &'static str,
    pub algo: Algo,
    pub limiter: Box<dyn Limiter>,
}

/// The lock-free limiter and its mutex twin for `algo`, both on `clock`.
pub fn pair(algo: Algo, quota: Quota, clock: &ManualClock) -> [Subject; 2] {
    let c = || clock.clone();
    fn boxed(limiter: impl Limiter + 'static) -> Box<dyn Limiter> {
        Box::new(limiter)
    }
    // The two limiters of the named types, by `with_clock` (or `try_with_clock`, given a
    // message for its failure), each with its type's name.
    macro_rules! both {
        ($lock_free:ident, $twin:ident) => {
            [
                (
                    stringify!($lock_free),
                    boxed($lock_free::with_clock(quota, c())),
                ),
                (stringify!($twin), boxed($twin::with_clock(quota, c()))),
            ]
        };
        ($lock_free:ident, $twin:ident, $fails:literal) => {
            [
                (
                    stringify!($lock_free),
                    boxed($lock_free::try_with_clock(quota, c()).expect($fails)),
                ),
                (
                    stringify!($twin),
                    boxed($twin::try_with_clock(quota, c()).expect($fails)),
                ),
            ]
        };
    }
    let built: [(&'static str, Box<dyn Limiter>); 2] = match algo {
        Algo::TokenBucket => both!(TokenBucket, MutexTokenBucket),
        Algo::FixedWindow => both!(FixedWindow, MutexFixedWindow),
        Algo::SlidingWindow => both!(SlidingWindow, MutexSlidingWindow),
        Algo::SlidingLog => both!(SlidingLog, MutexSlidingLog, "a small log allocates"),
    };
    built.map(|(name, limiter)| Subject {
        name,
        algo,
        limiter,
    })
}

/// All eight limiters, each on its own fresh manual clock (returned alongside).
pub fn all(quota: Quota) -> Vec<(Subject, ManualClock)> {
    ALGOS
        .iter()
        .flat_map(|&algo| {
            let clock = ManualClock::new();
            pair(algo, quota, &clock)
                .into_iter()
                .map(move |s| (s, clock.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// How many of `n` unit requests pass now.
pub fn admitted(limiter: &dyn Limiter, n: u64) -> u64 {
    (0..n)
        .filter(|_| limiter.try_acquire().is_allowed())
        .count() as u64
}

pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// `limit` per `period_ms` milliseconds, up to `burst` at once.
pub fn burst_quota(limit: u64, period_ms: u64, burst: u64) -> Quota {
    Quota::try_new(limit, ms(period_ms))
        .and_then(|q| q.with_burst(burst))
        .unwrap()
}

/// The quotas the live bucket tests change to: tighter and looser rates and bursts, a longer
/// period, a minute's.
pub fn bucket_changes() -> [Quota; 6] {
    [
        burst_quota(10, 1_000, 10),
        burst_quota(100, 1_000, 100),
        burst_quota(1, 1_000, 3),
        burst_quota(40, 2_000, 5),
        burst_quota(5, 1_000, 20),
        burst_quota(1_000, 60_000, 50),
    ]
}

/// The tests' seeded generator (SplitMix64): reproducible streams.
#[allow(unused_imports)] // not every test that includes this module draws from it
pub use tollgate_test_support::SplitMix64 as Rng;
