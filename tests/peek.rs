//! `peek(n)`: the answer `try_acquire_n(n)` would give, fields included, charging nothing,
//! for every limiter and twin, and for a group.

mod common;

use std::sync::Arc;

use common::{all, ms, Rng};
use tollgate::{Limiter, Limits, ManualClock, Member, Quota};

#[test]
fn peek_answers_as_the_acquire_that_follows_and_charges_nothing() {
    let quota = Quota::new(6, ms(1000)).unwrap().with_burst(4).unwrap();
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
    let group = Limits::new(
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
