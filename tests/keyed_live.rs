//! Live quotas on the keyed map: a live map decides as one live limiter per key would, with
//! every change applied to every key of its plan at the same instant (random runs of
//! requests, clock steps, changes and evictions against that reference); the carried values
//! by hand; typed refusals that keep the quota; a bounded live map; changes racing requests
//! on real threads. Time comes from `ManualClock`s only.

mod common;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{bucket_changes, burst_quota as quota, ms, Rng};
use tollgate::{
    Algorithm, Decision, FixedWindow, KeyedError, KeyedLimiter, Limiter, LiveFixedWindow,
    LiveTokenBucket, ManualClock, Quota, QuotaError, TokenBucket, WhenFull,
};
use tollgate_test_support::StallClock;

type Keyed<K = u64> = KeyedLimiter<K, ManualClock>;

/// A live map of `algorithm` on `clock`.
fn live_on<K: std::hash::Hash + Eq>(
    algorithm: Algorithm,
    own: Quota,
    clock: &ManualClock,
) -> Keyed<K> {
    KeyedLimiter::builder(algorithm, own)
        .live()
        .build_with_clock(clock.clone())
        .unwrap()
}

/// A live map of `algorithm` on a new manual clock.
fn live<K: std::hash::Hash + Eq>(algorithm: Algorithm, own: Quota) -> (Keyed<K>, ManualClock) {
    let clock = ManualClock::new();
    (live_on(algorithm, own, &clock), clock)
}

/// Everything a caller can read from a decision.
fn seen(d: Decision) -> (bool, u64, Option<Duration>, Duration, bool) {
    (
        d.is_allowed(),
        d.remaining(),
        d.retry_after(),
        d.reset_after(),
        d.exceeds_capacity(),
    )
}

/// What a request of `algorithm` may ask for at most without exceeding the quota.
fn capacity(algorithm: Algorithm, q: &Quota) -> u64 {
    match algorithm {
        Algorithm::TokenBucket => q.burst(),
        _ => q.limit(),
    }
}

/// One key's reference: a single live limiter of the map's algorithm.
enum Single {
    Bucket(LiveTokenBucket<ManualClock>),
    Window(LiveFixedWindow<ManualClock>),
}

impl Single {
    fn new(algorithm: Algorithm, q: Quota, clock: &ManualClock) -> Self {
        match algorithm {
            Algorithm::TokenBucket => Single::Bucket(LiveTokenBucket::with_clock(q, clock.clone())),
            Algorithm::FixedWindow => Single::Window(LiveFixedWindow::with_clock(q, clock.clone())),
            other => unreachable!("{other:?} has no live form"),
        }
    }

    fn limiter(&self) -> &dyn Limiter {
        match self {
            Single::Bucket(b) => b,
            Single::Window(w) => w,
        }
    }

    fn set_quota(&self, q: Quota) -> Result<(), QuotaError> {
        match self {
            Single::Bucket(b) => b.set_quota(q),
            Single::Window(w) => w.set_quota(q),
        }
    }

    /// As good as new: a zero cost (which writes nothing) reports no time left until full
    /// capacity, `reset_after`'s documented meaning.
    fn is_full(&self) -> bool {
        self.limiter().peek(0).reset_after().is_zero()
    }
}

/// The documented semantics of a live keyed map, built from single live limiters: one per
/// key, made at its plan's current quota on the key's first request; a change applied to every
/// key of its plan at once; eviction drops the keys that are full at that instant.
struct Reference {
    algorithm: Algorithm,
    /// Its own clock, moved in step with the map's.
    clock: ManualClock,
    /// The quota in force per plan name (absent: the name itself).
    plans: HashMap<Quota, Quota>,
    /// Each key's plan name and limiter.
    keys: HashMap<u64, (Quota, Single)>,
}

impl Reference {
    fn new(algorithm: Algorithm) -> Self {
        Reference {
            algorithm,
            clock: ManualClock::new(),
            plans: HashMap::new(),
            keys: HashMap::new(),
        }
    }

    fn current(&self, plan: &Quota) -> Quota {
        *self.plans.get(plan).unwrap_or(plan)
    }

    /// The quota a request on `key` is judged under: its plan's, or `plan`'s if it is new.
    fn quota_for(&self, key: u64, plan: &Quota) -> Quota {
        self.current(self.keys.get(&key).map_or(plan, |(name, _)| name))
    }

