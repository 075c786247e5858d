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
//! - an empty bucket admits nothing;
//! - in any interval `[a, b]`, one instant included, admitted ≤
//!   `burst + ⌊rate·(b − a)⌋ + max_overshoot()` (tokens parked, the bucket refilled, then the
//!   parked tokens spent as the bucket is drained: the bound is reached);
//! - a lease is spent from at most `clock_every − 1` times at or past its `ttl`.
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
use tollgate::{Clock, Lease, ManualClock, Quota};

const ABOVE_BURST: &str = "frozen instant admitted above the burst";
const CONSERVATION: &str = "conservation broken";
const CLAMP: &str = "give-back lifted the bucket above its burst";
const CAP: &str = "reservation above the cap";
const COVER: &str = "a lease holds more than its reservation";
const EMPTY: &str = "an empty bucket admitted";
const BOUND: &str = "admitted above burst + rate × time + max_overshoot";
const LATE: &str = "a lease spent from past its ttl more than clock_every − 1 times";

#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire(u64),
    GiveBack,
    SetClock(Duration),
}

use Op::*;

/// A model: `limit` per second with that burst, leases of `tokens` with a cap of `cap`,
/// grants limited to `available / 1`, a `ttl` of 10 s and the clock read on every spend
/// unless the setup says otherwise.
#[derive(Clone, Copy)]
struct Setup {
    ttl: Duration,
    clock_every: u32,
    /// After the join, alone: the clock set to this, each racer's holder asks for 1 (its
    /// parked token), and a fresh holder drains the bucket; the admissions at that instant
    /// must be exactly `burst + max_overshoot()`, and all within the interval bound.
    settle: Option<Duration>,
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
    let lease = Lease::try_new(s.tokens, s.ttl)
        .unwrap()
        .with_max_parked(s.cap)
        .unwrap()
        .with_clock_every(s.clock_every)
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
    /// Each admission: the clock before and after the call (ns), and its units.
    stamps: Vec<(u64, u64, u64)>,
}

