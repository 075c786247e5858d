//! Loom models of the GCRA token bucket: one `tat` word, one compare-exchange per admission.
//! The mutex twin passes the same models; the load-then-store mutant must fail them.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom_tests::mutants::{mutant, token_bucket::LoadStore};
use loom_tests::{
    admitted_units, drain, exactly_admitted_models, expect_caught, frozen_models,
    frozen_three_units, frozen_two_calls_each, real_and_twin, scenario, Step, NOT_SERIALIZABLE,
};
use tollgate::__loom::{token_bucket::Gcra, Algo, RateLimiter};
use tollgate::baseline::MutexTokenBucket;
use tollgate::{Limiter, ManualClock, Quota, TokenBucket};

use Step::{Acquire, SetClock};

const SECOND: Duration = Duration::from_secs(1);
const HALF: Duration = Duration::from_millis(500);
const TEN: Duration = Duration::from_secs(10);

fn quota(limit: u64) -> Quota {
    Quota::per_second(limit).expect("valid quota")
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

exactly_admitted_models! {
    /// One token left at 10 s; one thread steps the clock back to 0 while two acquire: a token
    /// is never minted by going back, so racers plus a drain back at 10 s admit exactly 1.
    clock_step_back_racing_admissions:
        TEN,
        &[SetClock(TEN), Acquire(1)],
        &[&[SetClock(Duration::ZERO)], &[Acquire(1)], &[Acquire(1)]],
        TEN,
        1;
}

/// The bucket of `LIMIT` per second.
fn real<const LIMIT: u64>(c: ManualClock) -> TokenBucket<ManualClock> {
    TokenBucket::with_clock(quota(LIMIT), c)
}
/// Its mutex twin.
fn twin<const LIMIT: u64>(c: ManualClock) -> MutexTokenBucket<ManualClock> {
    MutexTokenBucket::with_clock(quota(LIMIT), c)
}
/// The bucket committing by load and store.
fn planted<const LIMIT: u64>(c: ManualClock) -> RateLimiter<LoadStore, ManualClock> {
    mutant(Gcra::params(&quota(LIMIT)).expect("valid"), c)
}

#[test]
fn frozen_instant_admits_exactly_what_is_left() {
    frozen_models("token_bucket/", real::<2>, real::<3>, 3 * SECOND);
    frozen_models("token_bucket/twin ", twin::<2>, twin::<3>, 3 * SECOND);
}

#[test]
fn clock_moves_racing_admissions() {
    real_and_twin! { "token_bucket/", real, twin;
        "clock advance": clock_advance_racing_admissions(2);
        "clock step back": clock_step_back_racing_admissions(2);
    }
}

#[test]
fn load_then_store_mutant_is_caught() {
    expect_caught(
        "token_bucket/load-then-store, frozen 3x1",
        NOT_SERIALIZABLE,
        frozen_three_units(planted::<2>, 3 * SECOND),
    );
    expect_caught(
        "token_bucket/load-then-store, frozen 2x2",
        NOT_SERIALIZABLE,
        frozen_two_calls_each(planted::<3>, 3 * SECOND),
    );
    expect_caught(
        "token_bucket/load-then-store, clock advance",
        "over the limit or lost",
        clock_advance_racing_admissions(planted::<2>),
    );
}