    fn acquire(&mut self, key: u64, plan: &Quota, n: u64) -> Decision {
        let current = self.current(plan);
        let (algorithm, clock) = (self.algorithm, &self.clock);
        let (_, single) = self
            .keys
            .entry(key)
            .or_insert_with(|| (*plan, Single::new(algorithm, current, clock)));
        single.limiter().try_acquire_n(n)
    }

    /// The change of `plan` to `q`: a window keeps its period (the documented refusal, the
    /// quota kept); every key of the plan takes it.
    fn set(&mut self, plan: &Quota, q: Quota) -> Result<(), QuotaError> {
        let current = self.current(plan);
        let expected = if self.algorithm == Algorithm::FixedWindow && q.period() != current.period()
        {
            Err(QuotaError::PeriodFixed {
                period: q.period(),
                fixed: current.period(),
            })
        } else {
            Ok(())
        };
        for (name, single) in self.keys.values() {
            if name == plan {
                assert_eq!(single.set_quota(q), expected, "the reference's own limiter");
            }
        }
        if expected.is_ok() {
            self.plans.insert(*plan, q);
        }
        expected
    }

    fn evict(&mut self) -> usize {
        let before = self.keys.len();
        self.keys.retain(|_, (_, single)| !single.is_full());
        before - self.keys.len()
    }
}

/// How often each outcome came up in a run: a comparison that never saw one covers nothing.
#[derive(Debug, Default)]
struct Tally {
    admitted: u64,
    denied: u64,
    evicted: usize,
    changed: u64,
    refused: u64,
}

/// A random run of a live map against the reference: requests of cost `0..=capacity + 1` on 4
/// keys, with the map's own quota or a plan's; clock steps; changes of the map's quota and of
/// the plans' to quotas drawn from `changes`; evictions. Every decision is compared whole.
fn differential(algorithm: Algorithm, own: Quota, plans: [Quota; 2], changes: &[Quota]) {
    // A key made after a change counts in its plan's first quota's ticks, a fresh reference
    // limiter in the current quota's: the same when every quota spaces its tokens a whole
    // number of ns apart (otherwise each rounds its own way).
    if algorithm == Algorithm::TokenBucket {
        for q in changes.iter().chain(&plans).chain([&own]) {
            assert_eq!(q.period().as_nanos() % u128::from(q.limit()), 0, "{q:?}");
        }
    }
    let names = [own, plans[0], plans[1]];
    // Shorter under miri, which is a thousand times slower.
    let (seeds, steps) = if cfg!(miri) { (1, 300) } else { (6, 3_000) };
    for seed in 1..=seeds {
        let mut rng = Rng(seed);
        let (map, clock) = live::<u64>(algorithm, own);
        let mut reference = Reference::new(algorithm);
        let mut tally = Tally::default();
        for step in 0..steps {
            match rng.below(20) {
                0 | 1 => {
                    let plan = names[rng.below(3) as usize];
                    let q = changes[rng.below(changes.len() as u64) as usize];
                    let got = if plan == own && rng.below(2) == 0 {
                        map.set_quota(q)
                    } else {
                        map.set_plan_quota(&plan, q)
                    };
                    let want = reference.set(&plan, q);
                    assert_eq!(
                        got,
                        want.map_err(KeyedError::Quota),
                        "{algorithm:?} seed {seed} step {step}: {q:?}"
                    );
                    if want.is_ok() {
                        tally.changed += 1;
                    } else {
                        tally.refused += 1;
                    }
                    for name in &names {
                        assert_eq!(map.plan_quota(name), reference.current(name));
                    }
                    assert_eq!(map.quota(), reference.current(&own));
                }
                2 => {
                    let evicted = map.evict_idle();
                    assert_eq!(
                        evicted,
                        reference.evict(),
                        "{algorithm:?} seed {seed} step {step}"
                    );
                    tally.evicted += evicted;
                    assert_eq!(map.len(), reference.keys.len());
                }
                3..=6 => {
                    // Mostly short steps; now and then long enough for every key to refill.
                    let dt = if rng.below(10) == 0 {
                        ms(rng.below(4_000))
                    } else {
                        ms(rng.below(300))
                    };
                    clock.advance(dt);
                    reference.clock.advance(dt);
                }
                _ => {
                    let key = rng.below(4);
                    let (got, want) = if rng.below(3) == 0 {
                        let plan = names[rng.below(3) as usize];
                        (
                            map.try_acquire_with(&key, &plan),
                            reference.acquire(key, &plan, 1),
                        )
                    } else {
                        let max = capacity(algorithm, &reference.quota_for(key, &own));
                        let n = rng.below(max + 2);
                        (map.try_acquire_n(&key, n), reference.acquire(key, &own, n))
                    };
                    assert_eq!(
                        seen(got),
                        seen(want),
                        "{algorithm:?} seed {seed} step {step}: key {key}"
                    );
                    if got.is_allowed() {
                        tally.admitted += 1;
                    } else {
                        tally.denied += 1;
                    }
                }
            }
        }
        let common = if cfg!(miri) { 10 } else { 100 };
        assert!(
            tally.admitted > common
                && tally.denied > common
                && tally.evicted > common as usize / 10
                && tally.changed > common / 10,
            "{algorithm:?} seed {seed}: {tally:?}"
        );
        if algorithm == Algorithm::FixedWindow {
            assert!(tally.refused > 0, "{tally:?}");
        }
    }
}

