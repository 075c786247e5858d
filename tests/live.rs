//! Live quota changes: a loosened quota takes effect at once, a tightened one counts what was
//! used up to its burst, a change never refills; each live limiter against a reference of the
//! carried level over random runs of requests, clock steps and changes; typed refusals that
//! keep the quota; changes racing requests on real threads.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{bucket_changes, burst_quota as quota, ms, Rng};
use tollgate::{
    Clock, FixedWindow, Limiter, LiveFixedWindow, LiveSlidingWindow, LiveTokenBucket, ManualClock,
    Quota, QuotaError, SlidingWindow, TokenBucket,
};
use tollgate_test_support::StallClock;

fn bucket(q: Quota) -> (LiveTokenBucket<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (LiveTokenBucket::with_clock(q, clock.clone()), clock)
}

#[test]
fn a_loosened_bucket_takes_effect_at_once() {
    let (b, _) = bucket(quota(10, 1_000, 10));
    assert!(b.try_acquire_n(10).is_allowed());
    assert!(!b.try_acquire().is_allowed());
    b.set_quota(quota(100, 1_000, 100)).unwrap();
    // 10 used of 100: 90 at once, then one every 10 ms.
    assert!(b.try_acquire_n(90).is_allowed());
    let denied = b.try_acquire();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Some(ms(10)));
}

#[test]
fn a_tightened_bucket_counts_what_was_used_up_to_its_burst() {
    let (b, clock) = bucket(quota(100, 1_000, 100));
    assert!(b.try_acquire_n(50).is_allowed());
    b.set_quota(quota(10, 1_000, 10)).unwrap();
    // 50 used, more than the new burst: empty, the next token in 100 ms.
    let d = b.try_acquire();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Some(ms(100)));
    clock.advance(ms(100));
    assert!(b.try_acquire().is_allowed());
    assert!(!b.try_acquire().is_allowed());

    // 3 used of 100 is 3 used of 10: 7 left.
    let (b, _) = bucket(quota(100, 1_000, 100));
    assert!(b.try_acquire_n(3).is_allowed());
    b.set_quota(quota(10, 1_000, 10)).unwrap();
    assert_eq!(b.peek(7).remaining(), 0);
    assert!(b.peek(7).is_allowed());
    assert!(!b.peek(8).is_allowed());
}

#[test]
fn a_change_never_refills() {
    // Drained, then the same quota again: still drained.
    let (b, _) = bucket(quota(5, 1_000, 5));
    assert!(b.try_acquire_n(5).is_allowed());
    b.set_quota(quota(5, 1_000, 5)).unwrap();
    assert!(!b.try_acquire().is_allowed());
    // A larger burst at the same rate: the 5 used stay used.
    b.set_quota(quota(5, 1_000, 20)).unwrap();
    assert!(b.try_acquire_n(15).is_allowed());
    assert!(!b.try_acquire().is_allowed());
    // And a full bucket stays full, to the new burst.
    let (b, _) = bucket(quota(10, 1_000, 10));
    b.set_quota(quota(100, 1_000, 100)).unwrap();
    assert!(b.try_acquire_n(100).is_allowed());
}

#[test]
fn a_fraction_of_a_token_carries_over() {
    let (b, clock) = bucket(quota(10, 1_000, 2));
    assert!(b.try_acquire_n(2).is_allowed());
    clock.advance(ms(50)); // 1.5 tokens used
    b.set_quota(quota(1, 1_000, 2)).unwrap(); // 1.5 tokens of 1/s: 1.5 s of debt
    clock.advance(ms(499));
    assert!(!b.try_acquire().is_allowed());
    clock.advance(ms(1));
    assert!(b.try_acquire().is_allowed());
}

/// The carried level, by hand: a bucket in whole ns (every quota here has an integral interval).
#[derive(Debug)]
struct Reference {
    interval: u64,
    capacity: u64,
    tat: u64,
}

impl Reference {
    fn new(q: Quota) -> Self {
        let interval = q.period().as_nanos() as u64 / q.limit();
        Reference {
            interval,
            capacity: interval * q.burst(),
            tat: 0,
        }
    }

