//! Loom models of `Limits`: racing groups at a frozen instant admit what some serial order
//! admits, leave every member charged by exactly the admitted units (a rollback after a lost
//! race gives back its own charge and nothing else), and never go over a member's quota when
//! the clock moves. The planted rollback that restores the word it replaced (erasing an
//! admission made after its charge) must fail.
//!
//! A sliding-window member (limit 2 per 2 s in 2 slots of 1 s: an admission in slot `e`
//! counts until slot `e + 3` begins) beside a fixed window: movers of its head racing at a
//! frozen instant, and checks racing a clock move across a slot boundary while a rollback is
//! in flight. The planted sliding rollback that subtracts from the head whatever its slot
//! (handing a unit out twice once the head has moved on) must fail, and so must a peek that
//! loads the sliding head `Relaxed` (it may see the moved head without the ring entry).
#![cfg(tollgate_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom_tests::{admitted_units, expect_caught, model, scenario, Calls, Step};
use tollgate::__loom::{
    planted_any_slot_rollback, planted_relaxed_sliding_head, planted_store_rollback,
    planted_whole_charge_rollback, GroupModel,
};
use tollgate::{Limiter, Limits, ManualClock, Member, Quota};

use Step::{Acquire, SetClock};

const AT: Duration = Duration::from_millis(3_500);
const FOUR: Duration = Duration::from_secs(4);

/// A bucket of 3 per second and a window of 2 per second: the window is the tighter.
fn members() -> [Arc<Member>; 2] {
    [
        Arc::new(Member::token_bucket(Quota::per_second(3).expect("quota"))),
        Arc::new(Member::fixed_window(Quota::per_second(2).expect("quota"))),
    ]
}

fn group(clock: ManualClock) -> GroupModel {
    GroupModel::sound(clock, members())
}

fn mutant(clock: ManualClock) -> GroupModel {
    planted_store_rollback(clock, members())
}

/// What a member has left now.
fn left(member: &Arc<Member>, clock: &ManualClock) -> u64 {
    Limits::try_new(clock.clone(), [member.clone()])
        .expect("one member")
        .try_acquire_n(0)
        .remaining()
}

/// What each of the group's two members has left now.
fn left_in_each(limits: &GroupModel, clock: &ManualClock) -> (u64, u64) {
    let m = limits.members();
    (left(&m[0], clock), left(&m[1], clock))
}

/// Two threads asking for 1 and 2 at a frozen instant with the window at 1 left: whichever
/// peeks first, both may pass the peek and race on the charges; the loser of the window's
/// charge rolls the bucket back. Afterwards each member is charged by exactly the admitted
/// units.
fn charged_exactly(make: fn(ManualClock) -> GroupModel) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        AT,
        &[SetClock(AT), Acquire(1)],
        &[&[Acquire(1)], &[Acquire(1)]],
        |clock: &ManualClock, limits: &GroupModel, calls: &[Calls]| {
            let admitted = admitted_units(calls);
            assert_eq!(admitted, 1, "the window had 1 left: {calls:?}");
            assert_eq!(
                left_in_each(limits, clock),
                (3 - 1 - admitted, 0),
                "a member is not charged by exactly what was admitted: {calls:?}"
            );
        },
    )
}

/// Racing checks at a frozen instant from fresh members: the units admitted are those of
/// some serial order (one of `serial`), every member is charged by exactly those units, and
/// no admission reports more remaining than it would have had first and alone.
///
/// Only the admissions are serializable, not every field of every decision: a check may
/// report a member's remaining while another check's reservation on it is in flight and is
/// later rolled back (conservative: it reports less, never more; loom finds such runs).
fn frozen_all_or_nothing(
    threads: &'static [&'static [Step]],
    serial: &'static [u64],
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        group,
        AT,
        &[],
        threads,
        move |clock: &ManualClock, limits: &GroupModel, calls: &[Calls]| {
            let admitted = admitted_units(calls);
            assert!(
                serial.contains(&admitted),
                "no serial order admits {admitted}: {calls:?}"
            );
            assert_eq!(
                left_in_each(limits, clock),
                (3 - admitted, 2 - admitted),
                "charged wrongly: {calls:?}"
            );
            // Never more remaining than if the check had run first and alone.
            for (n, d) in calls.iter().flatten().filter(|(_, d)| d.is_allowed()) {
                assert!(d.remaining() <= 2 - n, "remaining too high: {calls:?}");
            }
        },
    )
}