#[test]
fn a_live_keyed_bucket_decides_as_one_live_bucket_per_key() {
    let changes: Vec<Quota> = bucket_changes()
        .into_iter()
        .chain([quota(2, 1_000, 1), quota(8, 500, 4)])
        .collect();
    differential(
        Algorithm::TokenBucket,
        quota(10, 1_000, 10),
        [quota(4, 1_000, 6), quota(20, 1_000, 5)],
        &changes,
    );
}

#[test]
fn a_live_keyed_window_decides_as_one_live_window_per_key() {
    // Limits for windows of 1 s and of 500 ms (the plans' periods), and a period neither has:
    // a change to another period is refused, the quota kept.
    let mut changes = Vec::new();
    for limit in [1, 2, 3, 5, 8, 12] {
        changes.push(Quota::per_second(limit).unwrap());
        changes.push(Quota::try_new(limit, ms(500)).unwrap());
    }
    changes.push(Quota::per_minute(5).unwrap());
    differential(
        Algorithm::FixedWindow,
        Quota::per_second(5).unwrap(),
        [
            Quota::per_second(12).unwrap(),
            Quota::try_new(4, ms(500)).unwrap(),
        ],
        &changes,
    );
}

/// The carried values by hand, on a frozen clock until the end. A bucket's debt is
/// `tat - now`; a change counts it in tokens of the old quota, then in time of the new one,
/// rounded up and capped at the new capacity (`burst × interval`).
#[test]
fn a_live_keyed_bucket_carries_each_key_by_hand() {
    let ten = Quota::per_second(10).unwrap(); // 100 ms a token, burst 10
    let pro = Quota::per_second(50).unwrap(); // 20 ms a token, burst 50
    let (map, clock) = live::<&str>(Algorithm::TokenBucket, ten);

    let d = map.try_acquire_n(&"a", 10); // drained: debt 1 s
    assert_eq!((d.is_allowed(), d.remaining()), (true, 0));
    assert_eq!(map.try_acquire_n(&"idle", 8).remaining(), 2); // debt 800 ms, then untouched
    assert_eq!(map.try_acquire_n(&"zero", 0).remaining(), 10); // made, never charged
    assert_eq!(map.try_acquire_with(&"carol", &pro).remaining(), 49);
    assert_eq!(map.try_acquire_with(&"carol", &pro).remaining(), 48); // debt 40 ms

    // 1. Loosened to 100/s (10 ms a token, burst 100): a's 1 s is 10 tokens used, 100 ms of
    //    debt: 90 left at once. idle: 8 tokens, 80 ms.
    map.set_quota(Quota::per_second(100).unwrap()).unwrap();
    let d = map.try_acquire_n(&"a", 90);
    assert_eq!((d.is_allowed(), d.remaining()), (true, 0)); // debt 100 + 900 ms = 1 s
    let d = map.try_acquire(&"a");
    assert_eq!((d.is_allowed(), d.remaining()), (false, 0));
    assert_eq!(d.retry_after(), Some(ms(10)));

    // 2. Tightened to 1/s, burst 1 (capacity 1 s): a's 100 tokens used are capped at the one
    //    token of the new burst, 1 s of debt: the next token in exactly 1 s. idle: 8 tokens
    //    capped at 1, 1 s.
    map.set_quota(Quota::per_second(1).unwrap()).unwrap();
    let d = map.try_acquire(&"a");
    assert_eq!((d.is_allowed(), d.remaining()), (false, 0));
    assert_eq!(d.retry_after(), Some(Duration::from_secs(1)));

    // 3. To 2/s, burst 4 (500 ms a token, capacity 2 s): a's 1 token used is 500 ms of debt,
    //    3 of 4 left; so is idle's. (Left uncarried, idle's 800 ms would leave 2; carried by
    //    the first and last changes alone, 8 tokens of 500 ms capped at 2 s would leave 0.)
    let four = quota(2, 1_000, 4);
    map.set_quota(four).unwrap();
    assert_eq!(map.quota(), four);
    let d = map.try_acquire_n(&"idle", 4);
    assert_eq!((d.is_allowed(), d.remaining()), (false, 3));
    // Base 500 ms, 4 tokens would end at 2.5 s: they pass once 2.5 s - 2 s capacity is now.
    assert_eq!(d.retry_after(), Some(ms(500)));
    assert_eq!(map.try_acquire_n(&"idle", 3).remaining(), 0);
    let d = map.try_acquire_n(&"a", 3);
    assert_eq!((d.is_allowed(), d.remaining()), (true, 0)); // debt 500 + 1500 ms = 2 s
    assert!(!map.try_acquire(&"a").is_allowed());
    // Never charged: full under every quota, as a key made now is.
    assert_eq!(map.try_acquire_n(&"zero", 4).remaining(), 0);
    assert_eq!(map.try_acquire(&"fresh").remaining(), 3);

    // The pro plan was untouched by the three changes of the map's own quota.
    assert_eq!(map.plan_quota(&pro), pro);
    assert_eq!(map.try_acquire_with(&"carol", &pro).remaining(), 47); // debt 60 ms
                                                                      // Its own change: 3 tokens of 20 ms are 3 of 200 ms (5/s, burst 5), 600 ms; carol keeps
                                                                      // her plan on a plain request, and a new pro key joins at 5/s.
    let five = Quota::per_second(5).unwrap();
    map.set_plan_quota(&pro, five).unwrap();
    assert_eq!(map.plan_quota(&pro), five);
    assert_eq!(map.try_acquire(&"carol").remaining(), 1);
    assert_eq!(map.try_acquire_with(&"dave", &pro).remaining(), 4);
    assert_eq!(map.quota(), four, "the map's own plan keeps its quota");
    // A plan changed before any key used it: its keys start at the new quota.
    let team = Quota::per_second(4).unwrap();
    assert_eq!(map.plan_quota(&team), team);
    map.set_plan_quota(&team, Quota::per_second(8).unwrap())
        .unwrap();
    assert_eq!(map.plan_quota(&team), Quota::per_second(8).unwrap());
    assert_eq!(map.try_acquire_with(&"eve", &team).remaining(), 7);

    // Time runs at the carried rate: 500 ms later a has one token back.
    clock.advance(ms(500));
    assert_eq!(map.try_acquire(&"a").remaining(), 0);
    assert_eq!(map.try_acquire(&"a").retry_after(), Some(ms(500)));
}

