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
    let (name, twin_name, lock_free, twin): (_, _, Box<dyn Limiter>, Box<dyn Limiter>) = match algo
    {
        Algo::TokenBucket => (
            "TokenBucket",
            "MutexTokenBucket",
            Box::new(TokenBucket::with_clock(quota, c())),
            Box::new(MutexTokenBucket::with_clock(quota, c())),
        ),
        Algo::FixedWindow => (
            "FixedWindow",
            "MutexFixedWindow",
            Box::new(FixedWindow::with_clock(quota, c())),
            Box::new(MutexFixedWindow::with_clock(quota, c())),
        ),
        Algo::SlidingWindow => (
            "SlidingWindow",
            "MutexSlidingWindow",
            Box::new(SlidingWindow::with_clock(quota, c())),
            Box::new(MutexSlidingWindow::with_clock(quota, c())),
        ),
        Algo::SlidingLog => (
            "SlidingLog",
            "MutexSlidingLog",
            Box::new(SlidingLog::try_with_clock(quota, c()).expect("a small log allocates")),
            Box::new(MutexSlidingLog::try_with_clock(quota, c()).expect("a small log allocates")),
        ),
    };
    [
        Subject {
            name,
            algo,
            limiter: lock_free,
        },
        Subject {
            name: twin_name,
            algo,
            limiter: twin,
        },
    ]
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

/// The tests' seeded generator (SplitMix64): reproducible streams.
#[allow(unused_imports)] // not every test that includes this module draws from it
pub use tollgate_test_support::SplitMix64 as Rng;
