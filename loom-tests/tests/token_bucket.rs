//! Loom models of the GCRA token bucket: one `tat` word, one compare-exchange per admission.
//! The mutex twin passes the same models; the load-then-store mutant must fail them.
#![cfg(loom)]

use std::time::Duration;

use loom_tests::{
    admitted_units, drain, expect_caught, frozen, model, scenario, Step, NOT_SERIALIZABLE,
};
use tollgate::baseline::MutexTokenBucket;
use tollgate::mutants::LoadStoreTokenBucket;
use tollgate::{Limiter, ManualClock, Quota, TokenBucket};

use Step::{Acquire, SetClock};

const SECOND: Duration = Duration::from_secs(1);
const HALF: Duration = Duration::from_millis(500);
const TEN: Duration = Duration::from_secs(10);

fn quota(limit: u64) -> Quota {
    Quota::per_second(limit).expect("valid quota")
}

/// 2 per second (burst 2), 3 threads × 1 unit at a frozen instant: exactly 2 pass, and every
/// decision is what some serial order says (remaining 1 then 0; the denial's retry 500 ms).
fn three_racers_one_unit_each<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    frozen(
        make,
        3 * SECOND,
        &[],
        &[&[Acquire(1)], &[Acquire(1)], &[Acquire(1)]],
    )
}

/// 3 per second, costs 2, 2 and 1 racing: whichever 2 wins, the other 2 is denied and the 1
/// passes (or the 1 and one 2 pass), all-or-nothing, as some serial order.
fn three_racers_mixed_costs<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    frozen(
        make,
        3 * SECOND,
        &[],
        &[&[Acquire(2)], &[Acquire(2)], &[Acquire(1)]],
    )
}

/// 3 per second, 2 threads × 2 units one at a time: 3 of the 4 pass, serially explained.
fn two_racers_two_calls_each<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    frozen(
        make,
        3 * SECOND,
        &[],
        &[&[Acquire(1), Acquire(1)], &[Acquire(1), Acquire(1)]],
    )
}

/// Drained at 0; one thread advances the clock by one token's interval (500 ms) while two
/// acquire: exactly one token exists in all, so the racers plus a drain afterwards admit
/// exactly 1, and an admitted racer was told 0 remain.
fn clock_advance_racing_admissions<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        Duration::ZERO,
        &[Acquire(1), Acquire(1)],
        &[&[SetClock(HALF)], &[Acquire(1)], &[Acquire(1)]],
        move |clock, limiter, calls| {
            let raced = admitted_units(calls);
            clock.set(HALF);
            let after = drain(limiter, 3);
            assert_eq!(raced + after, 1, "over the limit or lost: {calls:?}");
            for (_, d) in calls.iter().flatten().filter(|(_, d)| d.is_allowed()) {
                assert_eq!(d.remaining(), 0, "remaining inconsistent: {calls:?}");
            }
        },
    )
}

/// One token left at 10 s; one thread steps the clock back to 0 while two acquire: a token
/// is never minted by going back, so racers plus a drain back at 10 s admit exactly 1.
fn clock_step_back_racing_admissions<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        TEN,
        &[SetClock(TEN), Acquire(1)],
        &[&[SetClock(Duration::ZERO)], &[Acquire(1)], &[Acquire(1)]],
        move |clock, limiter, calls| {
            let raced = admitted_units(calls);
            clock.set(TEN);
            let after = drain(limiter, 3);
            assert_eq!(raced + after, 1, "over the limit or lost: {calls:?}");
        },
    )
}

fn real2(c: ManualClock) -> TokenBucket<ManualClock> {
    TokenBucket::with_clock(quota(2), c)
}
fn real3(c: ManualClock) -> TokenBucket<ManualClock> {
    TokenBucket::with_clock(quota(3), c)
}
fn twin2(c: ManualClock) -> MutexTokenBucket<ManualClock> {
    MutexTokenBucket::with_clock(quota(2), c)
}
fn twin3(c: ManualClock) -> MutexTokenBucket<ManualClock> {
    MutexTokenBucket::with_clock(quota(3), c)
}
fn mutant2(c: ManualClock) -> LoadStoreTokenBucket<ManualClock> {
    LoadStoreTokenBucket::with_clock(quota(2), c)
}
fn mutant3(c: ManualClock) -> LoadStoreTokenBucket<ManualClock> {
    LoadStoreTokenBucket::with_clock(quota(3), c)
}

#[test]
fn frozen_instant_admits_exactly_what_is_left() {
    model("token_bucket/frozen 3x1", three_racers_one_unit_each(real2));
    model(
        "token_bucket/frozen mixed costs 3x1",
        three_racers_mixed_costs(real3),
    );
    model("token_bucket/frozen 2x2", two_racers_two_calls_each(real3));
}

#[test]
fn clock_moves_racing_admissions() {
    model(
        "token_bucket/clock advance",
        clock_advance_racing_admissions(real2),
    );
    model(
        "token_bucket/clock step back",
        clock_step_back_racing_admissions(real2),
    );
}

#[test]
fn mutex_twin_passes_the_same_models() {
    model(
        "token_bucket/twin frozen 3x1",
        three_racers_one_unit_each(twin2),
    );
    model(
        "token_bucket/twin frozen mixed costs 3x1",
        three_racers_mixed_costs(twin3),
    );
    model(
        "token_bucket/twin frozen 2x2",
        two_racers_two_calls_each(twin3),
    );
    model(
        "token_bucket/twin clock advance",
        clock_advance_racing_admissions(twin2),
    );
    model(
        "token_bucket/twin clock step back",
        clock_step_back_racing_admissions(twin2),
    );
}

#[test]
fn load_then_store_mutant_is_caught() {
    expect_caught(
        "token_bucket/load-then-store, frozen 3x1",
        NOT_SERIALIZABLE,
        three_racers_one_unit_each(mutant2),
    );
    expect_caught(
        "token_bucket/load-then-store, frozen 2x2",
        NOT_SERIALIZABLE,
        two_racers_two_calls_each(mutant3),
    );
    expect_caught(
        "token_bucket/load-then-store, clock advance",
        "over the limit or lost",
        clock_advance_racing_admissions(mutant2),
    );
}