/// A tightened burst counts what was used only up to itself (a bucket is never emptier than
/// empty), so a key tightened and loosened again on a frozen clock has forgotten the rest:
/// the larger burst does not bound what changes between bursts let through. The map and a
/// single live bucket agree on it.
#[test]
fn a_tightened_then_loosened_key_keeps_only_what_the_smaller_burst_counted() {
    let (big, small) = (quota(40, 1_000, 40), quota(10, 1_000, 10));
    let (map, clock) = live::<u64>(Algorithm::TokenBucket, big);
    let single = LiveTokenBucket::with_clock(big, clock.clone());
    let both = |n: u64| {
        let d = map.try_acquire_n(&1, n);
        assert_eq!(seen(d), seen(single.try_acquire_n(n)), "{n}");
        (d.is_allowed(), d.remaining())
    };
    assert_eq!(both(40), (true, 0)); // 40 of 25 ms: 1 s of debt
    for q in [small, big] {
        map.set_quota(q).unwrap();
        single.set_quota(q).unwrap();
    }
    // 40 tokens of 100 ms capped at the 1 s capacity: 10 used; back at 40/s, 10 of 25 ms,
    // 250 ms of debt: 30 more at the same instant.
    assert_eq!(both(1), (true, 29));
    assert_eq!(both(29), (true, 0));
    assert_eq!(both(1), (false, 0));
}

