//! Loom models of the sliding-window counter: a head word (slot, count) plus a ring of
//! finished slots, written with `fetch_max` before the head CAS (`Release`) and read after an
//! `Acquire` head load. The rollover models are where a `Relaxed` instead of
//! `Acquire`/`Release`, or a ring write after the CAS, must show: both mutants must fail them.
//! The mutex twin passes the same models.
//!
//! Geometry of every model: 2 slots of 1 s (period 2 s), so an admission in slot `e` counts
//! until slot `e + 3` begins; ring of 3 entries.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom_tests::mutants::mutant;
use loom_tests::mutants::sliding_window::{RelaxedHead, RingAfterCas};
use loom_tests::{
    admitted_units, drain, exactly_admitted, expect_caught, frozen, frozen_mixed_costs,
    frozen_three_units, frozen_two_calls_each, model, scenario, Step, NOT_SERIALIZABLE,
};
use tollgate::__loom::{sliding_window::Geometry, RateLimiter};
use tollgate::baseline::MutexSlidingWindow;
use tollgate::{Limiter, ManualClock, Quota, SlidingWindow};

use Step::{Acquire, SetClock};

const SLOTS: u32 = 2;
const MID: Duration = Duration::from_millis(3_500);
const SLOT0: Duration = Duration::from_millis(500);
const SLOT1: Duration = Duration::from_millis(1_500);
/// Slot 3 begins: slot 0's admissions have left the window.
const SLOT3: Duration = Duration::from_secs(3);
const SLOT5: Duration = Duration::from_millis(5_500);
const BACK: Duration = Duration::from_millis(200);

fn quota(limit: u64) -> Quota {
    Quota::new(limit, Duration::from_secs(2)).expect("valid quota")
}

/// Limit 3; slot 0 holds 2; three threads at 1.5 s (slot 1) race to move the head past slot 0
/// (each mover writes slot 0 to the ring, one CAS wins) and to admit: exactly 1 passes, and
/// every decision (remaining, retry, reset) is that of some serial order. A thread that sees
/// the moved head but reads slot 0's ring entry from before the move counts 1 instead of 3
/// and admits too much: that is what the two ordering mutants do.
fn slot_rollover_at_a_frozen_instant<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    frozen(
        make,
        SLOT1,
        &[SetClock(SLOT0), Acquire(2)],
        &[&[Acquire(1)], &[Acquire(1)], &[Acquire(1)]],
    )
}

/// Limit 2; slot 0 holds 1. One thread moves the clock into slot 1 and acquires while two
/// acquire: slot 0 is still in the window, so racers plus a drain afterwards admit exactly 1
/// (never more than the limit in the window, no admission lost from the count).
fn rollover_racing_admissions<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        SLOT0,
        &[SetClock(SLOT0), Acquire(1)],
        &[&[SetClock(SLOT1), Acquire(1)], &[Acquire(1)], &[Acquire(1)]],
        |clock, limiter, calls| {
            let raced = admitted_units(calls);
            assert!(raced <= 1, "over the limit: {calls:?}");
            clock.set(SLOT1);
            let after = drain(limiter, 3);
            assert_eq!(raced + after, 1, "over the limit or lost: {calls:?}");
        },
    )
}

/// Limit 2; slot 0 full. One thread advances the clock to slot 3, where slot 0 has left the
/// window, while two acquire: racers plus a drain at slot 3 admit exactly 2.
fn expiry_racing_admissions<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    exactly_admitted(
        make,
        SLOT0,
        &[SetClock(SLOT0), Acquire(2)],
        &[&[SetClock(SLOT3)], &[Acquire(1)], &[Acquire(1)]],
        SLOT3,
        2,
    )
}

/// Limit 2, 1 left at 5.5 s; one thread steps the clock back to 0.2 s while two acquire:
/// nothing expires by going back, so racers plus a drain back at 5.5 s admit exactly 1.
fn clock_step_back_racing_admissions<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    exactly_admitted(
        make,
        SLOT5,
        &[SetClock(SLOT5), Acquire(1)],
        &[&[SetClock(BACK)], &[Acquire(1)], &[Acquire(1)]],
        SLOT5,
        1,
    )
}

