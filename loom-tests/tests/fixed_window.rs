//! Loom models of the fixed window: (window, count) in one word, so a new window's reset and
//! its first admission are one compare-exchange. The mutex twin passes the same models; the
//! mutant that opens a new window by a plain store (its reset overwriting a racing count) must fail them.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom_tests::mutants::{fixed_window::StoreNewWindow, mutant};
use loom_tests::{
    drain, exactly_admitted_models, expect_caught, frozen_models, frozen_three_units,
    real_and_twin, scenario, Step, NOT_SERIALIZABLE,
};
use tollgate::__loom::{fixed_window::Fixed, Algo, RateLimiter};
use tollgate::baseline::MutexFixedWindow;
use tollgate::FixedWindow;
use tollgate::{Limiter, ManualClock, Quota};

use Step::{Acquire, SetClock};

/// Mid-window instant for the frozen models.
const MID: Duration = Duration::from_millis(3_500);
/// The edge between window 0 and window 1 (windows of 1 s), and the last ns before it.
const EDGE: Duration = Duration::from_secs(1);
const JUST_BEFORE_EDGE: Duration = Duration::from_nanos(999_999_999);
const FIVE: Duration = Duration::from_secs(5);
const BACK: Duration = Duration::from_millis(3_500);

fn quota(limit: u64) -> Quota {
    Quota::per_second(limit).expect("valid quota")
}

/// 2 per window; window 0 has 1 left, 1 ns before its end. One thread moves the clock over the
/// edge and acquires while two others acquire. Each admission says which window counted it
/// (its reset: 1 ns left in window 0, at least 1 s in window 1). Window 0 takes at most the 1
/// it had left; window 1's racers plus a drain afterwards make exactly its limit of 2: never
/// more than the limit per window, and no admission lost from the count.
fn rollover_racing_admissions<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        JUST_BEFORE_EDGE,
        &[SetClock(JUST_BEFORE_EDGE), Acquire(1)],
        &[&[SetClock(EDGE), Acquire(1)], &[Acquire(1)], &[Acquire(1)]],
        |clock, limiter, calls| {
            let admitted: Vec<_> = calls
                .iter()
                .flatten()
                .filter(|(_, d)| d.is_allowed())
                .map(|&(_, d)| d)
                .collect();
            let in_old = admitted
                .iter()
                .filter(|d| d.reset_after() <= Duration::from_nanos(1))
                .count() as u64;
            let in_new = admitted.len() as u64 - in_old;
            assert!(in_old <= 1, "over the limit in the old window: {calls:?}");
            for d in admitted
                .iter()
                .filter(|d| d.reset_after() <= Duration::from_nanos(1))
            {
                assert_eq!(d.remaining(), 0, "remaining inconsistent: {calls:?}");
            }
            clock.set(EDGE);
            let after = drain(limiter, 4);
            assert_eq!(
                in_new + after,
                2,
                "over the limit or lost in the new window: {calls:?}"
            );
        },
    )
}

exactly_admitted_models! {
    /// 2 per window, 1 left at 5 s; one thread steps the clock back to 3.5 s while two acquire:
    /// the stored window is never reset by going back, so racers plus a drain back at 5 s admit
    /// exactly 1.
    clock_step_back_racing_admissions:
        FIVE,
        &[SetClock(FIVE), Acquire(1)],
        &[&[SetClock(BACK)], &[Acquire(1)], &[Acquire(1)]],
        FIVE,
        1;
}

/// The window of `LIMIT` per second.
fn real<const LIMIT: u64>(c: ManualClock) -> FixedWindow<ManualClock> {
    FixedWindow::with_clock(quota(LIMIT), c)
}
/// Its mutex twin.
fn twin<const LIMIT: u64>(c: ManualClock) -> MutexFixedWindow<ManualClock> {
    MutexFixedWindow::with_clock(quota(LIMIT), c)
}
/// The window opening new windows by a plain store.
fn planted<const LIMIT: u64>(c: ManualClock) -> RateLimiter<StoreNewWindow, ManualClock> {
    mutant(Fixed::params(&quota(LIMIT)).expect("valid"), c)
}

#[test]
fn frozen_instant_admits_exactly_what_is_left() {
    frozen_models("fixed_window/", real::<2>, real::<3>, MID);
    frozen_models("fixed_window/twin ", twin::<2>, twin::<3>, MID);
}

#[test]
fn clock_moves_racing_admissions() {
    real_and_twin! { "fixed_window/", real, twin;
        "rollover": rollover_racing_admissions(2);
        "clock step back": clock_step_back_racing_admissions(2);
    }
}

#[test]
fn new_window_by_store_mutant_is_caught() {
    expect_caught(
        "fixed_window/new window by a store, rollover",
        "lost in the new window",
        rollover_racing_admissions(planted::<2>),
    );
}

/// The first admissions of a limiter created at 3.5 s also open a new window (3, after 0):
/// the frozen model catches the mutant too.
#[test]
fn new_window_by_store_mutant_is_caught_opening_a_window() {
    expect_caught(
        "fixed_window/new window by a store, frozen 3x1",
        NOT_SERIALIZABLE,
        frozen_three_units(planted::<2>, MID),
    );
}