#[test]
fn a_map_built_without_live_refuses_changes_and_decides_as_before() {
    let own = Quota::per_second(3).unwrap();
    let pro = Quota::per_second(6).unwrap();
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new();
        let map = Keyed::try_with_clock(algorithm, own, clock.clone()).unwrap();
        let twin = Keyed::try_with_clock(algorithm, own, clock.clone()).unwrap();
        for m in [&map, &twin] {
            assert!(m.try_acquire_n(&1, 3).is_allowed());
            assert!(m.try_acquire_with(&2, &pro).is_allowed());
        }
        let looser = Quota::per_second(100).unwrap();
        assert_eq!(
            map.set_quota(looser),
            Err(KeyedError::NotLive),
            "{algorithm:?}"
        );
        assert_eq!(map.set_plan_quota(&pro, looser), Err(KeyedError::NotLive));
        assert_eq!((map.quota(), map.plan_quota(&pro)), (own, pro));
        clock.advance(ms(400));
        for (key, n) in [(1, 1), (1, 1), (2, 5), (2, 1), (3, 3), (3, 1)] {
            assert_eq!(
                map.try_acquire_n(&key, n),
                twin.try_acquire_n(&key, n),
                "{algorithm:?}: key {key}"
            );
        }
    }
    // Only the one-word limiters have a live form.
    for algorithm in [Algorithm::SlidingWindow, Algorithm::SlidingLog] {
        let built = KeyedLimiter::<u64>::builder(algorithm, own)
            .live()
            .build_with_clock(ManualClock::new());
        assert!(matches!(built, Err(KeyedError::NotLive)), "{algorithm:?}");
    }
}

#[test]
fn a_refused_change_keeps_the_quota_and_the_counts() {
    // A window: another period is refused; the map and a single live window, given the same
    // calls, go on alike.
    let clock = ManualClock::new();
    let five = Quota::per_second(5).unwrap();
    let half = Quota::try_new(4, ms(500)).unwrap();
    let map = live_on::<u64>(Algorithm::FixedWindow, five, &clock);
    let single = LiveFixedWindow::with_clock(five, clock.clone());
    assert_eq!(
        seen(map.try_acquire_n(&1, 2)),
        seen(single.try_acquire_n(2))
    );
    let minute = Quota::per_minute(5).unwrap();
    let refused = Err(QuotaError::PeriodFixed {
        period: Duration::from_secs(60),
        fixed: Duration::from_secs(1),
    });
    assert_eq!(map.set_quota(minute), refused.map_err(KeyedError::Quota));
    assert_eq!(single.set_quota(minute), refused);
    assert_eq!(map.quota(), five);
    for n in [3, 1] {
        assert_eq!(
            seen(map.try_acquire_n(&1, n)),
            seen(single.try_acquire_n(n))
        );
    }
    assert!(!map.try_acquire(&1).is_allowed(), "the 2 counted stayed");
    // A plan's window keeps its own period.
    assert_eq!(
        map.set_plan_quota(&half, Quota::per_second(9).unwrap()),
        Err(KeyedError::Quota(QuotaError::PeriodFixed {
            period: Duration::from_secs(1),
            fixed: ms(500),
        }))
    );
    assert_eq!(map.plan_quota(&half), half);
    assert_eq!(map.try_acquire_with(&2, &half).remaining(), 3);

    // A bucket ticking in whole ns cannot take more than a token per ns.
    let ten = Quota::per_second(10).unwrap();
    let map = live_on::<u64>(Algorithm::TokenBucket, ten, &clock);
    let single = LiveTokenBucket::with_clock(ten, clock.clone());
    assert_eq!(
        seen(map.try_acquire_n(&1, 4)),
        seen(single.try_acquire_n(4))
    );
    let too_fine = Quota::try_new(3, Duration::from_nanos(2)).unwrap();
    assert!(matches!(
        map.set_quota(too_fine),
        Err(KeyedError::Quota(QuotaError::RateTooHigh { .. }))
    ));
    assert_eq!(
        map.set_quota(too_fine),
        single.set_quota(too_fine).map_err(KeyedError::Quota)
    );
    assert_eq!(map.quota(), ten);
    for n in [6, 1] {
        let d = map.try_acquire_n(&1, n);
        assert_eq!(seen(d), seen(single.try_acquire_n(n)));
    }
    assert_eq!(map.try_acquire(&1).retry_after(), Some(ms(100)));
}