    fn acquire(&mut self, now: u64, n: u64) -> bool {
        if n * self.interval > self.capacity {
            return false;
        }
        let tat = self.tat.max(now) + n * self.interval;
        let ok = tat - now <= self.capacity;
        if ok && n > 0 {
            self.tat = tat;
        }
        ok
    }

    fn set(&mut self, q: Quota, now: u64) {
        let new = Reference::new(q);
        let debt = self.tat.saturating_sub(now);
        let carried = (debt * new.interval)
            .div_ceil(self.interval)
            .min(new.capacity);
        *self = Reference {
            tat: if debt == 0 { self.tat } else { now + carried },
            ..new
        };
    }
}

#[test]
fn a_live_bucket_answers_as_the_carried_reference_through_random_changes() {
    let quotas = bucket_changes();
    // Shorter under miri, which is a thousand times slower.
    for seed in 1..=if cfg!(miri) { 2 } else { 8 } {
        let mut rng = Rng(seed);
        let (b, clock) = bucket(quotas[0]);
        let mut reference = Reference::new(quotas[0]);
        let (mut admitted, mut denied) = (0, 0);
        for step in 0..if cfg!(miri) { 400 } else { 4_000 } {
            match rng.below(10) {
                0 => {
                    let q = quotas[rng.below(quotas.len() as u64) as usize];
                    b.set_quota(q).unwrap();
                    reference.set(q, clock.now_nanos());
                }
                1..=3 => clock.advance(Duration::from_nanos(rng.below(300_000_000))),
                _ => {
                    let n = rng.below(4);
                    let d = b.try_acquire_n(n);
                    let expected = reference.acquire(clock.now_nanos(), n);
                    assert_eq!(d.is_allowed(), expected, "seed {seed} step {step}: {d:?}");
                    if expected {
                        admitted += 1;
                    } else {
                        denied += 1;
                    }
                }
            }
        }
        // Both outcomes are common: the comparison covered both.
        let common = if cfg!(miri) { 20 } else { 200 };
        assert!(
            admitted > common && denied > common,
            "{admitted} / {denied}"
        );
    }
}

/// `changed` answers as `fresh` over `steps` requests of 0 to 2 units, the clock (of both)
/// moving forward by up to `max_step_ns` before each.
fn answers_as_fresh(
    changed: &dyn Limiter,
    fresh: &dyn Limiter,
    clock: &ManualClock,
    rng: &mut Rng,
    max_step_ns: u64,
    steps: u64,
) {
    for step in 0..steps {
        clock.advance(Duration::from_nanos(rng.below(max_step_ns)));
        let n = rng.below(3);
        assert_eq!(
            changed.try_acquire_n(n),
            fresh.try_acquire_n(n),
            "step {step}"
        );
    }
}

#[test]
fn once_idle_for_its_capacity_a_changed_bucket_is_a_fresh_one() {
    let mut rng = Rng(5);
    let (live, clock) = bucket(quota(100, 1_000, 100));
    assert!(live.try_acquire_n(80).is_allowed());
    // 8/s ticks in whole ns, as the first quota does (see the rounding test below).
    let new = quota(8, 1_000, 4);
    live.set_quota(new).unwrap();
    clock.advance(ms(500));
    let fresh = TokenBucket::with_clock(new, clock.clone());
    let steps = if cfg!(miri) { 200 } else { 2_000 };
    answers_as_fresh(&live, &fresh, &clock, &mut rng, 200_000_000, steps);
}

#[test]
fn a_live_bucket_rounds_a_later_quota_to_its_tick_never_fast() {
    // 1000/s ticks in whole ns; 999/s would need 1/32 ns: its interval is rounded up.
    let (b, clock) = bucket(quota(1_000, 1_000, 1));
    b.set_quota(Quota::per_second(999).unwrap()).unwrap();
    assert!(b.try_acquire_n(999).is_allowed());
    let d = b.try_acquire();
    let exact = Duration::from_nanos(1_000_000_000u64.div_ceil(999));
    assert!(d.retry_after().unwrap() >= exact, "{d:?}");
    assert!(d.retry_after().unwrap() <= exact + Duration::from_nanos(1));
    // Slow by under 1 ns per token: the 999 tokens are back 998 ns after one second.
    clock.advance(Duration::from_secs(1));
    assert_eq!(b.peek(999).retry_after(), Some(Duration::from_nanos(998)));
    clock.advance(Duration::from_nanos(998));
    assert!(b.try_acquire_n(999).is_allowed());
    assert!(!b.try_acquire().is_allowed());
}

