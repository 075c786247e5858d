//! Loom models of the sliding log: a seqlock. Admissions take the lock bit of `seq`, write
//! their entries and publish the new count with a `Release` unlock; denials read `seq`, the
//! entries and `seq` again, and return only if nothing changed. The models race denials
//! against an admission that overwrites the very entries they read. The mutex twin passes
//! the same models; the unvalidated-read and lock-free-admission mutants must fail them.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom_tests::mutants::mutant;
use loom_tests::mutants::sliding_log::{NoLock, UnvalidatedRead};
use loom_tests::{
    exactly_admitted_models, expect_caught, frozen, real_and_twin, Step, NOT_SERIALIZABLE,
};
use tollgate::__loom::sliding_log::{Log, LogParams};
use tollgate::__loom::{Algo, RateLimiter};
use tollgate::baseline::MutexSlidingLog;
use tollgate::{Limiter, ManualClock, Quota, SlidingLog};

use Step::{Acquire, SetClock};

const S1: Duration = Duration::from_secs(1);
const S2: Duration = Duration::from_secs(2);
const S3: Duration = Duration::from_secs(3);
const MID: Duration = Duration::from_millis(3_500);
const S10: Duration = Duration::from_secs(10);
const S11: Duration = Duration::from_secs(11);

/// `limit` per 10 s.
fn quota(limit: u64) -> Quota {
    Quota::try_new(limit, S10).expect("valid quota")
}

/// Limit 1, 2 threads × 1 unit at a frozen instant: serially explained (one passes).
fn two_racers_one_unit_each<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    frozen(make, MID, &[], &[&[Acquire(1)], &[Acquire(1)]])
}

/// Limit 2, costs 2 and 1 racing: whichever comes first passes, the other is denied.
fn two_racers_mixed_costs<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    frozen(make, MID, &[], &[&[Acquire(2)], &[Acquire(1)]])
}

/// Limit 3, 2 threads × 2 unit calls: serially explained.
fn two_racers_two_calls_each<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    frozen(
        make,
        MID,
        &[],
        &[&[Acquire(1), Acquire(1)], &[Acquire(1), Acquire(1)]],
    )
}

/// Limit 2; admissions at 1 s and 2 s; at 11 s the first has left. One thread is admitted
/// (overwriting entry 0, the 1 s one, with 11 s) while another asks for 2 and is denied. Before
/// the admission a denial says 1 remains, retry in 1 s; after it, 0 remain, retry in 10 s. A
/// denial decided on the old count with the new entry 0 (a torn read) says 0 remain, retry in
/// 1 s: no serial order says that, and the seqlock's second read of `seq` must discard it.
fn denials_racing_an_admission<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    frozen(
        make,
        S11,
        &[SetClock(S1), Acquire(1), SetClock(S2), Acquire(1)],
        &[&[Acquire(1)], &[Acquire(2)]],
    )
}

exactly_admitted_models! {
    /// Limit 2, full at 0; one thread advances the clock to 10 s, where both admissions have
    /// left, while two acquire: racers plus a drain at 10 s admit exactly 2.
    clock_advance_racing_admissions:
        Duration::ZERO,
        &[Acquire(2)],
        &[&[SetClock(S10)], &[Acquire(1)], &[Acquire(1)]],
        S10,
        2;

    /// Limit 2, 1 left at 10 s; one thread steps the clock back to 3 s while two acquire: the log's
    /// time stands at its newest entry, so racers plus a drain at 10 s admit exactly 1.
    clock_step_back_racing_admissions:
        S10,
        &[SetClock(S10), Acquire(1)],
        &[&[SetClock(S3)], &[Acquire(1)], &[Acquire(1)]],
        S10,
        1;
}

/// The log of `LIMIT` per 10 s.
fn real<const LIMIT: u64>(c: ManualClock) -> SlidingLog<ManualClock> {
    SlidingLog::try_with_clock(quota(LIMIT), c).expect("a small log allocates")
}
/// Its mutex twin.
fn twin<const LIMIT: u64>(c: ManualClock) -> MutexSlidingLog<ManualClock> {
    MutexSlidingLog::try_with_clock(quota(LIMIT), c).expect("a small log allocates")
}
/// The log with the planted mutant `M`.
fn planted<M: Algo<Params = LogParams>, const LIMIT: u64>(
    c: ManualClock,
) -> RateLimiter<M, ManualClock> {
    mutant(Log::params(&quota(LIMIT)).expect("valid"), c)
}

#[test]
fn frozen_instant_admits_exactly_what_is_left() {
    real_and_twin! { "sliding_log/", real, twin;
        "frozen 2x1": two_racers_one_unit_each(1);
        "frozen mixed costs 2x1": two_racers_mixed_costs(2);
        "frozen 2x2": two_racers_two_calls_each(3);
    }
}

#[test]
fn denials_racing_an_admission_read_a_consistent_log() {
    real_and_twin! { "sliding_log/", real, twin;
        "denials racing an admission 2x1": denials_racing_an_admission(2);
    }
}

#[test]
fn clock_moves_racing_admissions() {
    real_and_twin! { "sliding_log/", real, twin;
        "clock advance": clock_advance_racing_admissions(2);
        "clock step back": clock_step_back_racing_admissions(2);
    }
}

#[test]
fn unvalidated_optimistic_read_mutant_is_caught() {
    expect_caught(
        "sliding_log/unvalidated optimistic read, denials racing an admission 2x1",
        NOT_SERIALIZABLE,
        denials_racing_an_admission(planted::<UnvalidatedRead, 2>),
    );
}

#[test]
fn admission_without_the_lock_mutant_is_caught() {
    expect_caught(
        "sliding_log/admission without the lock, frozen 2x1",
        NOT_SERIALIZABLE,
        two_racers_one_unit_each(planted::<NoLock, 1>),
    );
    expect_caught(
        "sliding_log/admission without the lock, clock advance",
        "over the limit",
        clock_advance_racing_admissions(planted::<NoLock, 2>),
    );
}
