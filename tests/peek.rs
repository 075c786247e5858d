//! `peek(n)`: the answer `try_acquire_n(n)` would give, fields included, charging nothing;
//! `refund(n)`: the same on every limiter and its twin, never beyond capacity, exact right
//! after the charge; for every limiter and twin, and for a group.

mod common;

use std::sync::Arc;

use common::{all, ms, Rng};
use tollgate::{Limiter, Limits, ManualClock, Member, Quota};

#[test]
fn peek_answers_as_the_acquire_that_follows_and_charges_nothing() {
    let quota = Quota::try_new(6, ms(1000)).unwrap().with_burst(4).unwrap();
    // Two copies of every limiter on two clocks moved in step: one is peeked before each
    // request, the other never; their answers to the requests must not differ.
    for ((peeked, clock), (plain, plain_clock)) in all(quota).into_iter().zip(all(quota)) {
        let mut rng = Rng(7);
        let (mut allowed, mut denied) = (0, 0);
        for step in 0..3_000 {
            let dt = ms(rng.below(200));
            clock.advance(dt);
            plain_clock.advance(dt);
            let n = rng.below(9);
            let look = peeked.limiter.peek(n);
            assert_eq!(peeked.limiter.peek(n), look, "{} step {step}", peeked.name);
            for other in 0..9 {
                let _ = peeked.limiter.peek(other);
            }
            let got = peeked.limiter.try_acquire_n(n);
            assert_eq!(got, look, "{} step {step}: peek {look:?}", peeked.name);
            assert_eq!(
                got,
                plain.limiter.try_acquire_n(n),
                "{} step {step}",
                peeked.name
            );
            if got.is_allowed() {
                allowed += 1;
            } else {
                denied += 1;
            }
        }
        assert!(
            allowed > 300 && denied > 300,
            "{}: {allowed} / {denied}",
            peeked.name
        );
    }
}

#[test]
fn a_group_peek_is_its_check_without_the_charge() {
    let clock = ManualClock::new();
    let group = Limits::try_new(
        clock.clone(),
        [
            Arc::new(Member::token_bucket(Quota::per_second(5).unwrap())),
            Arc::new(Member::fixed_window(Quota::per_second(3).unwrap())),
        ],
    )
    .unwrap();
    let mut rng = Rng(3);
    for step in 0..2_000 {
        clock.advance(ms(rng.below(300)));
        let n = rng.below(5);
        let look = group.peek_explained(n);
        assert_eq!(group.peek_explained(n), look);
        assert_eq!(group.try_acquire_explained(n), look, "step {step}");
    }
}

/// A limiter written elsewhere, with only `try_acquire_n`: the default peek.
struct Outside(tollgate::TokenBucket<ManualClock>);
impl Limiter for Outside {
    fn try_acquire_n(&self, n: u64) -> tollgate::Decision {
        self.0.try_acquire_n(n)
    }
}

#[test]
fn the_default_peek_is_right_about_allowed_and_charges_nothing() {
    let clock = ManualClock::new();
    let l = Outside(tollgate::TokenBucket::with_clock(
        Quota::per_second(3).unwrap(),
        clock.clone(),
    ));
    let _ = l.try_acquire_n(2);
    let d = l.peek(1);
    assert!(d.is_allowed() && d.remaining() == 0);
    let d = l.peek(2);
    assert!(!d.is_allowed() && d.retry_after().is_none() && d.remaining() == 1);
    assert!(l.try_acquire().is_allowed(), "peeking took nothing");
    assert!(!l.try_acquire().is_allowed());
}

#[test]
fn refunds_match_the_twins_and_never_pass_the_capacity() {
    let quota = Quota::try_new(6, ms(1000)).unwrap().with_burst(4).unwrap();
    for pair in common::ALGOS.map(|algo| {
        let clock = ManualClock::new();
        (common::pair(algo, quota, &clock), clock)
    }) {
        let ([lock_free, twin], clock) = pair;
        let capacity = lock_free.limiter.peek(0).remaining();
        let mut rng = Rng(5);
        let mut given_total = 0;
        for step in 0..3_000 {
            clock.advance(ms(rng.below(150)));
            let n = rng.below(5);
            if rng.below(3) == 0 {
                let given = lock_free.limiter.refund(n);
                assert_eq!(
                    given,
                    twin.limiter.refund(n),
                    "{} step {step}",
                    lock_free.name
                );
                assert!(given <= n);
                given_total += given;
            } else {
                let d = lock_free.limiter.try_acquire_n(n);
                assert_eq!(
                    d,
                    twin.limiter.try_acquire_n(n),
                    "{} step {step}",
                    lock_free.name
                );
            }
            let left = lock_free.limiter.peek(0).remaining();
            assert!(
                left <= capacity,
                "{} step {step}: {left} > {capacity}",
                lock_free.name
            );
        }
        match lock_free.algo {
            common::Algo::TokenBucket | common::Algo::FixedWindow | common::Algo::SlidingWindow => {
                assert!(given_total > 100, "{}: {given_total}", lock_free.name)
            }
            _ => assert_eq!(given_total, 0, "{} refunds nothing", lock_free.name),
        }
    }
}

#[test]
fn a_refund_right_after_the_charge_undoes_it_exactly() {
    let quota = Quota::per_second(5).unwrap();
    for (s, clock) in all(quota) {
        if s.algo == common::Algo::SlidingLog {
            continue;
        }
        clock.advance(ms(250));
        let _ = s.limiter.try_acquire_n(2);
        let before = s.limiter.peek(3);
        assert!(s.limiter.try_acquire_n(3).is_allowed(), "{}", s.name);
        assert_eq!(s.limiter.refund(3), 3, "{}", s.name);
        assert_eq!(s.limiter.peek(3), before, "{}: as if never charged", s.name);
        // A full limiter has nothing to take back.
        clock.advance(ms(2_000));
        assert_eq!(s.limiter.refund(1), 0, "{}", s.name);
    }
}

#[test]
fn a_window_refund_after_the_window_moved_on_gives_nothing() {
    let clock = ManualClock::new();
    let w = tollgate::FixedWindow::with_clock(Quota::per_second(3).unwrap(), clock.clone());
    assert!(w.try_acquire_n(3).is_allowed());
    clock.advance(ms(1_000));
    assert_eq!(w.refund(3), 0, "the charge was in the finished window");
    assert_eq!(w.peek(0).remaining(), 3);
}

#[test]
fn a_group_refund_gives_back_to_every_member() {
    let clock = ManualClock::new();
    let members = [
        Arc::new(Member::token_bucket(Quota::per_second(5).unwrap())),
        Arc::new(Member::fixed_window(Quota::per_second(3).unwrap())),
    ];
    let group = Limits::try_new(clock.clone(), members.clone()).unwrap();
    assert!(group.try_acquire_n(3).is_allowed());
    assert!(!group.peek(1).is_allowed());
    assert_eq!(group.refund(2), 2);
    assert_eq!(group.peek(0).remaining(), 2);
    assert_eq!(
        group.refund(5),
        1,
        "the window had only 1 left to give back"
    );
}