#[test]
fn a_live_window_carries_its_count_and_takes_a_new_limit_at_once() {
    let clock = ManualClock::new();
    let w = LiveFixedWindow::with_clock(Quota::per_second(5).unwrap(), clock.clone());
    assert!(w.try_acquire_n(5).is_allowed());
    w.set_quota(Quota::per_second(8).unwrap()).unwrap();
    assert!(w.try_acquire_n(3).is_allowed());
    assert!(!w.try_acquire().is_allowed());
    // Lowered under the count: denied to the window's end, no overflow in `remaining`.
    w.set_quota(Quota::per_second(2).unwrap()).unwrap();
    let d = w.try_acquire();
    assert!(!d.is_allowed());
    assert_eq!((d.remaining(), d.retry_after()), (0, Some(ms(1_000))));
    assert!(!w.try_acquire_n(3).is_allowed()); // above the new limit
    assert!(w.try_acquire_n(3).exceeds_capacity());
    // The next window counts under the new limit alone, as a fresh window would.
    clock.set(Duration::from_secs(1));
    let fresh = FixedWindow::with_clock(Quota::per_second(2).unwrap(), clock.clone());
    let steps = if cfg!(miri) { 100 } else { 1_000 };
    answers_as_fresh(&w, &fresh, &clock, &mut Rng(3), 300_000_000, steps);
}

#[test]
fn a_live_sliding_window_sums_its_slots_under_the_new_limit() {
    let clock = ManualClock::new();
    let w = LiveSlidingWindow::with_clock(Quota::per_second(10).unwrap(), clock.clone());
    assert!(w.try_acquire_n(6).is_allowed());
    clock.advance(ms(500));
    w.set_quota(Quota::per_second(8).unwrap()).unwrap();
    assert!(w.try_acquire_n(2).is_allowed()); // 6 + 2 of 8
    assert!(!w.try_acquire().is_allowed());
    w.set_quota(Quota::per_second(4).unwrap()).unwrap();
    let d = w.try_acquire();
    assert!(!d.is_allowed());
    assert_eq!(d.remaining(), 0);
    // Once every slot of the old counts has left the window, it is a fresh window.
    clock.advance(Duration::from_secs(3));
    let fresh = SlidingWindow::with_clock(Quota::per_second(4).unwrap(), clock.clone());
    let mut rng = Rng(9);
    for step in 0..if cfg!(miri) { 100 } else { 1_000 } {
        clock.advance(Duration::from_nanos(rng.below(200_000_000)));
        let n = rng.below(3);
        assert_eq!(
            w.try_acquire_n(n).is_allowed(),
            fresh.try_acquire_n(n).is_allowed(),
            "step {step}"
        );
    }
}

#[test]
fn a_refused_change_is_a_typed_error_and_keeps_the_quota() {
    let clock = ManualClock::new();
    let w = LiveFixedWindow::with_clock(Quota::per_second(5).unwrap(), clock.clone());
    assert!(w.try_acquire_n(2).is_allowed());
    let e = w.set_quota(Quota::per_minute(5).unwrap()).unwrap_err();
    assert_eq!(
        e,
        QuotaError::PeriodFixed {
            period: Duration::from_secs(60),
            fixed: Duration::from_secs(1)
        }
    );
    assert!(e.to_string().contains("only its limit can change"), "{e}");
    // The count field is as wide as the window number leaves: every valid quota of the
    // same period fits, up to the largest (a valid quota also fits 8 slots: 32 bits).
    assert!(Quota::per_second(1 << 32).is_err());
    let largest = Quota::per_second((1 << 32) - 1).unwrap();
    assert!(w.set_quota(largest).is_ok());
    w.set_quota(Quota::per_second(5).unwrap()).unwrap();
    assert_eq!(w.quota(), Quota::per_second(5).unwrap());
    assert_eq!(w.try_acquire_n(3).remaining(), 0); // the 2 counted stayed

    let s = LiveSlidingWindow::with_clock(Quota::per_second(5).unwrap(), clock.clone());
    assert!(matches!(
        s.set_quota(Quota::per_hour(5).unwrap()),
        Err(QuotaError::PeriodFixed { .. })
    ));
    assert!(s.set_quota(largest).is_ok());

    // A bucket ticking in whole ns cannot take more than one token per ns.
    let (b, _) = bucket(Quota::per_second(10).unwrap());
    let too_fine = Quota::try_new(3, Duration::from_nanos(2)).unwrap();
    assert!(matches!(
        b.set_quota(too_fine),
        Err(QuotaError::RateTooHigh { .. })
    ));
    assert_eq!(b.quota(), Quota::per_second(10).unwrap());
    assert!(b.try_acquire_n(10).is_allowed());
}

