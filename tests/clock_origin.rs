//! A limiter decides the same whatever its clock's zero: every limiter counts time from its
//! own start, so a clock over `SystemTime` (about 1.76 × 10^18 ns since 1970) or a counter
//! that has run for years behaves exactly as a clock started with the limiter, up to and past
//! the horizon (2^58 ns of the limiter's own time), and a reading before the start stands
//! still at the start.
//!
//! Each test runs one sequence of operations on two copies of every limiter, one on a clock
//! that reads 0 at construction and one on a clock that reads a huge value then, moved in
//! step; every decision (and every refund, sweep and length) must be equal.

mod common;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use common::Rng;
use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{
    Algorithm, Clock, FixedWindow, KeyedLimiter, Lease, Leased, Limiter, Limits, LiveFixedWindow,
    LiveSlidingWindow, LiveTokenBucket, ManualClock, Member, Quota, SlidingLog, SlidingWindow,
    TokenBucket, WhenFull,
};

/// The limiters' horizon: 2^58 ns of a limiter's own time.
const HORIZON: u64 = 1 << 58;

/// About now, in ns since 1970: `11 × 2^20 × 5^16`, a multiple of every window and slot
/// length below, so that windows align to it as they do to 0.
const UNIX_NOW: u64 = 1_760_000_000_000_000_000;

/// A clock that reads `zero + t` for the test's time `t` (which may be negative: a clock
/// stepped back past the limiter's start), saturating at 0 and at `u64::MAX`.
#[derive(Clone, Debug)]
struct Shifted {
    zero: u64,
    now: ManualClock,
}

impl Shifted {
    fn new(zero: u64) -> Shifted {
        let s = Shifted {
            zero,
            now: ManualClock::new(),
        };
        s.set(0);
        s
    }

    fn set(&self, t: i128) {
        let reading = (i128::from(self.zero) + t).clamp(0, i128::from(u64::MAX));
        self.now.set(Duration::from_nanos(reading as u64));
    }
}

impl Clock for Shifted {
    fn now_nanos(&self) -> u64 {
        self.now.now_nanos()
    }
}

/// What one operation returned, comparable across the two copies.
#[derive(Debug, PartialEq, Eq)]
enum Out {
    Decision(tollgate::Decision),
    Count(u64),
    Unit,
}

/// One limiter under test, as the operations see it.
trait Subject {
    fn acquire(&self, key: u64, n: u64) -> Out;
    fn peek(&self, key: u64, n: u64) -> Out;
    fn refund(&self, key: u64, n: u64) -> Out;
    /// A keyed map's sweep (its count and the keys left); a live limiter's quota change.
    fn upkeep(&self, step: u64) -> Out;
}

/// A limiter and its upkeep: a live limiter's changes the limit (keeping the period, so
/// windows may change); any other's does nothing.
struct LiveOne<L>(L, fn(&L, u64));

/// `limiter` as a subject named `name`, its upkeep nothing.
fn single<L: Limiter + 'static>(name: &str, limiter: L) -> (String, Box<dyn Subject>) {
    (name.into(), Box::new(LiveOne(limiter, |_, _| {})))
}

/// The quota a live limiter's upkeep sets at step `step`: a limit of 1 to 9 per `period`.
fn limit_at(step: u64, period: Duration) -> Quota {
    Quota::try_new(1 + step % 9, period).unwrap()
}

impl<L: Limiter> Subject for LiveOne<L> {
    fn acquire(&self, _: u64, n: u64) -> Out {
        Out::Decision(self.0.try_acquire_n(n))
    }
    fn peek(&self, _: u64, n: u64) -> Out {
        Out::Decision(self.0.peek(n))
    }
    fn refund(&self, _: u64, n: u64) -> Out {
        Out::Count(self.0.refund(n))
    }
    fn upkeep(&self, step: u64) -> Out {
        (self.1)(&self.0, step);
        Out::Unit
    }
}

/// A keyed map over three keys, one of them on a plan of its own.
struct Keyed(KeyedLimiter<u64, Shifted>, Quota);

impl Subject for Keyed {
    fn acquire(&self, key: u64, n: u64) -> Out {
        let key = key % 4;
        Out::Decision(if key == 3 {
            self.0.try_acquire_with(&key, &self.1)
        } else {
            self.0.try_acquire_n(&key, n)
        })
    }
    fn peek(&self, key: u64, n: u64) -> Out {
        // A zero cost charges nothing: the keyed map's read-only question.
        let _ = n;
        Out::Decision(self.0.try_acquire_n(&(key % 4), 0))
    }
    fn refund(&self, key: u64, n: u64) -> Out {
        self.acquire(key, n)
    }
    fn upkeep(&self, _: u64) -> Out {
        let evicted = self.0.evict_idle() as u64;
        Out::Count(evicted << 32 | self.0.len() as u64)
    }
}