#[test]
fn a_bounded_live_map_sweeps_carried_keys_and_judges_new_ones_at_the_current_quota() {
    // Deny: 2/s (500 ms a token) loosened to 4/s (250 ms a token). Key 1 used
    // 1 token (500 ms of debt, 250 ms carried), key 2 both (1 s, 500 ms carried). 250 ms on,
    // key 1 is full only as carried: the sweep a new key runs evicts it, and keeps key 2.
    let two = Quota::per_second(2).unwrap();
    let four = Quota::per_second(4).unwrap();
    let clock = ManualClock::new();
    let map = KeyedLimiter::<u64>::builder(Algorithm::TokenBucket, two)
        .live()
        .max_keys(NonZeroUsize::new(2).unwrap(), WhenFull::Deny)
        .build_with_clock(clock.clone())
        .unwrap();
    assert!(map.try_acquire(&1).is_allowed());
    assert!(map.try_acquire_n(&2, 2).is_allowed());
    map.set_quota(four).unwrap();
    clock.advance(ms(250));
    let d = map.try_acquire(&3);
    assert_eq!((d.is_allowed(), d.remaining()), (true, 3), "made at 4/s");
    assert_eq!(map.len(), 2);
    // Key 2 kept its carried debt: 250 ms of 250 ms tokens, 3 of 4 left.
    let d = map.try_acquire_n(&2, 3);
    assert_eq!((d.is_allowed(), d.remaining()), (true, 0));
    // Full of busy keys: a new key is turned away.
    assert!(!map.try_acquire(&4).is_allowed());
    assert_eq!(map.len(), 2);

    // AdmitUntracked: a new key that finds the map full of busy keys is judged by a fresh
    // limiter at its plan's current quota (3 tokens would exceed the first quota's burst).
    let pro = Quota::per_second(3).unwrap();
    let eight = Quota::per_second(8).unwrap();
    for algorithm in [Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let clock = ManualClock::new();
        let map = KeyedLimiter::<u64>::builder(algorithm, two)
            .live()
            .max_keys(NonZeroUsize::new(1).unwrap(), WhenFull::AdmitUntracked)
            .build_with_clock(clock.clone())
            .unwrap();
        assert!(map.try_acquire_n(&1, 2).is_allowed());
        map.set_quota(four).unwrap();
        map.set_plan_quota(&pro, eight).unwrap();
        clock.advance(ms(100));
        let fresh = |q: Quota| -> Box<dyn Limiter> {
            match algorithm {
                Algorithm::TokenBucket => Box::new(TokenBucket::with_clock(q, clock.clone())),
                _ => Box::new(FixedWindow::with_clock(q, clock.clone())),
            }
        };
        for _ in 0..3 {
            let d = map.try_acquire_n(&99, 3);
            assert_eq!(seen(d), seen(fresh(four).try_acquire_n(3)), "{algorithm:?}");
            assert!(d.is_allowed(), "{algorithm:?}");
            let d = map.try_acquire_with(&98, &pro);
            assert_eq!(seen(d), seen(fresh(eight).try_acquire()), "{algorithm:?}");
        }
        assert_eq!(map.len(), 1, "{algorithm:?}: never stored");
    }
}

/// What a request of cost `n` on a limiter holding `capacity` of which `used` are taken is
/// answered, on a frozen clock: whether it passes, and the units left after it.
fn frozen(capacity: u64, used: u64, n: u64) -> (bool, u64) {
    let left = capacity.saturating_sub(used);
    if n <= left {
        (true, left - n)
    } else {
        (false, left)
    }
}

/// A change that read the instant it takes effect at and stalled, reading in hand, while a
/// key was drained at a later instant under the quota it replaces: the key stays drained at
/// that instant. Carried from the stale reading, the debt the drain wrote (more than a burst
/// past that reading) would be cut to one burst, and the key would be full again where it had
/// just been emptied.
#[test]
fn a_change_stalled_across_a_drain_never_refills_the_drained_key() {
    let q = quota(10, 1_000, 10);
    let clock = StallClock::new();
    let map = KeyedLimiter::<u64, _>::builder(Algorithm::TokenBucket, q)
        .live()
        .build_with_clock(clock.clone())
        .unwrap();
    std::thread::scope(|s| {
        let changer = s.spawn(|| {
            // Its first reading: the instant the change takes effect at, read after its walk.
            clock.hold(1);
            map.set_quota(q).unwrap();
        });
        clock.wait_held();
        clock.set(Duration::from_secs(5));
        assert!(map.try_acquire_n(&7, 10).is_allowed());
        clock.release();
        changer.join().unwrap();
    });
    let again = (0..10).filter(|_| map.try_acquire(&7).is_allowed()).count();
    assert_eq!(
        again, 0,
        "a burst of 10, and 10 admitted at this instant already"
    );
}

