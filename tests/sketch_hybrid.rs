//! `HybridSketchLimiter` against exact per-key limiters on the same `ManualClock`: never more
//! admissions for a key than the exact keyed map, decisions never optimistic, a promoted key
//! keeps its count, an entry taken back gives no fresh limit, fewer false denials than the
//! plain sketch when heavy keys share lanes with light ones.

mod common;
#[path = "common/shadow.rs"]
mod shadow;

use std::time::Duration;

use common::Rng;
use shadow::{
    ask, cost, exact_map, racing_threads_keep_keys_within, random_quota, shadows, step, Admitted,
};
use tollgate::{Clock, HybridSketchLimiter, ManualClock, Quota, SketchLimiter, SketchSize};
use tollgate_test_support::{check_against_shadow, BuildPlaced, StallClock};

/// A hasher the hybrid reads a `u64` key through as the key itself: tests pick columns, lanes
/// and slots.
type Identity = BuildPlaced<0>;

/// A hybrid of `per_second` per second, `columns` columns and `exact` entries on `clock`,
/// its keys placed by [`Identity`].
fn placed(
    per_second: u64,
    columns: u64,
    exact: usize,
    clock: &ManualClock,
) -> HybridSketchLimiter<u64, ManualClock, Identity> {
    HybridSketchLimiter::with_clock(
        Quota::per_second(per_second).unwrap(),
        SketchSize::columns(columns).unwrap(),
        exact,
        clock.clone(),
    )
    .with_hasher(Identity::default())
}

#[test]
fn never_admits_more_than_the_exact_map() {
    let mut rng = Rng(0x4b1d);
    for case in 0..400 {
        let (limit, period, quota) = random_quota(&mut rng, 8);
        let columns = 1 + rng.below(6);
        let exact_keys = rng.below(6) as usize;
        let keys = 2 + rng.below(40);
        let clock = ManualClock::new();
        let hybrid = HybridSketchLimiter::<u64, _>::with_clock(
            quota,
            SketchSize::columns(columns).unwrap(),
            exact_keys,
            clock.clone(),
        )
        .promote_at(1 + rng.below(limit));
        let exact = exact_map(quota, &clock);
        let shadows = shadows(quota, &clock, keys);
        let mut admitted = Admitted::default();
        for i in 0..500 {
            step(&mut rng, &clock, period, false);
            let key = rng.below(keys);
            let n = cost(&mut rng, limit, 5);
            let p = hybrid.peek(&key, n);
            let d = ask(&hybrid, &mut rng, key, n);
            let e = exact.try_acquire_n(&key, n);
            let at = format!("case {case} op {i} key {key} n {n} at {:?}", clock.now());
            let shadow = &shadows[&key];
            check_against_shadow(&d, shadow, n, &at);
            // One thread: what peek said is what the request got.
            assert_eq!(
                p.is_allowed(),
                d.is_allowed(),
                "{at}: peek {p:?} then {d:?}"
            );
            let tally = admitted.count(key, n, &d, &e);
            assert!(
                tally.0 <= tally.1,
                "{at}: hybrid {} > exact {}",
                tally.0,
                tally.1
            );
        }
    }
}

#[test]
fn a_promoted_key_keeps_what_the_sketch_counted() {
    let clock = ManualClock::new();
    let l = placed(10, 1, 4, &clock).promote_at(6);
    // Another key in both lanes of key 1's column (one column, lane pair 0 for both: low
    // hash bits 0) counts 2: key 1's estimate is its own count plus 2.
    let (heavy, other) = (1u64 << 40, 2u64 << 40);
    assert!(l.try_acquire_n(&other, 2).is_allowed());
    assert!(l.try_acquire_n(&heavy, 3).is_allowed());
    assert!(!l.is_exact(&heavy));
    assert!(l.try_acquire_n(&heavy, 1).is_allowed()); // estimate 2 + 4 = 6: promoted
    assert!(l.is_exact(&heavy));
    // The entry starts at the estimate, 6: 4 more, not 10 - 4.
    assert_eq!(l.peek(&heavy, 1).remaining(), 3);
    assert!(l.try_acquire_n(&heavy, 4).is_allowed());
    assert!(!l.try_acquire(&heavy).is_allowed());
    // The next window: re-promoted from the sketch's estimate (the other key's 2 rolled off).
    clock.advance(Duration::from_secs(1));
    assert!(l.try_acquire_n(&heavy, 10).is_allowed());
    assert!(l.is_exact(&heavy));
    assert!(!l.try_acquire(&heavy).is_allowed());
}

