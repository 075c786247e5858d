//! What the sketch tests share: the random quota, clock step and cost, the exact references (the
//! check of one decision against them is test-support's `check_against_shadow`), and racing
//! threads' check.

use std::collections::HashMap;
use std::time::Duration;

use tollgate::{
    Algorithm, Clock, Decision, FixedWindow, KeyedLimit, KeyedLimiter, ManualClock, Quota,
};

use crate::common::Rng;

/// A random step of the clock: mostly small forward moves, sometimes a window or more,
/// sometimes back.
pub fn step(rng: &mut Rng, clock: &ManualClock, period: Duration, back: bool) {
    let p = period.as_nanos() as u64;
    match rng.below(10) {
        0..=5 => clock.advance(Duration::from_nanos(rng.below(p / 8 + 1))),
        6 | 7 => clock.advance(Duration::from_nanos(rng.below(3 * p))),
        8 if back => {
            let now = clock.now_nanos();
            clock.set(Duration::from_nanos(now.saturating_sub(rng.below(2 * p))));
        }
        _ => {}
    }
}

/// A random cost for a limit of `limit`: one in twenty 0, one in twenty above the capacity,
/// `partial - 1` in twenty up to the limit (`partial >= 2`), the rest 1.
pub fn cost(rng: &mut Rng, limit: u64, partial: u64) -> u64 {
    match rng.below(20) {
        0 => 0,
        1 => limit + 1 + rng.below(3),
        r if r <= partial => 1 + rng.below(limit),
        _ => 1,
    }
}

/// A random quota for a case of a random stream: `1 + rng.below(limits)` per 100 to 999 ms;
/// with its limit and period.
pub fn random_quota(rng: &mut Rng, limits: u64) -> (u64, Duration, Quota) {
    let limit = 1 + rng.below(limits);
    let period = Duration::from_millis(100 + rng.below(900));
    (limit, period, Quota::try_new(limit, period).unwrap())
}

/// The exact keyed map of fixed windows on `clock`: what a sketch never admits more than.
pub fn exact_map(quota: Quota, clock: &ManualClock) -> KeyedLimiter<u64, ManualClock> {
    KeyedLimiter::try_with_clock(Algorithm::FixedWindow, quota, clock.clone()).unwrap()
}

/// The shadow of every key in `0..keys`: its own fixed window, made now on `clock` (with the
/// sketch, on its origin).
pub fn shadows(
    quota: Quota,
    clock: &ManualClock,
    keys: u64,
) -> HashMap<u64, FixedWindow<ManualClock>> {
    (0..keys)
        .map(|k| (k, FixedWindow::with_clock(quota, clock.clone())))
        .collect()
}

/// Asks `limiter` for `n` units of `key`: a unit request half the time by `try_acquire` (the
/// coin drawn only then), otherwise by `try_acquire_n`.
pub fn ask<L: KeyedLimit<u64>>(limiter: &L, rng: &mut Rng, key: u64, n: u64) -> Decision {
    if n == 1 && rng.below(2) == 0 {
        limiter.try_acquire(&key)
    } else {
        limiter.try_acquire_n(&key, n)
    }
}

/// Units admitted per key, by the sketch and by the exact map.
#[derive(Default)]
pub struct Admitted(HashMap<u64, (u64, u64)>);

impl Admitted {
    /// Counts `key`'s request of `n`, `sketch` and `exact` the two answers; the key's totals
    /// so far, the sketch's and the exact map's.
    pub fn count(&mut self, key: u64, n: u64, sketch: &Decision, exact: &Decision) -> (u64, u64) {
        let tally = self.0.entry(key).or_default();
        tally.0 += if sketch.is_allowed() { n } else { 0 };
        tally.1 += if exact.is_allowed() { n } else { 0 };
        *tally
    }
}

/// Twenty rounds, each on a fresh limiter of `limit` per second (`make(quota, clock, round)`),
/// of 4 threads racing 600 requests each through `ask`, which makes request `i` of thread `t`
/// on the limiter and says for which key (`0..6`) it asked and how many units passed: in
/// every round no key gets more than `limit`, and some units pass.
pub fn racing_threads_keep_keys_within<L: Sync>(
    limit: u64,
    make: impl Fn(Quota, &ManualClock, u64) -> L,
    ask: impl Fn(&L, u64, u64) -> (u64, u64) + Sync,
) {
    let quota = Quota::per_second(limit).unwrap();
    for round in 0..20 {
        let clock = ManualClock::new();
        let limiter = make(quota, &clock, round);
        let per_key = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u64)
                .map(|t| {
                    let (ask, limiter) = (&ask, &limiter);
                    s.spawn(move || {
                        let mut got = [0u64; 6];
                        for i in 0..600u64 {
                            let (key, admitted) = ask(limiter, t, i);
                            got[key as usize] += admitted;
                        }
                        got
                    })
                })
                .collect();
            let all: Vec<[u64; 6]> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            (0..6)
                .map(|k| all.iter().map(|g| g[k]).sum())
                .collect::<Vec<u64>>()
        });
        assert!(per_key.iter().all(|&a| a <= limit), "{per_key:?}");
        assert!(per_key.iter().sum::<u64>() > 0);
    }
}
