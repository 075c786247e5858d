//! Loom models of the sliding-window counter: a head word (slot, the older slots' sum, the
//! window's total) plus a ring of finished slots, written with `fetch_max` before the head CAS
//! (`Release`) and read after an `Acquire` head load by the thread that moves the head. The
//! rollover models are where a `Relaxed` instead of `Acquire`/`Release`, or a ring write after
//! the CAS, must show; the delayed-mover model is where a plain ring store (a mover that lost
//! its CAS overwriting the final count with the smaller one it loaded) must show. Every mutant
//! must fail its models. The mutex twin passes the same models.
//!
//! Geometry of every model: 2 slots of 1 s (period 2 s), so an admission in slot `e` counts
//! until slot `e + 3` begins; ring of 3 entries.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom_tests::mutants::mutant;
use loom_tests::mutants::sliding_window::{RelaxedHead, RingAfterCas, StaleRingStore};
use loom_tests::{
    admitted_units, drain, exactly_admitted_models, expect_caught, frozen, frozen_models, model,
    real_and_twin, scenario, Step, NOT_SERIALIZABLE,
};
use tollgate::__loom::{sliding_window::Geometry, Algo, RateLimiter};
use tollgate::baseline::MutexSlidingWindow;
use tollgate::{Limiter, ManualClock, Quota, SlidingWindow};

use Step::{Acquire, SetClock};

const SLOTS: u32 = 2;
const MID: Duration = Duration::from_millis(3_500);
const SLOT0: Duration = Duration::from_millis(500);
const SLOT1: Duration = Duration::from_millis(1_500);
/// Slot 2: slot 0 still counts (until slot 3 begins).
const SLOT2: Duration = Duration::from_millis(2_500);
/// Slot 3 begins: slot 0's admissions have left the window.
const SLOT3: Duration = Duration::from_secs(3);
const SLOT5: Duration = Duration::from_millis(5_500);
const BACK: Duration = Duration::from_millis(200);

fn quota(limit: u64) -> Quota {
    Quota::try_new(limit, Duration::from_secs(2)).expect("valid quota")
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

exactly_admitted_models! {
    /// Limit 3; slot 0 holds 2. One thread moves the clock into slot 1, acquires (the head moves
    /// to slot 1, slot 0 goes to the ring) and moves the clock into slot 2, while another
    /// acquires: slots 0 and 1 stay in the window, so exactly 1 of the two passes. A thread at
    /// slot 2 moves the head a second time and sums slot 0 from the ring: if it sees the head in
    /// slot 1 but slot 0's entry from before it was written, it counts 1 instead of 3 and admits
    /// too much (what the two ordering mutants do; an admission in the head's slot reads only the
    /// head, so one move alone cannot show them).
    second_move_reads_the_ring:
        SLOT0,
        &[SetClock(SLOT0), Acquire(2)],
        &[
            &[SetClock(SLOT1), Acquire(1), SetClock(SLOT2)],
            &[Acquire(1)],
        ],
        SLOT2,
        1;

    /// Limit 2; slot 0 full. One thread advances the clock to slot 3, where slot 0 has left the
    /// window, while two acquire: racers plus a drain at slot 3 admit exactly 2.
    expiry_racing_admissions:
        SLOT0,
        &[SetClock(SLOT0), Acquire(2)],
        &[&[SetClock(SLOT3)], &[Acquire(1)], &[Acquire(1)]],
        SLOT3,
        2;

    /// Limit 2, 1 left at 5.5 s; one thread steps the clock back to 0.2 s while two acquire:
    /// nothing expires by going back, so racers plus a drain back at 5.5 s admit exactly 1.
    clock_step_back_racing_admissions:
        SLOT5,
        &[SetClock(SLOT5), Acquire(1)],
        &[&[SetClock(BACK)], &[Acquire(1)], &[Acquire(1)]],
        SLOT5,
        1;

    /// Limit 4; slot 0 holds 1. A straggler admits in slot 0 (its clock read before the advance)
    /// while one thread moves the clock into slot 1 and acquires and a third acquires: a mover
    /// may load the head before the straggler's admission, lose its CAS to another mover that
    /// finishes slot 0 with its final count, and only then write slot 0's ring entry with the
    /// count it loaded. All three pass; at slot 2, where slot 0 still counts, the move sums slot
    /// 0 from the ring: a stale entry there admits more than the 4 of the window.
    delayed_mover:
        SLOT0,
        &[SetClock(SLOT0), Acquire(1)],
        &[&[Acquire(1)], &[SetClock(SLOT1), Acquire(1)], &[Acquire(1)]],
        SLOT2,
        3;
}

/// The wide head's unit: limits from `4 × WIDE` up do not fit the slot number and two counts
/// in 64 bits at these slots, so the head is a 128-bit word (under loom, one loom word holding
/// the number of its value: every access still seen with its ordering).
const WIDE: u64 = 1 << 16;
/// The wide models' limit.
const WIDE_LIMIT: u64 = 4 * WIDE;

/// [`delayed_mover`] on the wide head: limit [`WIDE_LIMIT`], every cost `WIDE`; at slot 2 the
/// window is full, so one more unit is denied.
fn delayed_mover_wide<L: Limiter + 'static>(
    make: fn(ManualClock) -> L,
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        SLOT0,
        &[SetClock(SLOT0), Acquire(WIDE)],
        &[
            &[Acquire(WIDE)],
            &[SetClock(SLOT1), Acquire(WIDE)],
            &[Acquire(WIDE)],
        ],
        |clock, limiter, calls| {
            assert_eq!(admitted_units(calls), 3 * WIDE, "lost: {calls:?}");
            clock.set(SLOT2);
            assert!(
                !limiter.try_acquire().is_allowed(),
                "over the limit: {calls:?}"
            );
        },
    )
}