#[test]
fn an_entry_taken_back_gives_no_fresh_limit() {
    let clock = ManualClock::new();
    // One exact entry: every key has the same slot.
    let l = placed(4, 64, 1, &clock).promote_at(2);
    // Apart in the sketch (columns 4 and 8 of 64), so neither counts in the other's estimate.
    let (a, b) = (1u64 << 60, 2u64 << 60);
    assert_eq!((0..6).filter(|_| l.try_acquire(&a).is_allowed()).count(), 4);
    assert!(l.is_exact(&a));
    // `b` is as heavy in the same window: `a`'s live entry is not evicted, `b` stays in the
    // sketch, and `a` stays at its limit.
    assert_eq!((0..6).filter(|_| l.try_acquire(&b).is_allowed()).count(), 4);
    assert!(!l.is_exact(&b));
    assert!(!l.try_acquire(&a).is_allowed());
    // The next window, `b` first: `a`'s entry is of a window that ended, `b` takes the slot.
    clock.advance(Duration::from_secs(1));
    assert_eq!((0..6).filter(|_| l.try_acquire(&b).is_allowed()).count(), 4);
    assert!(l.is_exact(&b) && !l.is_exact(&a));
    // `a` back in the sketch: its own limit in this window, no more.
    assert_eq!((0..6).filter(|_| l.try_acquire(&a).is_allowed()).count(), 4);
    // Mid-window, `a` counted in the sketch: the slot is `b`'s and live, so `a` stays in the
    // sketch with its count there, not a fresh limit.
    clock.advance(Duration::from_millis(500));
    assert!(!l.try_acquire(&a).is_allowed());
    assert!(!l.try_acquire(&b).is_allowed());
}

/// A request that read the clock and stalled, reading in hand, while its key was promoted,
/// spent its limit in the exact entry and lost the entry to another key in the next window:
/// it is not admitted in the window of its reading, whose count the key's lanes in the sketch
/// hold only in part (the rest was in the entry taken back).
#[test]
fn a_request_stalled_across_its_entry_taken_back_stays_within_its_limit() {
    let clock = StallClock::new();
    let l = HybridSketchLimiter::<u64, _>::with_clock(
        Quota::per_second(4).unwrap(),
        SketchSize::columns(64).unwrap(),
        1,
        clock.clone(),
    )
    .with_hasher(Identity::default())
    .promote_at(2);
    // One exact entry for both; apart in the sketch (columns 4 and 8 of 64).
    let (a, b) = (1u64 << 60, 2u64 << 60);
    let (first, stalled) = std::thread::scope(|s| {
        let racer = s.spawn(|| {
            // Its first reading: a request reads the clock once, before it looks at its slot.
            clock.hold(1);
            l.try_acquire(&a).is_allowed()
        });
        clock.wait_held();
        // Two in the sketch, promoted with them, two more in the entry.
        let first = (0..6).filter(|_| l.try_acquire(&a).is_allowed()).count();
        assert!(l.is_exact(&a));
        // The next window: `a`'s entry has ended, `b` takes the slot.
        clock.advance(Duration::from_secs(1));
        assert!(l.try_acquire_n(&b, 2).is_allowed());
        assert!(l.is_exact(&b) && !l.is_exact(&a));
        clock.release();
        (first, racer.join().unwrap())
    });
    assert_eq!(first, 4);
    assert!(
        !stalled,
        "a limit of 4 per window, and 4 admitted in the window of its reading"
    );
}

#[test]
fn heavy_keys_in_the_exact_entries_deny_light_keys_less_than_the_sketch() {
    let limit = 20;
    // The keys' hashes drawn once per placement and hashed to themselves by [`Identity`], so
    // the plain sketch and the hybrid see the same collisions, and the same ones in every run.
    let run = |placement: u64, exact_keys: usize| {
        let mut rng = Rng(placement);
        let heavy: Vec<u64> = (0..16).map(|_| rng.next()).collect();
        let light: Vec<u64> = (0..200).map(|_| rng.next()).collect();
        let clock = ManualClock::new();
        let l = placed(limit, 16, exact_keys, &clock);
        let mut denied = 0;
        for _ in 0..5 {
            for round in 0..20u64 {
                for h in &heavy {
                    let _ = l.try_acquire_n(h, 2);
                }
                if round % 4 == 0 {
                    for k in &light {
                        denied += u64::from(!l.try_acquire(k).is_allowed());
                    }
                }
            }
            clock.advance(Duration::from_secs(1));
        }
        denied
    };
    let (mut sketch, mut hybrid) = (0, 0);
    for placement in 0..8 {
        sketch += run(placement, 0);
        hybrid += run(placement, 256);
    }
    assert!(sketch > 0, "no collision to win against");
    assert!(hybrid * 4 < sketch, "hybrid {hybrid} vs sketch {sketch}");
    // Zero entries is the plain sketch.
    let clock = ManualClock::new();
    let plain = SketchLimiter::<u64, _>::with_clock(
        Quota::per_second(limit).unwrap(),
        SketchSize::columns(16).unwrap(),
        clock,
    );
    assert!(plain.try_acquire(&1).is_allowed());
}

#[test]
fn racing_threads_keep_every_key_within_its_limit() {
    racing_threads_keep_keys_within(
        40,
        |quota, clock, round| {
            let size = SketchSize::columns(1).unwrap();
            let exact = 1 + round as usize % 3;
            HybridSketchLimiter::<u64, _>::with_clock(quota, size, exact, clock.clone())
                .promote_at(1 + round)
        },
        |l, t, i| {
            let (key, n) = ((i + t) % 6, 1 + (i % 3));
            (
                key,
                if l.try_acquire_n(&key, n).is_allowed() {
                    n
                } else {
                    0
                },
            )
        },
    );
}