#[test]
fn frozen_instant_admits_as_some_serial_order() {
    // Three units against a window of 2: exactly 2 pass.
    model(
        "group/frozen 3x1",
        frozen_all_or_nothing(&[&[Acquire(1)], &[Acquire(1)], &[Acquire(1)]], &[2]),
    );
    // 2 and 1 against a window of 2: the 2 first (2 units), or the 1 first (1 unit).
    model(
        "group/frozen 2,1",
        frozen_all_or_nothing(&[&[Acquire(2)], &[Acquire(1)]], &[1, 2]),
    );
}

#[test]
fn a_lost_race_rolls_back_exactly_its_own_charge() {
    model("group/charged exactly", charged_exactly(group));
}

#[test]
fn the_clock_moving_never_puts_a_member_over_its_quota() {
    // Window 3 (from 3.5 s) has 1 left; one thread moves to window 4 and asks for 2 while
    // another asks for 1 at whichever window it reads. The bucket (3 per second) is never
    // the limit here: the window counts at most 2 per window, and every admission says which
    // window counted it by its reset.
    model(
        "group/clock advance",
        scenario(
            group,
            AT,
            &[SetClock(AT), Acquire(1)],
            &[&[SetClock(FOUR), Acquire(2)], &[Acquire(1)]],
            |clock: &ManualClock, limits: &GroupModel, calls: &[Calls]| {
                let in_window_3 = calls
                    .iter()
                    .flatten()
                    .filter(|(_, d)| {
                        d.is_allowed() && d.reset_after() <= Duration::from_millis(500)
                    })
                    .map(|(n, _)| n)
                    .sum::<u64>();
                assert!(in_window_3 <= 1, "window 3 over its limit: {calls:?}");
                clock.set(FOUR);
                let in_window_4: u64 = calls
                    .iter()
                    .flatten()
                    .filter(|(_, d)| d.is_allowed() && d.reset_after() > Duration::from_millis(500))
                    .map(|(n, _)| n)
                    .sum();
                assert_eq!(
                    in_window_4 + left(&limits.members()[1], clock),
                    2,
                    "window 4 over its limit or a unit lost: {calls:?}"
                );
            },
        ),
    );
}

/// A bucket of 1 per second with a burst of 2, then a window with 1 left for the whole model.
fn refill_members() -> [Arc<Member>; 2] {
    let bucket = Quota::per_second(1)
        .and_then(|q| q.with_burst(2))
        .expect("quota");
    [
        Arc::new(Member::token_bucket(bucket)),
        Arc::new(Member::fixed_window(Quota::per_hour(1).expect("quota"))),
    ]
}

fn refill_group(clock: ManualClock) -> GroupModel {
    GroupModel::sound(clock, refill_members())
}

fn whole_charge_mutant(clock: ManualClock) -> GroupModel {
    planted_whole_charge_rollback(clock, refill_members())
}

const HOUR: Duration = Duration::from_secs(3_600);
const LATE: Duration = Duration::from_millis(900);
const SETTLE: Duration = Duration::from_secs(1);

