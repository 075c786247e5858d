//! `Metered`: answers exactly as the limiter it wraps, counts every decision once, loses no
//! count under contention, counts a keyed map's evictions. Its tracing events are tested in
//! `metrics_tracing.rs`.

mod common;

use std::num::NonZeroUsize;
use std::time::Duration;

use common::{all, ms, Rng};
use tollgate::{
    Algorithm, KeyedLimiter, Limiter, ManualClock, Metered, MetricsSnapshot, Quota, TokenBucket,
    WhenFull,
};

/// A boxed limiter as a `Limiter` value, to wrap each of `all`'s subjects.
struct Boxed(Box<dyn Limiter>);
impl Limiter for Boxed {
    fn try_acquire_n(&self, n: u64) -> tollgate::Decision {
        self.0.try_acquire_n(n)
    }
}

#[test]
fn a_metered_limiter_answers_as_the_bare_one_and_counts_each_outcome() {
    let quota = Quota::try_new(5, ms(1000)).unwrap();
    // Two copies of every limiter on two clocks moved in step: one bare, one metered.
    for ((bare, bare_clock), (wrapped, clock)) in all(quota).into_iter().zip(all(quota)) {
        let metered = Metered::new(Boxed(wrapped.limiter));
        let mut rng = Rng(u64::from(bare.name.len() as u32));
        let mut want = MetricsSnapshot::default();
        // Under miri (~1000× slower) 100 steps instead of 2,000: every outcome still occurs.
        let steps = if cfg!(miri) { 100 } else { 2_000 };
        for _ in 0..steps {
            let step = ms(rng.below(150));
            clock.advance(step);
            bare_clock.advance(step);
            let n = rng.below(8);
            let d = metered.try_acquire_n(n);
            assert_eq!(d, bare.limiter.try_acquire_n(n), "{}", bare.name);
            if d.is_allowed() {
                want.allowed += 1;
            } else if d.exceeds_capacity() {
                want.exceeded_capacity += 1;
            } else {
                want.denied += 1;
            }
        }
        let got = metered.snapshot();
        assert_eq!(got, want, "{}", bare.name);
        assert_eq!(got.decisions(), steps);
        assert!(got.allowed > 0 && got.denied > 0 && got.exceeded_capacity > 0);
    }
}

#[test]
fn contention_loses_no_count_and_admits_exactly_the_capacity() {
    let threads = 4;
    // Under miri (~1000× slower) 500 requests per thread instead of 5,000, against a capacity
    // scaled with them: half of all requests, so both outcomes race.
    let per_thread = if cfg!(miri) { 500 } else { 5_000 };
    let capacity = threads * per_thread / 2;
    let clock = ManualClock::new();
    let metered = Metered::named(
        "shared",
        TokenBucket::with_clock(Quota::per_second(capacity).unwrap(), clock),
    );
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per_thread {
                    let _ = metered.try_acquire();
                }
            });
        }
    });
    let snap = metered.snapshot();
    assert_eq!(snap.allowed, capacity); // the burst at a frozen instant, exactly
    assert_eq!(snap.denied, threads * per_thread - capacity);
    assert_eq!(snap.exceeded_capacity, 0);
}

#[test]
fn a_metered_keyed_map_counts_requests_and_evictions() {
    let clock = ManualClock::new();
    let users = Metered::named(
        "users",
        KeyedLimiter::<u64, _>::try_with_clock(
            Algorithm::FixedWindow,
            Quota::per_second(2).unwrap(),
            clock.clone(),
        )
        .unwrap(),
    );
    for key in 0..10 {
        for _ in 0..3 {
            let _ = users.try_acquire(&key);
        }
    }
    let _ = users.try_acquire_n(&99, 3);
    let _ = users.try_acquire_with(&100, &Quota::per_second(1).unwrap());
    clock.advance(Duration::from_secs(1));
    assert_eq!(users.evict_idle(), 12);
    assert_eq!(users.evict_idle(), 0);
    let s = users.snapshot();
    assert_eq!(
        (s.allowed, s.denied, s.exceeded_capacity, s.evicted_keys),
        (21, 10, 1, 12)
    );
    assert!(users.get_ref().is_empty());
}

#[test]
fn a_metered_bounded_map_counts_the_sweeps_it_runs_by_itself() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(1).unwrap();
    let users = Metered::new(
        KeyedLimiter::<u64, _>::builder(Algorithm::TokenBucket, quota)
            .max_keys(NonZeroUsize::new(4).unwrap(), WhenFull::Deny)
            .build_with_clock(clock.clone())
            .unwrap(),
    );
    for key in 0..4 {
        assert!(users.try_acquire(&key).is_allowed());
    }
    assert!(!users.try_acquire(&4).is_allowed(), "full of keys in use");
    assert_eq!(users.snapshot().evicted_keys, 0);
    clock.advance(Duration::from_secs(1)); // all four full again
    assert!(
        users.try_acquire(&5).is_allowed(),
        "the new key swept the idle ones out"
    );
    assert_eq!(users.snapshot().evicted_keys, 4);
    assert_eq!(users.get_ref().len(), 1);
    // A sweep run on the map itself, not through the wrapper, is counted too.
    clock.advance(Duration::from_secs(1));
    assert_eq!(users.get_ref().evict_idle(), 1);
    assert_eq!(users.snapshot().evicted_keys, 5);
}
