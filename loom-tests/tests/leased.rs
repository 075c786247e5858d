//! loom models of `Leased`'s protocol: the GCRA word (grant and give-back in one
//! compare-exchange), the capped reservation, and thread-owned leases (each model thread owns
//! its `LeaseHolder` by `&mut`, as each thread owns its thread-local slot).
//!
//! Invariants checked in every interleaving:
//! - frozen instant: admitted ≤ burst;
//! - conservation at a frozen instant: bucket + Σ leases + admitted + lost = the start level;
//! - a give-back never lifts the word above the burst (`tat ≥ now` after a credit);
//! - the reservation never passes the cap, equals Σ of the threads' shares, and covers every
//!   lease (`left ≤ reserved`);
//! - an empty bucket admits nothing.
//!
//! Each planted bug (`tollgate::__loom::Planted`) must be caught by one of them.
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests --test leased
//! ```
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom_tests::{expect_caught, model};
use tollgate::__loom::{LeaseHolder, LeaseModel, Planted};
use tollgate::{Lease, ManualClock, Quota};

const ABOVE_BURST: &str = "frozen instant admitted above the burst";
const CONSERVATION: &str = "conservation broken";
const CLAMP: &str = "give-back lifted the bucket above its burst";
const CAP: &str = "reservation above the cap";
const COVER: &str = "a lease holds more than its reservation";
const EMPTY: &str = "an empty bucket admitted";

#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire(u64),
    GiveBack,
    SetClock(Duration),
}

use Op::*;

/// A model: `limit` per second with that burst, leases of `tokens` with a cap of `cap`,
/// grants limited to `available / 1`, the clock read on every spend.
#[derive(Clone, Copy)]
struct Setup {
    limit: u64,
    tokens: u64,
    cap: u64,
    /// Tokens each racing thread spent from its last lease before the model starts: a demand
    /// of 1 makes its first request take a lease of 2 (1 spent, 1 parked).
    demand: u64,
    /// Run alone first, on their own holder, then given back.
    before: &'static [Op],
    threads: &'static [&'static [Op]],
    /// Whether time stands still (conservation and the burst bound then apply exactly).
    frozen: bool,
}

fn make(s: Setup, planted: Planted) -> (LeaseModel, ManualClock) {
    let clock = ManualClock::new();
    let quota = Quota::per_second(s.limit).unwrap();
    let lease = Lease::new(s.tokens, Duration::from_secs(10))
        .unwrap()
        .with_max_parked(s.cap)
        .unwrap()
        .with_clock_every(1)
        .unwrap();
    (
        LeaseModel::new(quota, lease, 1, clock.clone(), planted),
        clock,
    )
}

/// What one model thread did: units admitted, its lease, and the first invariant it saw
/// broken (reported after the join, so that no model thread panics while others run).
struct Ran {
    admitted: u64,
    holder: LeaseHolder,
    broken: Option<String>,
}

fn run(m: &LeaseModel, clock: &ManualClock, demand: u64, ops: &[Op]) -> Ran {
    let mut h = LeaseHolder::with_demand(demand);
    let mut admitted = 0;
    let mut broken = None;
    let mut check = |ok: bool, what: String| {
        if !ok && broken.is_none() {
            broken = Some(what);
        }
    };
    for &op in ops {
        match op {
            Acquire(n) => {
                if m.acquire(&mut h, n).is_allowed() {
                    admitted += n;
                }
                check(
                    m.reserved() <= m.max_parked(),
                    format!("{CAP}: {}", m.reserved()),
                );
                check(h.left() <= h.reserved(), format!("{COVER}: {h:?}"));
            }
            GiveBack => {
                let (credited, tat, now) = m.give_back(&mut h);
                check(
                    credited == 0 || tat >= now,
                    format!("{CLAMP}: tat {tat} < now {now}"),
                );
            }
            SetClock(t) => clock.set(t),
        }
    }
    Ran {
        admitted,
        holder: h,
        broken,
    }
}

