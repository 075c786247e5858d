//! Loom models of `Limits`: racing groups at a frozen instant admit what some serial order
//! admits, leave every member charged by exactly the admitted units (a rollback after a lost
//! race gives back its own charge and nothing else), and never go over a member's quota when
//! the clock moves. The planted rollback that restores the word it replaced (erasing an
//! admission made after its charge) must fail.
#![cfg(tollgate_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom_tests::{admitted_units, expect_caught, model, scenario, Calls, Step};
use tollgate::__loom::planted_store_rollback;
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

fn group(clock: ManualClock) -> Limits<ManualClock> {
    Limits::new(clock, members()).expect("two members")
}

fn mutant(clock: ManualClock) -> Limits<ManualClock> {
    planted_store_rollback(clock, members())
}

/// What a member has left now.
fn left(member: &Arc<Member>, clock: &ManualClock) -> u64 {
    Limits::new(clock.clone(), [member.clone()])
        .expect("one member")
        .try_acquire_n(0)
        .remaining()
}

/// Two threads asking for 1 and 2 at a frozen instant with the window at 1 left: whichever
/// peeks first, both may pass the peek and race on the charges; the loser of the window's
/// charge rolls the bucket back. Afterwards each member is charged by exactly the admitted
/// units.
fn charged_exactly(
    make: fn(ManualClock) -> Limits<ManualClock>,
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        AT,
        &[SetClock(AT), Acquire(1)],
        &[&[Acquire(1)], &[Acquire(1)]],
        |clock: &ManualClock, limits: &Limits<ManualClock>, calls: &[Calls]| {
            let admitted = admitted_units(calls);
            assert_eq!(admitted, 1, "the window had 1 left: {calls:?}");
            let m = limits.members();
            assert_eq!(
                (left(&m[0], clock), left(&m[1], clock)),
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
        move |clock: &ManualClock, limits: &Limits<ManualClock>, calls: &[Calls]| {
            let admitted = admitted_units(calls);
            assert!(
                serial.contains(&admitted),
                "no serial order admits {admitted}: {calls:?}"
            );
            let m = limits.members();
            let left = (left(&m[0], clock), left(&m[1], clock));
            assert_eq!(
                left,
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
            |clock: &ManualClock, limits: &Limits<ManualClock>, calls: &[Calls]| {
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

#[test]
fn restoring_the_replaced_word_is_caught() {
    expect_caught(
        "group/store rollback, charged exactly",
        "a member is not charged by exactly what was admitted",
        charged_exactly(mutant),
    );
}