fn quotas() -> [Quota; 3] {
    [
        Quota::per_second(5).unwrap(),
        Quota::try_new(3, Duration::from_millis(500))
            .unwrap()
            .with_burst(4)
            .unwrap(),
        Quota::try_new(7, Duration::from_secs(4)).unwrap(),
    ]
}

/// Every limiter on `clock`, for `quota`.
fn subjects(quota: Quota, clock: &Shifted) -> Vec<(String, Box<dyn Subject>)> {
    let c = || clock.clone();
    let plan = Quota::try_new(2, Duration::from_millis(250)).unwrap();
    let mut out: Vec<(String, Box<dyn Subject>)> = vec![
        single("TokenBucket", TokenBucket::with_clock(quota, c())),
        single("FixedWindow", FixedWindow::with_clock(quota, c())),
        single("SlidingWindow", SlidingWindow::with_clock(quota, c())),
        single(
            "SlidingWindow/4",
            SlidingWindow::try_with_slots(quota, 4, c()).unwrap(),
        ),
        single(
            "SlidingLog",
            SlidingLog::try_with_clock(quota, c()).unwrap(),
        ),
        single("MutexTokenBucket", MutexTokenBucket::with_clock(quota, c())),
        single("MutexFixedWindow", MutexFixedWindow::with_clock(quota, c())),
        single(
            "MutexSlidingWindow",
            MutexSlidingWindow::with_clock(quota, c()),
        ),
        single(
            "MutexSlidingLog",
            MutexSlidingLog::try_with_clock(quota, c()).unwrap(),
        ),
        (
            "LiveTokenBucket".into(),
            Box::new(LiveOne(
                LiveTokenBucket::with_clock(quota, c()),
                |l, step| {
                    let _ = l.set_quota(limit_at(step, Duration::from_millis(200 + step % 900)));
                },
            )),
        ),
        (
            "LiveFixedWindow".into(),
            Box::new(LiveOne(
                LiveFixedWindow::with_clock(quota, c()),
                |l, step| {
                    let _ = l.set_quota(limit_at(step, l.quota().period()));
                },
            )),
        ),
        (
            "LiveSlidingWindow".into(),
            Box::new(LiveOne(
                LiveSlidingWindow::with_clock(quota, c()),
                |l, step| {
                    let _ = l.set_quota(limit_at(step, l.quota().period()));
                },
            )),
        ),
        single(
            "Leased",
            Leased::new(
                TokenBucket::with_clock(quota, c()),
                Lease::try_new(3, Duration::from_millis(50)).unwrap(),
            ),
        ),
    ];
    // A group of the three member kinds, and a second group sharing the global member.
    let global = Arc::new(Member::sliding_window(quota));
    let group = Limits::try_new(
        c(),
        [
            Arc::new(Member::token_bucket(plan)),
            Arc::new(Member::fixed_window(quota)),
            global.clone(),
        ],
    )
    .unwrap();
    out.push(single("Limits", group));
    let other = Limits::try_new(c(), [Arc::new(Member::token_bucket(quota)), global]).unwrap();
    out.push(single("Limits/shared", other));
    for algorithm in Algorithm::ALL {
        let map = KeyedLimiter::try_with_clock(algorithm, quota, c()).unwrap();
        out.push((format!("Keyed {algorithm:?}"), Box::new(Keyed(map, plan))));
        let bounded = KeyedLimiter::builder(algorithm, quota)
            .max_keys(NonZeroUsize::new(2).unwrap(), WhenFull::Deny)
            .build_with_clock(c())
            .unwrap();
        out.push((
            format!("Keyed {algorithm:?} max_keys"),
            Box::new(Keyed(bounded, plan)),
        ));
    }
    for live in [Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let map = KeyedLimiter::builder(live, quota)
            .live()
            .build_with_clock(c())
            .unwrap();
        out.push((format!("Keyed live {live:?}"), Box::new(Keyed(map, plan))));
    }
    out
}