/// Requests hammering a few keys while another thread flips the quota, the clock frozen (so
/// nothing refills). A request racing a change is judged under one of the two quotas on the
/// units its key has taken (one requester thread: it knows them). The bucket's two quotas
/// have the same burst (10) at different rates: a change carries the tokens used exactly, so
/// every decision is known, and every key ends having taken exactly 10; a word decided under
/// parameters it is not counted in, or a carry lost or made twice, or a request decided on a
/// word loaded before two changes, answers otherwise. The window's two limits (5, 10) share
/// one window, its count never drops: no key takes more than 10. After the writer stops,
/// each key decides as a single live limiter given the same units, then changed to the map's
/// final quota.
#[test]
fn changes_racing_requests_keep_every_key_within_its_quota() {
    const KEYS: usize = 4;
    let cases = [
        (
            Algorithm::TokenBucket,
            quota(10, 1_000, 10),
            quota(20, 1_000, 10),
        ),
        (
            Algorithm::FixedWindow,
            Quota::per_second(5).unwrap(),
            Quota::per_second(10).unwrap(),
        ),
    ];
    // Under miri (threads interleaved one at a time, ~1000× slower) a few short rounds.
    let (rounds, requests, flips) = if cfg!(miri) {
        (2, 60, 20)
    } else {
        (100, 2_000, 10_000)
    };
    for (algorithm, first, second) in cases {
        let caps = [capacity(algorithm, &first), capacity(algorithm, &second)];
        let most = caps[0].max(caps[1]);
        let larger = if caps[0] == most { first } else { second };
        for round in 0..rounds {
            let (map, clock) = live::<u64>(algorithm, first);
            let finished = AtomicBool::new(false);
            let (used, changes) = std::thread::scope(|s| {
                let requester = s.spawn(|| {
                    let mut used = [0u64; KEYS];
                    for i in 0..requests {
                        let key = i % KEYS;
                        let n = 1 + (i / KEYS) as u64 % 3;
                        let d = map.try_acquire_n(&(key as u64), n);
                        let answer = (d.is_allowed(), d.remaining());
                        assert!(
                            caps.iter().any(|&c| frozen(c, used[key], n) == answer),
                            "{algorithm:?} round {round} key {key}: {n} with {} taken: {d:?}",
                            used[key]
                        );
                        if d.is_allowed() {
                            used[key] += n;
                        }
                    }
                    // Relaxed: a stop signal for the writer; nothing is published with it.
                    finished.store(true, Ordering::Relaxed);
                    used
                });
                let mut changes = 0;
                // Relaxed: see the store. Bounded, should the requester have panicked.
                while !finished.load(Ordering::Relaxed) && changes < flips {
                    let q = if changes % 2 == 0 { second } else { first };
                    map.set_quota(q).unwrap();
                    changes += 1;
                }
                (requester.join().unwrap(), changes)
            });
            let last = map.quota();
            assert_eq!(last, if changes % 2 == 0 { first } else { second });
            for (key, &used) in used.iter().enumerate() {
                assert!(
                    used <= most,
                    "{algorithm:?} round {round} key {key}: {used}"
                );
                if algorithm == Algorithm::TokenBucket {
                    assert_eq!(used, most, "{algorithm:?} round {round} key {key}");
                }
                let single = Single::new(algorithm, larger, &clock);
                assert!(single.limiter().try_acquire_n(used).is_allowed());
                single.set_quota(last).unwrap();
                for n in [most + 1, 3, 1, 0] {
                    assert_eq!(
                        seen(map.try_acquire_n(&(key as u64), n)),
                        seen(single.limiter().try_acquire_n(n)),
                        "{algorithm:?} round {round} key {key}: {n} of {used} under {last:?}"
                    );
                }
            }
        }
    }
}