fn real2(c: ManualClock) -> SlidingWindow<ManualClock> {
    SlidingWindow::try_with_slots(quota(2), SLOTS, c).expect("valid slots")
}
fn real3(c: ManualClock) -> SlidingWindow<ManualClock> {
    SlidingWindow::try_with_slots(quota(3), SLOTS, c).expect("valid slots")
}
fn twin2(c: ManualClock) -> MutexSlidingWindow<ManualClock> {
    MutexSlidingWindow::try_with_slots(quota(2), SLOTS, c).expect("valid slots")
}
fn twin3(c: ManualClock) -> MutexSlidingWindow<ManualClock> {
    MutexSlidingWindow::try_with_slots(quota(3), SLOTS, c).expect("valid slots")
}
fn geometry(limit: u64) -> Geometry {
    Geometry::new(&quota(limit), SLOTS).expect("valid slots")
}
fn relaxed2(c: ManualClock) -> RateLimiter<RelaxedHead, ManualClock> {
    mutant(geometry(2), c)
}
fn relaxed3(c: ManualClock) -> RateLimiter<RelaxedHead, ManualClock> {
    mutant(geometry(3), c)
}
fn late_ring2(c: ManualClock) -> RateLimiter<RingAfterCas, ManualClock> {
    mutant(geometry(2), c)
}
fn late_ring3(c: ManualClock) -> RateLimiter<RingAfterCas, ManualClock> {
    mutant(geometry(3), c)
}

#[test]
fn frozen_instant_admits_exactly_what_is_left() {
    model("sliding_window/frozen 3x1", frozen_three_units(real2, MID));
    model(
        "sliding_window/frozen mixed costs 3x1",
        frozen_mixed_costs(real3, MID),
    );
    model(
        "sliding_window/frozen 2x2",
        frozen_two_calls_each(real3, MID),
    );
}

#[test]
fn slot_rollover_racing_admissions() {
    model(
        "sliding_window/slot rollover at a frozen instant 3x1",
        slot_rollover_at_a_frozen_instant(real3),
    );
    model(
        "sliding_window/rollover racing a clock advance",
        rollover_racing_admissions(real2),
    );
}

#[test]
fn clock_moves_racing_admissions() {
    model(
        "sliding_window/expiry racing a clock advance",
        expiry_racing_admissions(real2),
    );
    model(
        "sliding_window/clock step back",
        clock_step_back_racing_admissions(real2),
    );
}

#[test]
fn mutex_twin_passes_the_same_models() {
    model(
        "sliding_window/twin frozen 3x1",
        frozen_three_units(twin2, MID),
    );
    model(
        "sliding_window/twin frozen mixed costs 3x1",
        frozen_mixed_costs(twin3, MID),
    );
    model(
        "sliding_window/twin frozen 2x2",
        frozen_two_calls_each(twin3, MID),
    );
    model(
        "sliding_window/twin slot rollover at a frozen instant 3x1",
        slot_rollover_at_a_frozen_instant(twin3),
    );
    model(
        "sliding_window/twin rollover racing a clock advance",
        rollover_racing_admissions(twin2),
    );
    model(
        "sliding_window/twin expiry racing a clock advance",
        expiry_racing_admissions(twin2),
    );
    model(
        "sliding_window/twin clock step back",
        clock_step_back_racing_admissions(twin2),
    );
}

#[test]
fn relaxed_head_mutant_is_caught() {
    expect_caught(
        "sliding_window/Relaxed head load, slot rollover 3x1",
        NOT_SERIALIZABLE,
        slot_rollover_at_a_frozen_instant(relaxed3),
    );
    expect_caught(
        "sliding_window/Relaxed head load, rollover racing a clock advance",
        "over the limit",
        rollover_racing_admissions(relaxed2),
    );
}

#[test]
fn ring_write_after_cas_mutant_is_caught() {
    expect_caught(
        "sliding_window/ring write after the CAS, slot rollover 3x1",
        NOT_SERIALIZABLE,
        slot_rollover_at_a_frozen_instant(late_ring3),
    );
    expect_caught(
        "sliding_window/ring write after the CAS, rollover racing a clock advance",
        "over the limit",
        rollover_racing_admissions(late_ring2),
    );
}

/// Limit 3, slot 1 holds 1. One thread takes 2 more while another refunds 1, both in slot
/// 1: in either serial order the take passes, the refund gives 1 back and 1 is left; so in
/// every interleaving (a refund that overwrote the head instead of compare-exchanging it
/// would lose the take, leaving 3).
fn refund_racing_an_admission<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    move || {
        let clock = ManualClock::new();
        clock.set(SLOT1);
        let limiter = loom::sync::Arc::new(make(clock.clone()));
        assert!(limiter.try_acquire().is_allowed());
        let taker = {
            let limiter = limiter.clone();
            loom::thread::spawn(move || limiter.try_acquire_n(2).is_allowed())
        };
        let given = limiter.refund(1);
        assert!(taker.join().unwrap(), "the take was denied");
        assert_eq!(given, 1, "the refund gave back {given}");
        assert_eq!(limiter.peek(0).remaining(), 1, "a charge was lost or kept");
    }
}

#[test]
fn a_refund_racing_an_admission_loses_neither() {
    model(
        "sliding_window/refund racing admission",
        refund_racing_an_admission(real3),
    );
    model(
        "sliding_window/refund racing admission (twin)",
        refund_racing_an_admission(twin3),
    );
}