/// Runs `steps` random operations on every limiter on a clock whose zero is `zero` ns before
/// the limiters' start, and on a clock that reads `start` then, and checks that every answer
/// agrees. `jumps` moves the time near and past the horizon now and then.
fn differential(zero: u64, start: u64, seed: u64, steps: u32, jumps: bool) {
    for quota in quotas() {
        let (at_zero, shifted) = (Shifted::new(start), Shifted::new(zero));
        let reference = subjects(quota, &at_zero);
        let moved = subjects(quota, &shifted);
        let mut rng = Rng(seed);
        // The test's time, from the limiters' start.
        let mut t: i128 = 0;
        for step in 0..steps {
            let x = rng.next();
            match x % 16 {
                0..=5 => t += i128::from(rng.below(400_000_000)),
                6 if jumps => t = i128::from(HORIZON) - i128::from(rng.below(3_000_000_000)),
                7 => t -= i128::from(rng.below(2_000_000_000)), // may go before the start
                _ => {}
            }
            let t_ref = t.max(-i128::from(start));
            at_zero.set(t_ref);
            shifted.set(t);
            let (key, n) = (x >> 8 & 7, x >> 16 & 3);
            for ((name, a), (_, b)) in reference.iter().zip(&moved) {
                let (ra, rb) = match x >> 24 & 7 {
                    0 => (a.peek(key, n), b.peek(key, n)),
                    1 => (a.refund(key, n), b.refund(key, n)),
                    2 if step % 5 == 0 => (a.upkeep(x >> 32), b.upkeep(x >> 32)),
                    _ => (a.acquire(key, n), b.acquire(key, n)),
                };
                assert_eq!(ra, rb, "{name}, {quota:?}, step {step}, t {t}");
            }
        }
    }
}

#[test]
fn a_clock_at_unix_time_decides_as_a_clock_at_zero() {
    differential(UNIX_NOW, 0, 1, 3_000, false);
}

#[test]
fn a_clock_past_two_to_the_63_decides_as_a_clock_at_zero() {
    // A counter that has run for centuries: most of its range used before the limiter
    // (1.76 × 10^19, room left for the horizon and then some).
    differential(10 * UNIX_NOW, 0, 2, 3_000, true);
}

#[test]
fn up_to_and_past_the_horizon_of_the_limiters_own_time() {
    differential(UNIX_NOW, 0, 3, 3_000, true);
    differential(0, 0, 4, 1_000, true);
}

#[test]
fn windows_stay_aligned_to_the_clocks_zero() {
    // A start 1.234 s into a second: the fixed window still changes on the clock's whole
    // seconds, as for a clock that read 1.234 s when the limiter was made.
    let off = 1_234_567_891;
    differential(UNIX_NOW + off, off, 5, 3_000, true);
}

#[test]
fn a_limiter_on_a_unix_clock_refills() {
    // The plain statement of the bug: a limiter made on a clock past the horizon from its
    // zero must refill, not admit its burst once and freeze.
    let quota = Quota::per_second(2).unwrap();
    let clock = Shifted::new(UNIX_NOW);
    let limiters: Vec<Box<dyn Limiter>> = vec![
        Box::new(TokenBucket::with_clock(quota, clock.clone())),
        Box::new(FixedWindow::with_clock(quota, clock.clone())),
        Box::new(SlidingWindow::with_clock(quota, clock.clone())),
        Box::new(SlidingLog::try_with_clock(quota, clock.clone()).unwrap()),
        Box::new(MutexTokenBucket::with_clock(quota, clock.clone())),
        Box::new(MutexFixedWindow::with_clock(quota, clock.clone())),
        Box::new(MutexSlidingWindow::with_clock(quota, clock.clone())),
        Box::new(MutexSlidingLog::try_with_clock(quota, clock.clone()).unwrap()),
    ];
    for l in &limiters {
        assert_eq!(common::admitted(l.as_ref(), 3), 2);
    }
    clock.set(2_000_000_000);
    for l in &limiters {
        assert_eq!(common::admitted(l.as_ref(), 3), 2, "refilled after 2 s");
    }
}

#[test]
fn a_clock_stepped_back_past_the_start_stands_still_at_the_start() {
    let quota = Quota::per_second(1).unwrap();
    let clock = Shifted::new(UNIX_NOW);
    let bucket = TokenBucket::with_clock(quota, clock.clone());
    assert!(bucket.try_acquire().is_allowed());
    clock.set(-10_000_000_000); // ten seconds before the start: reads as the start
    let d = bucket.try_acquire();
    assert!(!d.is_allowed());
    assert_eq!(
        d.retry_after(),
        Some(Duration::from_secs(1)),
        "not the far future"
    );
    clock.set(1_000_000_000);
    assert!(bucket.try_acquire().is_allowed());
}