fn run(m: &LeaseModel, clock: &ManualClock, s: &Setup, h: LeaseHolder, ops: &[Op]) -> Ran {
    let mut h = h;
    let mut admitted = 0;
    let mut broken = None;
    let mut stamps = Vec::new();
    let ttl = s.ttl.as_nanos() as u64;
    // Spends from the current lease (by its grant) at or past its ttl.
    let mut late = (h.granted_at(), 0u32);
    let mut check = |ok: bool, what: String| {
        if !ok && broken.is_none() {
            broken = Some(what);
        }
    };
    for &op in ops {
        match op {
            Acquire(n) => {
                let before = clock.now_nanos();
                if m.acquire(&mut h, n).is_allowed() {
                    admitted += n;
                    stamps.push((before, clock.now_nanos(), n));
                    if late.0 != h.granted_at() {
                        late = (h.granted_at(), 0);
                    }
                    // Only the thread that reads `before` moves the clock in the ttl models,
                    // so `before` is the time of this spend.
                    if before >= h.granted_at() + ttl {
                        late.1 += 1;
                    }
                    check(
                        late.1 < s.clock_every,
                        format!("{LATE}: {} at {before} ns: {h:?}", late.1),
                    );
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
        stamps,
    }
}

/// The interval bound over every admission: for each `a ≤ b` among the readings, the
/// admissions whose call began at or after `a` and ended at or before `b`.
fn check_interval_bound(m: &LeaseModel, s: &Setup, stamps: &[(u64, u64, u64)]) {
    for &(a, _, _) in stamps {
        for &(_, b, _) in stamps.iter().filter(|&&(_, b, _)| b >= a) {
            let within: u64 = stamps
                .iter()
                .filter(|&&(t0, t1, _)| t0 >= a && t1 <= b)
                .map(|&(_, _, n)| n)
                .sum();
            let bound = m.burst() + (b - a) * s.limit / 1_000_000_000 + m.max_overshoot();
            assert!(
                within <= bound,
                "{BOUND}: {within} in [{a}, {b}] ns, bound {bound}: {stamps:?}"
            );
        }
    }
}

fn body(s: Setup, planted: Planted) -> impl Fn() + Send + Sync + 'static {
    move || {
        let (m, clock) = make(s, planted);
        let m = loom::sync::Arc::new(m);
        let mut first = run(&m, &clock, &s, LeaseHolder::default(), s.before).holder;
        let _ = m.give_back(&mut first);
        let start = m.level();
        let spawned: Vec<_> = s.threads[1..]
            .iter()
            .map(|&ops| {
                let (m, clock) = (m.clone(), clock.clone());
                let h = LeaseHolder::with_demand(s.demand);
                loom::thread::spawn(move || run(&m, &clock, &s, h, ops))
            })
            .collect();
        let h = LeaseHolder::with_demand(s.demand);
        let mut results = vec![run(&m, &clock, &s, h, s.threads[0])];
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
        let mut stamps: Vec<_> = results.iter().flat_map(|r| r.stamps.clone()).collect();
        if let Some(settle) = s.settle {
            clock.set(settle);
            const ONCE: &[Op] = &[Acquire(1)];
            for r in results {
                let after = run(&m, &clock, &s, r.holder, ONCE);
                if let Some(broken) = after.broken {
                    panic!("{broken}");
                }
                stamps.extend(after.stamps);
            }
            let drain = vec![Acquire(1); (m.burst() + 2) as usize];
            let drained = run(&m, &clock, &s, LeaseHolder::default(), &drain);
            if let Some(broken) = drained.broken {
                panic!("{broken}");
            }
            stamps.extend(drained.stamps);
            check_interval_bound(&m, &s, &stamps);
            // Reached: the parked tokens and the refilled burst, at the one instant.
            let at_settle: u64 = stamps
                .iter()
                .filter(|&&(t0, _, _)| t0 == settle.as_nanos() as u64)
                .map(|&(_, _, n)| n)
                .sum();
            assert_eq!(
                at_settle,
                m.burst() + m.max_overshoot(),
                "{BOUND}: not reached at {settle:?}: {stamps:?}"
            );
        }
        check_interval_bound(&m, &s, &stamps);
    }
}

const TEN_S: Duration = Duration::from_secs(10);
const TEN_MS: Duration = Duration::from_millis(10);
const TWENTY_MS: Duration = Duration::from_millis(20);

/// What the setups below share unless they say otherwise: a ttl of 10 s, the clock read at
/// every spend, no settle, leases of 2 under a cap of 2 from a bucket of 4 for racers that
/// spent 1, nothing run first, time moving.
const BASE: Setup = Setup {
    ttl: TEN_S,
    clock_every: 1,
    settle: None,
    limit: 4,
    tokens: 2,
    cap: 2,
    demand: 1,
    before: &[],
    threads: &[],
    frozen: false,
};

/// Two threads each take a lease of 2 (1 spent, 1 parked) from a bucket of 4, racing on the
/// word and the reservation (cap 2); then, alone at 1 s (the bucket full again), each spends
/// its parked token, and a fresh holder drains the bucket: 4 + 2 at one instant,
/// `burst + max_overshoot()`, and no more.
const PARKED: Setup = Setup {
    settle: Some(Duration::from_secs(1)),
    threads: &[&[Acquire(1)], &[Acquire(1)]],
    ..BASE
};

/// A thread parks 1 at 0 with a ttl of 10 ms, moves the clock to 20 ms and asks again: the
/// expired lease must go back, not be spent from; another thread asks at either reading.
const EXPIRING: Setup = Setup {
    ttl: TEN_MS,
    threads: &[
        &[Acquire(1), SetClock(TWENTY_MS), Acquire(1)],
        &[Acquire(1)],
    ],
    ..BASE
};

/// The clock read every 2 spends: a lease of 4 (3 parked) granted at 0, then at 20 ms (past
/// its ttl of 10 ms) one spend without a clock read is allowed, the next reads the clock and
/// renews; another thread racing for its own lease under the cap of 4.
const UNCHECKED: Setup = Setup {
    ttl: TEN_MS,
    clock_every: 2,
    limit: 8,
    tokens: 4,
    cap: 4,
    demand: 2,
    threads: &[
        &[Acquire(1), SetClock(TWENTY_MS), Acquire(1), Acquire(1)],
        &[Acquire(1)],
    ],
    ..BASE
};

/// Two threads take a lease of 2 (1 spent, 1 parked), then spend or renew it, at one instant
/// from a bucket of 3: one of them meets an empty bucket.
const FROZEN: Setup = Setup {
    limit: 3,
    threads: &[&[Acquire(1), Acquire(1)], &[Acquire(1), Acquire(1)]],
    frozen: true,
    ..BASE
};

/// Three threads each want a reservation of 1 under a cap of 2.
const CAPPED: Setup = Setup {
    limit: 8,
    threads: &[&[Acquire(1)], &[Acquire(1)], &[Acquire(1)]],
    frozen: true,
    ..BASE
};

/// A lease is given back after the bucket refilled to its burst, racing another thread.
const REFILLED: Setup = Setup {
    threads: &[
        &[Acquire(1), SetClock(Duration::from_secs(1)), GiveBack],
        &[Acquire(1)],
    ],
    ..BASE
};

/// Drained on the exact path first; then two threads ask, one of them twice.
const EMPTIED: Setup = Setup {
    limit: 3,
    before: &[Acquire(3)],
    threads: &[&[Acquire(1), Acquire(1)], &[Acquire(1)]],
    frozen: true,
    ..BASE
};

/// Each setup on the sound protocol: every invariant holds in every interleaving.
#[test]
fn the_sound_protocol_keeps_every_invariant() {
    for (name, setup) in [
        ("leased frozen, 2 threads", FROZEN),
        ("leased cap, 3 threads", CAPPED),
        ("leased give-back, 2 threads", REFILLED),
        ("leased empty, 2 threads", EMPTIED),
        ("leased parked then refilled, 2 threads", PARKED),
        ("leased ttl expiry, 2 threads", EXPIRING),
        ("leased clock every 2, 2 threads", UNCHECKED),
    ] {
        model(name, body(setup, Planted::None));
    }
}

#[test]
fn catches_the_spend_off_by_one_by_the_interval_bound() {
    expect_caught(
        "spend off by one, parked then refilled",
        BOUND,
        body(PARKED, Planted::SpendOffByOne),
    );
}

#[test]
fn catches_a_spend_that_ignores_the_ttl() {
    expect_caught("ttl ignored", LATE, body(EXPIRING, Planted::TtlIgnored));
}

#[test]
fn catches_one_unchecked_spend_too_many() {
    expect_caught(
        "clock every off by one",
        LATE,
        body(UNCHECKED, Planted::ClockEveryOffByOne),
    );
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