/// One check at 0 s (or at 0.9 s, if it reads the clock after the other moved it) races
/// one at 0.9 s; both may pass the peek, the window admits one, and the other rolls the
/// bucket back, perhaps after the winner built on its charge. Then the bucket alone is
/// drained at 1 s (other groups sharing it).
///
/// Checked on every member: the window admitted at most its 1 and counts exactly what it
/// admitted; the bucket's admissions (each at its clock reading, told by the window's reset,
/// and the drain's at 1 s) never exceed `burst + ⌊(t1 - t0) × rate⌋` in any interval
/// `[t0, t1]`.
fn bucket_bound_across_a_refill(
    make: fn(ManualClock) -> GroupModel,
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        Duration::ZERO,
        &[],
        &[&[Acquire(1)], &[SetClock(LATE), Acquire(1)]],
        |clock: &ManualClock, limits: &GroupModel, calls: &[Calls]| {
            let m = limits.members();
            let admitted = admitted_units(calls);
            assert!(admitted <= 1, "the window over its 1: {calls:?}");
            assert_eq!(
                left(&m[1], clock),
                1 - admitted,
                "window charged wrongly: {calls:?}"
            );
            // Each admission's clock reading: the window (0 left) is the tighter member, so
            // the decision's reset is the hour's end minus the reading.
            let mut at: Vec<Duration> = calls
                .iter()
                .flatten()
                .filter(|(_, d)| d.is_allowed())
                .map(|(_, d)| HOUR - d.reset_after())
                .collect();
            clock.set(SETTLE);
            let alone = Limits::try_new(clock.clone(), [m[0].clone()]).expect("one member");
            at.extend(std::iter::repeat_n(
                SETTLE,
                loom_tests::drain(&alone, 4) as usize,
            ));
            for &t0 in &at {
                for &t1 in at.iter().filter(|&&t1| t1 >= t0) {
                    let within = at.iter().filter(|&&t| t0 <= t && t <= t1).count() as u64;
                    let bound = 2 + (t1 - t0).as_secs();
                    assert!(
                        within <= bound,
                        "the bucket over its bound: {within} in [{t0:?}, {t1:?}]: {at:?} {calls:?}"
                    );
                }
            }
        },
    )
}

#[test]
fn a_bucket_rollback_never_gives_back_what_refilled() {
    model(
        "group/bucket bound across a refill",
        bucket_bound_across_a_refill(refill_group),
    );
}

#[test]
fn a_whole_charge_rolled_back_before_its_tat_is_caught() {
    expect_caught(
        "group/whole charge back before its tat, bucket bound across a refill",
        "the bucket over its bound",
        bucket_bound_across_a_refill(whole_charge_mutant),
    );
}

#[test]
fn restoring_the_replaced_word_is_caught() {
    expect_caught(
        "group/store rollback, charged exactly",
        "a member is not charged by exactly what was admitted",
        charged_exactly(mutant),
    );
}

const SLOT0: Duration = Duration::from_millis(500);
const SLOT1: Duration = Duration::from_millis(1_500);
/// Slot 3 begins at 3 s: slot 0 has left the window, slot 1 still counts.
const SLOT3: Duration = Duration::from_millis(3_500);

/// A sliding window of `limit` per 2 s in 2 slots.
fn sliding(limit: u64) -> Arc<Member> {
    let quota = Quota::try_new(limit, Duration::from_secs(2)).expect("quota");
    Arc::new(Member::try_sliding_window_with_slots(quota, 2).expect("slots"))
}

/// One thread moves the clock into slot 1 and checks; one (or two) check at either slot.
const TWO_ACROSS: &[&[Step]] = &[&[SetClock(SLOT1), Acquire(1)], &[Acquire(1)]];
const THREE_ACROSS: &[&[Step]] = &[&[SetClock(SLOT1), Acquire(1)], &[Acquire(1)], &[Acquire(1)]];

/// The sliding member (limit 3) and a bucket of 10 per second that never limits here.
fn rollover_members() -> [Arc<Member>; 2] {
    let bucket = Arc::new(Member::token_bucket(Quota::per_second(10).expect("quota")));
    [sliding(3), bucket]
}

fn rollover_group(clock: ManualClock) -> GroupModel {
    GroupModel::sound(clock, rollover_members())
}

fn relaxed_head_mutant(clock: ManualClock) -> GroupModel {
    planted_relaxed_sliding_head(clock, rollover_members())
}

/// The sliding member (limit 2) first, then a fixed window with 1 left for the whole model:
/// two checks that both pass the peek race on the window, and the loser rolls the sliding
/// member back.
fn boundary_members() -> [Arc<Member>; 2] {
    [
        sliding(2),
        Arc::new(Member::fixed_window(Quota::per_hour(1).expect("quota"))),
    ]
}

fn boundary_group(clock: ManualClock) -> GroupModel {
    GroupModel::sound(clock, boundary_members())
}