/// The window of `LIMIT` per 2 s.
fn real<const LIMIT: u64>(c: ManualClock) -> SlidingWindow<ManualClock> {
    SlidingWindow::try_with_slots(quota(LIMIT), SLOTS, c).expect("valid slots")
}
/// Its mutex twin.
fn twin<const LIMIT: u64>(c: ManualClock) -> MutexSlidingWindow<ManualClock> {
    MutexSlidingWindow::try_with_slots(quota(LIMIT), SLOTS, c).expect("valid slots")
}
/// The window with the planted mutant `M`.
fn planted<M: Algo<Params = Geometry>, const LIMIT: u64>(
    c: ManualClock,
) -> RateLimiter<M, ManualClock> {
    let g = Geometry::new(&quota(LIMIT), SLOTS).expect("valid slots");
    assert!(
        LIMIT < WIDE_LIMIT || !g.narrow(),
        "the wide models run on a wide head"
    );
    mutant(g, c)
}

#[test]
fn frozen_instant_admits_exactly_what_is_left() {
    frozen_models("sliding_window/", real::<2>, real::<3>, MID);
    frozen_models("sliding_window/twin ", twin::<2>, twin::<3>, MID);
}

#[test]
fn slot_rollover_racing_admissions() {
    real_and_twin! { "sliding_window/", real, twin;
        "slot rollover at a frozen instant 3x1": slot_rollover_at_a_frozen_instant(3);
        "rollover racing a clock advance": rollover_racing_admissions(2);
        "second move reads the ring 2x": second_move_reads_the_ring(3);
    }
}

#[test]
fn clock_moves_racing_admissions() {
    real_and_twin! { "sliding_window/", real, twin;
        "expiry racing a clock advance": expiry_racing_admissions(2);
        "clock step back": clock_step_back_racing_admissions(2);
    }
}

#[test]
fn a_delayed_mover_never_lowers_a_finished_slot() {
    real_and_twin! { "sliding_window/", real, twin;
        "delayed mover 3x1": delayed_mover(4);
    }
    model(
        "sliding_window/wide head, delayed mover 3x1",
        delayed_mover_wide(real::<WIDE_LIMIT>),
    );
    model(
        "sliding_window/twin wide, delayed mover 3x1",
        delayed_mover_wide(twin::<WIDE_LIMIT>),
    );
}

#[test]
fn stale_ring_store_mutant_is_caught() {
    expect_caught(
        "sliding_window/ring stored, not fetch_max, delayed mover 3x1",
        "over the limit",
        delayed_mover(planted::<StaleRingStore, 4>),
    );
    expect_caught(
        "sliding_window/ring stored, not fetch_max, wide head, delayed mover 3x1",
        "over the limit",
        delayed_mover_wide(planted::<StaleRingStore, WIDE_LIMIT>),
    );
}

/// An ordering mutant (`RelaxedHead`, `RingAfterCas`: a mover may read a ring entry from
/// before it was written) over-admits in both rollover models that move the head past a
/// finished slot.
fn ordering_mutant_is_caught<M: Algo<Params = Geometry> + 'static>(mutant: &str) {
    expect_caught(
        &format!("sliding_window/{mutant}, slot rollover 3x1"),
        NOT_SERIALIZABLE,
        slot_rollover_at_a_frozen_instant(planted::<M, 3>),
    );
    expect_caught(
        &format!("sliding_window/{mutant}, second move reads the ring 2x"),
        "over the limit",
        second_move_reads_the_ring(planted::<M, 3>),
    );
}

#[test]
fn relaxed_head_mutant_is_caught() {
    ordering_mutant_is_caught::<RelaxedHead>("Relaxed head load");
}

#[test]
fn ring_write_after_cas_mutant_is_caught() {
    ordering_mutant_is_caught::<RingAfterCas>("ring write after the CAS");
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
        refund_racing_an_admission(real::<3>),
    );
    model(
        "sliding_window/refund racing admission (twin)",
        refund_racing_an_admission(twin::<3>),
    );
}