/// A key used up to its limit at and past the horizon of the map's time: a sweep (the
/// caller's or a full bounded map's) keeps it, and it admits nothing more at that instant.
fn a_used_key_is_not_swept_fresh_past_the_horizon(zero: u64, past: u64) {
    let quota = Quota::per_second(3).unwrap();
    for algorithm in Algorithm::ALL {
        let clock = Shifted::new(zero);
        let map = KeyedLimiter::try_with_clock(algorithm, quota, clock.clone()).unwrap();
        let bounded = KeyedLimiter::builder(algorithm, quota)
            .max_keys(NonZeroUsize::new(1).unwrap(), WhenFull::Deny)
            .build_with_clock(clock.clone())
            .unwrap();
        for at in [HORIZON, HORIZON + past] {
            clock.set(i128::from(at));
            let used = |l: &KeyedLimiter<u64, Shifted>, key: u64| {
                (0..5).filter(|_| l.try_acquire(&key).is_allowed()).count()
            };
            let key = at;
            assert!(used(&map, key) <= 3, "{algorithm:?} at {at}");
            assert_eq!(
                map.evict_idle(),
                0,
                "{algorithm:?}: a used key is not fresh at {at}"
            );
            assert_eq!(used(&map, key), 0, "{algorithm:?}: no fresh limit at {at}");
            // The bounded map: its sweep, run by a new key that finds it full, keeps the key.
            let _ = used(&bounded, key);
            assert!(
                !bounded.try_acquire(&(key + 1)).is_allowed(),
                "{algorithm:?} at {at}"
            );
            assert_eq!(used(&bounded, key), 0, "{algorithm:?}: bounded, at {at}");
            assert_eq!(bounded.evicted_keys(), 0, "{algorithm:?}: bounded, at {at}");
            let _ = bounded.evict_idle();
            assert_eq!(bounded.len(), 1);
        }
    }
}

#[test]
fn a_sweep_past_the_horizon_hands_out_no_fresh_limit() {
    // A clock that runs to the horizon from the map's start, and one whose zero is 1970.
    a_used_key_is_not_swept_fresh_past_the_horizon(0, 5_000_000_000);
    a_used_key_is_not_swept_fresh_past_the_horizon(UNIX_NOW, 5_000_000_000);
    a_used_key_is_not_swept_fresh_past_the_horizon(UNIX_NOW, 1 << 60);
}

std::thread_local! {
    /// Whether this thread reads the [`Lagging`] clock behind the others.
    static BEHIND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How far a lagging thread's readings are behind: within the skew the clock declares.
const LAG: u64 = 8_000;

/// A user clock whose readings on some threads are `LAG` earlier than on the others (as
/// cores whose counters disagree), and which declares it.
#[derive(Clone, Debug, Default)]
struct Lagging(ManualClock);

impl Clock for Lagging {
    fn now_nanos(&self) -> u64 {
        let t = self.0.now_nanos();
        if BEHIND.with(|b| b.get()) {
            t.saturating_sub(LAG)
        } else {
            t
        }
    }
    fn max_skew_nanos(&self) -> u64 {
        LAG
    }
}

/// `n` unit requests for `key` on a thread that reads the clock behind, ordered after
/// everything the caller did before (spawn and join).
fn on_a_lagging_thread(l: &KeyedLimiter<u8, Lagging>, key: u8, n: u64) -> usize {
    std::thread::scope(|s| {
        s.spawn(|| {
            BEHIND.with(|b| b.set(true));
            (0..n).filter(|_| l.try_acquire(&key).is_allowed()).count()
        })
        .join()
        .unwrap()
    })
}

#[test]
fn a_sweep_ahead_of_a_lagging_thread_hands_it_no_fresh_limit() {
    let quota = Quota::per_second(3).unwrap();
    let maps: [(Algorithm, bool); 6] = [
        (Algorithm::TokenBucket, false),
        (Algorithm::FixedWindow, false),
        (Algorithm::SlidingWindow, false),
        (Algorithm::SlidingLog, false),
        (Algorithm::TokenBucket, true),
        (Algorithm::FixedWindow, true),
    ];
    for (algorithm, live) in maps {
        // A key drained at 0 is full again at 1 s (the sliding window: when slot 9 of
        // 125 ms begins); the sweeping thread reads 500 ns past that, the lagging one not.
        let fresh_at = if algorithm == Algorithm::SlidingWindow {
            1_125_000_000
        } else {
            1_000_000_000
        };
        let run = |sweep: u8| {
            let clock = Lagging::default();
            let mut b = KeyedLimiter::<u8>::builder(algorithm, quota)
                .max_keys(NonZeroUsize::new(1).unwrap(), WhenFull::Deny);
            if live {
                b = b.live();
            }
            let l = b.build_with_clock(clock.clone()).unwrap();
            clock.0.set(Duration::from_nanos(LAG));
            assert_eq!(on_a_lagging_thread(&l, 1, 3), 3);
            clock.0.set(Duration::from_nanos(fresh_at + 500));
            match sweep {
                1 => {
                    let _ = l.evict_idle();
                }
                // A new key finds the bounded map full and sweeps it.
                2 => assert!(!l.try_acquire(&2).is_allowed()),
                _ => {}
            }
            on_a_lagging_thread(&l, 1, 3)
        };
        let unswept = run(0);
        assert_eq!(run(1), unswept, "{algorithm:?} (live: {live}), evict_idle");
        assert_eq!(
            run(2),
            unswept,
            "{algorithm:?} (live: {live}), a full map's sweep"
        );
    }
}