/// Two quotas of the same burst in tokens (10) at different rates: carried from one to the
/// other, the tokens used stay the same. On a frozen clock, requesters racing a thread that
/// flips between them never get more than 10 in all: a torn parameter set (one quota's
/// interval with the other's capacity), or a word judged under the parameters it is not
/// counted in, would hand out more.
#[test]
fn changes_racing_requests_never_hand_out_more_than_the_burst() {
    let slow = quota(10, 1_000, 10);
    let fast = quota(20, 1_000, 10);
    let rounds = if cfg!(miri) { 3 } else { 200 };
    for round in 0..rounds {
        let (b, _clock) = bucket(slow);
        let admitted = AtomicU64::new(0);
        let finished = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..if cfg!(miri) { 20 } else { 2_000 } {
                        if b.try_acquire().is_allowed() {
                            // Relaxed: a tally read after the scope joins.
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    // Relaxed: a stop signal for the flipper; nothing is published with it.
                    finished.fetch_add(1, Ordering::Relaxed);
                });
            }
            s.spawn(|| {
                let mut flips = 0u64;
                // Relaxed: see the increment.
                while finished.load(Ordering::Relaxed) < 2 && flips < 100_000 {
                    b.set_quota(if flips.is_multiple_of(2) { fast } else { slow })
                        .unwrap();
                    flips += 1;
                }
            });
        });
        // Relaxed: after the join.
        let admitted = admitted.load(Ordering::Relaxed);
        assert_eq!(admitted, 10, "round {round}");
    }
}

/// A change that read the clock and stalled, reading in hand, while the bucket was drained at
/// a later instant: the bucket it carries stays drained at that instant. Carried from the
/// stale reading, the debt the drain wrote (more than a burst past that reading) would be cut
/// to one burst, and the bucket would be full again where it had just been emptied.
#[test]
fn a_change_stalled_across_a_drain_never_refills_the_drained_bucket() {
    let q = quota(10, 1_000, 10);
    let clock = StallClock::new();
    let b = LiveTokenBucket::with_clock(q, clock.clone());
    std::thread::scope(|s| {
        let changer = s.spawn(|| {
            // Its first reading: `set_quota` reads the clock once, to carry the bucket at.
            clock.hold(1);
            b.set_quota(q).unwrap();
        });
        clock.wait_held();
        clock.set(Duration::from_secs(5));
        assert!(b.try_acquire_n(10).is_allowed());
        clock.release();
        changer.join().unwrap();
    });
    let again = (0..10).filter(|_| b.try_acquire().is_allowed()).count();
    assert_eq!(
        again, 0,
        "a burst of 10, and 10 admitted at this instant already"
    );
}

#[test]
fn a_first_quota_finer_than_the_tick_runs_at_one_token_a_tick() {
    // 17 per ns: the live bucket ticks at most 16 times per ns, so it runs at 16 per ns.
    let fine = Quota::try_new(17, Duration::from_nanos(1))
        .unwrap()
        .with_burst(32)
        .unwrap();
    let (b, clock) = bucket(fine);
    assert!(b.try_acquire_n(32).is_allowed());
    clock.advance(Duration::from_nanos(1));
    assert!(b.try_acquire_n(16).is_allowed());
    assert!(
        !b.try_acquire().is_allowed(),
        "never faster than one token a tick"
    );
    assert_eq!(b.quota(), fine);
}