fn any_slot_mutant(clock: ManualClock) -> GroupModel {
    planted_any_slot_rollback(clock, boundary_members())
}

/// Limit 3; slot 0 holds 2 (and the bucket 2 of its 10); three checks at 1.5 s (slot 1) race
/// to move the head past slot 0 (each mover writes slot 0 to the ring before its head
/// compare-exchange) and to charge: exactly 1 passes, and each member is charged by exactly
/// that (a check that saw the moved head but not slot 0's ring entry would admit 3).
fn sliding_rollover_at_a_frozen_instant(
    make: fn(ManualClock) -> GroupModel,
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        SLOT1,
        &[SetClock(SLOT0), Acquire(2)],
        &[&[Acquire(1)], &[Acquire(1)], &[Acquire(1)]],
        |clock: &ManualClock, limits: &GroupModel, calls: &[Calls]| {
            let admitted = admitted_units(calls);
            assert_eq!(admitted, 1, "slot 0's 2 still count: {calls:?}");
            assert_eq!(
                left_in_each(limits, clock),
                (0, 10 - admitted),
                "charged wrongly: {calls:?}"
            );
        },
    )
}

/// At 0.5 s (slot 0) one check moves the clock to 1.5 s (slot 1) and asks for 1 while the
/// others ask for 1 at whichever slot they read. Both may pass the peek; the window admits one of
/// them and the other rolls the sliding member back, perhaps after the head has moved from
/// the slot its charge was counted in (then the charge stays counted in slot 0: lost, never
/// handed out twice).
///
/// Checked: at 1.5 s the sliding member counts every admission and at most the one lost
/// rollback on top; at 3.5 s (slot 0 gone) it still counts the admission of the check that
/// read slot 1, and nothing else it had not admitted there.
fn checks_across_a_slot_boundary(
    make: fn(ManualClock) -> GroupModel,
    threads: &'static [&'static [Step]],
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        SLOT0,
        &[],
        threads,
        |clock: &ManualClock, limits: &GroupModel, calls: &[Calls]| {
            let admitted = admitted_units(calls);
            assert_eq!(admitted, 1, "the window had 1: {calls:?}");
            let sliding = &limits.members()[0];
            let now = left(sliding, clock);
            assert!(
                now <= 2 - admitted && now + 1 >= 2 - admitted,
                "at 1.5 s the sliding member has {now} left: {calls:?}"
            );
            // The first thread read slot 1, so its admission counts until 4 s; the other's
            // counts in slot 0 or 1.
            let in_slot_1 = u64::from(calls[0][0].1.is_allowed());
            clock.set(SLOT3);
            let later = left(sliding, clock);
            assert!(
                later <= 2 - in_slot_1,
                "a unit handed out twice: {later} left at 3.5 s: {calls:?}"
            );
            assert!(
                later >= 2 - admitted,
                "more than admitted still counts: {calls:?}"
            );
        },
    )
}

#[test]
fn sliding_member_movers_race_at_a_frozen_instant() {
    model(
        "group/sliding rollover at a frozen instant 3x1",
        sliding_rollover_at_a_frozen_instant(rollover_group),
    );
}

#[test]
fn sliding_member_checks_race_across_a_slot_boundary() {
    model(
        "group/sliding checks across a slot boundary",
        checks_across_a_slot_boundary(boundary_group, TWO_ACROSS),
    );
    model(
        "group/sliding checks across a slot boundary, 3 threads",
        checks_across_a_slot_boundary(boundary_group, THREE_ACROSS),
    );
}

#[test]
fn a_sliding_rollback_from_any_slot_is_caught() {
    expect_caught(
        "group/sliding rollback whatever the slot, checks across a slot boundary",
        "a unit handed out twice",
        checks_across_a_slot_boundary(any_slot_mutant, TWO_ACROSS),
    );
}

#[test]
fn a_sliding_head_peeked_relaxed_is_caught() {
    expect_caught(
        "group/sliding head peeked Relaxed, rollover at a frozen instant 3x1",
        "slot 0's 2 still count",
        sliding_rollover_at_a_frozen_instant(relaxed_head_mutant),
    );
}