fn body(s: Setup, planted: Planted) -> impl Fn() + Send + Sync + 'static {
    move || {
        let (m, clock) = make(s, planted);
        let m = loom::sync::Arc::new(m);
        let mut first = run(&m, &clock, 0, s.before).holder;
        let _ = m.give_back(&mut first);
        let start = m.level();
        let spawned: Vec<_> = s.threads[1..]
            .iter()
            .map(|&ops| {
                let (m, clock) = (m.clone(), clock.clone());
                loom::thread::spawn(move || run(&m, &clock, s.demand, ops))
            })
            .collect();
        let mut results = vec![run(&m, &clock, s.demand, s.threads[0])];
        results.extend(spawned.into_iter().map(|h| h.join().expect("racer")));
        if let Some(broken) = results.iter().find_map(|r| r.broken.clone()) {
            panic!("{broken}");
        }
        let admitted: u64 = results.iter().map(|r| r.admitted).sum();
        let left: u64 = results.iter().map(|r| r.holder.left()).sum();
        let lost: u64 = results.iter().map(|r| r.holder.lost()).sum();
        let shares: u64 = results.iter().map(|r| r.holder.reserved()).sum();
        assert_eq!(
            shares,
            m.reserved(),
            "{CAP}: shares {shares} vs the counter"
        );
        assert!(left <= m.max_parked(), "{CAP}: {left} tokens parked");
        if start == 0 {
            assert_eq!(admitted, 0, "{EMPTY}");
        }
        if s.frozen {
            assert_eq!(
                m.level() + left + admitted + lost,
                start,
                "{CONSERVATION}: level {} + parked {left} + admitted {admitted} + lost {lost}",
                m.level()
            );
            assert!(admitted <= m.burst(), "{ABOVE_BURST}: {admitted}");
        }
    }
}

/// Two threads take a lease of 2 (1 spent, 1 parked), then spend or renew it, at one instant
/// from a bucket of 3: one of them meets an empty bucket.
const FROZEN: Setup = Setup {
    limit: 3,
    tokens: 2,
    cap: 2,
    demand: 1,
    before: &[],
    threads: &[&[Acquire(1), Acquire(1)], &[Acquire(1), Acquire(1)]],
    frozen: true,
};

/// Three threads each want a reservation of 1 under a cap of 2.
const CAPPED: Setup = Setup {
    limit: 8,
    tokens: 2,
    cap: 2,
    demand: 1,
    before: &[],
    threads: &[&[Acquire(1)], &[Acquire(1)], &[Acquire(1)]],
    frozen: true,
};

/// A lease is given back after the bucket refilled to its burst, racing another thread.
const REFILLED: Setup = Setup {
    limit: 4,
    tokens: 2,
    cap: 2,
    demand: 1,
    before: &[],
    threads: &[
        &[Acquire(1), SetClock(Duration::from_secs(1)), GiveBack],
        &[Acquire(1)],
    ],
    frozen: false,
};

/// Drained on the exact path first; then two threads ask, one of them twice.
const EMPTIED: Setup = Setup {
    limit: 3,
    tokens: 2,
    cap: 2,
    demand: 1,
    before: &[Acquire(3)],
    threads: &[&[Acquire(1), Acquire(1)], &[Acquire(1)]],
    frozen: true,
};

#[test]
fn frozen_instant_two_threads() {
    model("leased frozen, 2 threads", body(FROZEN, Planted::None));
}

#[test]
fn cap_three_threads() {
    model("leased cap, 3 threads", body(CAPPED, Planted::None));
}

#[test]
fn give_back_after_refill() {
    model("leased give-back, 2 threads", body(REFILLED, Planted::None));
}

#[test]
fn empty_bucket() {
    model("leased empty, 2 threads", body(EMPTIED, Planted::None));
}

#[test]
fn catches_the_spend_off_by_one() {
    expect_caught(
        "spend off by one",
        CONSERVATION,
        body(FROZEN, Planted::SpendOffByOne),
    );
}

#[test]
fn catches_the_unclamped_give_back() {
    expect_caught(
        "unclamped give-back",
        CLAMP,
        body(REFILLED, Planted::UnclampedGiveBack),
    );
}

#[test]
fn catches_a_grant_that_keeps_the_request() {
    expect_caught(
        "grant keeps the request",
        COVER,
        body(FROZEN, Planted::GrantKeepsRequest),
    );
}

#[test]
fn catches_a_reservation_by_load_and_store() {
    expect_caught(
        "reservation by load and store",
        CAP,
        body(CAPPED, Planted::ReserveLoadStore),
    );
}