#[test]
fn a_bucket_refusal_says_what_does_not_fit_its_tick() {
    // 3 per 7 s ticks 3 times per ns: 7 per 2 ns is more than a token a tick.
    let (b, _) = bucket(Quota::try_new(3, Duration::from_secs(7)).unwrap());
    assert!(matches!(
        b.set_quota(Quota::try_new(7, Duration::from_nanos(2)).unwrap()),
        Err(QuotaError::RateTooHigh { .. })
    ));
    // One per 2^57 ns is 3 × 2^57 ticks a token: a burst of 11 would pass 2^62 ticks (a
    // fixed-quota bucket, ticking once per ns, takes up to 31).
    let slow = Quota::try_new(1, Duration::from_nanos(1 << 57)).unwrap();
    assert_eq!(
        b.set_quota(slow.with_burst(11).unwrap()),
        Err(QuotaError::BurstTooLarge { burst: 11, max: 10 })
    );
    assert!(b.set_quota(slow.with_burst(10).unwrap()).is_ok());
}

#[test]
fn a_zero_cost_passes_on_a_window_counting_above_its_lowered_limit() {
    let clock = ManualClock::new();
    let fixed = LiveFixedWindow::with_clock(Quota::per_second(5).unwrap(), clock.clone());
    let sliding = LiveSlidingWindow::with_clock(Quota::per_second(5).unwrap(), clock.clone());
    for w in [&fixed as &dyn Limiter, &sliding] {
        assert!(w.try_acquire_n(5).is_allowed());
    }
    fixed.set_quota(Quota::per_second(2).unwrap()).unwrap();
    sliding.set_quota(Quota::per_second(2).unwrap()).unwrap();
    for w in [&fixed as &dyn Limiter, &sliding] {
        let zero = w.try_acquire_n(0);
        assert!(zero.is_allowed(), "{zero:?}");
        assert_eq!((zero.remaining(), zero.retry_after()), (0, None));
        assert_eq!(w.peek(0), zero);
        assert!(!w.try_acquire().is_allowed());
    }
}

#[test]
fn an_admission_before_two_changes_stays_counted_under_the_last() {
    // A full bucket of 10/s (burst 4) admits 4 at 0 (400 ms of its ticks); tightened twice to
    // 1/s (burst 1), the 4 used tokens are one whole token of the new quota: the next passes
    // at 1 s, not at 0.4 s.
    let tight = quota(1, 1_000, 1);
    let (b, clock) = bucket(quota(10, 1_000, 4));
    assert!(b.try_acquire_n(4).is_allowed());
    b.set_quota(tight).unwrap();
    b.set_quota(tight).unwrap();
    clock.set(ms(999));
    assert!(!b.try_acquire().is_allowed(), "the admission was forgotten");
    clock.set(ms(1_000));
    assert!(b.try_acquire().is_allowed());
}

#[test]
fn an_admission_racing_two_changes_on_real_threads_stays_counted() {
    // The same on threads: a request for the whole burst of a full bucket races two
    // tightening changes. Whichever way each round goes, an admitted request leaves the bucket
    // empty under the new quota until 1 s, and a refused one leaves it full.
    let rounds = if cfg!(miri) { 3 } else { 2_000 };
    let tight = quota(1, 1_000, 1);
    let (mut admitted_rounds, mut refused_rounds) = (0, 0);
    for round in 0..rounds {
        let (b, clock) = bucket(quota(10, 1_000, 4));
        let barrier = std::sync::Barrier::new(2);
        let admitted = std::thread::scope(|s| {
            let request = s.spawn(|| {
                barrier.wait();
                b.try_acquire_n(4).is_allowed()
            });
            barrier.wait();
            b.set_quota(tight).unwrap();
            b.set_quota(tight).unwrap();
            request.join().unwrap()
        });
        clock.set(ms(999));
        let early = b.try_acquire().is_allowed();
        if admitted {
            admitted_rounds += 1;
            assert!(!early, "round {round}: 4 tokens counted as less than one");
        } else {
            refused_rounds += 1;
            assert!(early, "round {round}: a refused request was counted");
        }
    }
    assert_eq!(admitted_rounds + refused_rounds, rounds);
}
