//! Stress on real threads: each lock-free limiter and its mutex twin run the same seeded
//! workload on 2 and on 4 threads (requests of random costs, refunds right after some
//! admissions) while a controller steps a shared `ManualClock` forward many times, and now and
//! then back a little. Every admission and refund is then checked against the bound the
//! limiter documents:
//!
//! | limiter        | an operation's instant                   | bound checked                          |
//! |----------------|------------------------------------------|----------------------------------------|
//! | fixed window   | window `(now + reset_after) / period - 1` | per window, admitted - refunded ≤ limit |
//! | sliding window | slot `(now + reset_after) / len - K - 1`  | any `K + 1` slots, net ≤ limit          |
//! | sliding log    | `now + reset_after - period`             | any `period`, admitted ≤ limit          |
//! | token bucket   | the clock reading                        | `[a, b]`: net ≤ burst + rate·(b - a)    |
//!
//! A refund counts at its own clock reading (window or slot `now / len`): a window limiter
//! gives back only into the window (slot) its reading falls in. Each operation reads the clock
//! exactly once (checked), through a [`Clock`] that keeps its reading in a thread-local.
//!
//! The checks can fail: the same harness runs two deliberately broken wrappers (one charges a
//! unit less than asked, one gives back a unit more than it reports) and asserts that the
//! checker reports each of them.
//!
//! Before the threads, a seeded sequence of requests, refunds and clock steps (back ones
//! included) runs on one thread against both the lock-free limiter and its twin, decision by
//! decision: they must answer alike.

mod common;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::Rng;
use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{
    Clock, FixedWindow, Limiter, ManualClock, Quota, SlidingLog, SlidingWindow, TokenBucket,
};

thread_local! {
    /// The last reading a `Recording` clock returned on this thread, and how many it returned.
    static READING: Cell<(u64, u32)> = const { Cell::new((0, 0)) };

}

/// A manual clock that keeps each reading it returns in a thread-local.
#[derive(Clone, Default)]
struct Recording(ManualClock);

impl Clock for Recording {
    fn now_nanos(&self) -> u64 {
        let t = self.0.now_nanos();
        READING.with(|r| r.set((t, r.get().1 + 1)));
        t
    }
}

/// Runs `op` and returns its result with the one clock reading it made, and how many it made.
fn timed<T>(op: impl FnOnce() -> T) -> (T, u64, u32) {
    READING.with(|r| r.set((0, 0)));
    let out = op();
    let (t, made) = READING.with(Cell::get);
    assert!(made <= 1, "an operation reads the clock at most once");
    (out, t, made)
}

/// Operations per worker (the tests are not for miri: thousands of steps on real threads).
const OPS: u64 = 3_000;

/// Operations a worker may make per clock step.
const PER_STEP: u64 = 2;
const PERIOD: u64 = 1_000_000; // 1 ms
const LIMIT: u64 = 8;
const SLOTS: u64 = 8;

fn quota() -> Quota {
    Quota::try_new(LIMIT, Duration::from_nanos(PERIOD)).expect("valid quota")
}

/// One operation a worker made: `cost` admitted (with its decision's `reset_after`) or
/// `refunded` given back, at clock reading `at`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Event {
    Admitted { at: u64, cost: u64, reset: u64 },
    Refunded { at: u64, given: u64 },
    Denied,
}

/// The workload of one worker: random costs, a refund right after some admissions.
fn worker(limiter: &dyn Limiter, refunds: bool, seed: u64, pace: [&AtomicU64; 2]) -> Vec<Event> {
    let [done, steps] = pace;
    let mut rng = Rng(seed);
    let mut events = Vec::new();
    for i in 0..OPS {
        // At most `PER_STEP` operations per clock step, so that time moves during the run.
        // Relaxed: pacing only, the clock's own atomics order the readings.
        while steps.load(Ordering::Relaxed) < i / PER_STEP {
            std::thread::yield_now();
        }
        let cost = 1 + rng.below(3);
        let (d, at, reads) = timed(|| limiter.try_acquire_n(cost));
        assert_eq!(reads, 1, "a request reads the clock once");
        if d.is_allowed() {
            let reset = u64::try_from(d.reset_after().as_nanos()).expect("short reset");
            events.push(Event::Admitted { at, cost, reset });
            if rng.below(3) == 0 {
                let n = 1 + rng.below(cost);
                let (given, at, reads) = timed(|| limiter.refund(n));
                // A refund that gives back reads the clock (the log's, giving nothing, may not).
                assert!(reads == 1 || given == 0 && !refunds);
                assert!(given <= n, "a refund gives back at most what it was asked");
                if given > 0 {
                    events.push(Event::Refunded { at, given });
                }
            }
        } else {
            events.push(Event::Denied);
        }
        // Relaxed: a progress counter for the controller's pacing only.
        done.fetch_add(1, Ordering::Relaxed);
    }
    events
}

/// `threads` workers on `limiter` while a controller steps `clock`; all workers' events.
fn run(
    limiter: &dyn Limiter,
    refunds: bool,
    clock: &ManualClock,
    threads: u64,
    seed: u64,
) -> Vec<Event> {
    let done = AtomicU64::new(0);
    let steps = AtomicU64::new(0);
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (done, steps) = (&done, &steps);
                s.spawn(move || worker(limiter, refunds, seed ^ ((i + 1) * 0x9E37), [done, steps]))
            })
            .collect();
        s.spawn(|| {
            let mut rng = Rng(seed);
            let mut seen = 0;
            // Acquire pairs with the Release store below: nothing else rides on it.
            while !finished.load(Ordering::Acquire) {
                // Step after a few operations, so windows fill up between steps.
                let now_done = done.load(Ordering::Relaxed);
                if now_done < seen + 1 + rng.below(PER_STEP) {
                    std::thread::yield_now();
                    continue;
                }
                seen = now_done;
                let now = clock.now_nanos();
                if rng.below(8) == 0 {
                    clock.set(Duration::from_nanos(
                        now.saturating_sub(rng.below(PERIOD / 4)),
                    ));
                } else {
                    clock.advance(Duration::from_nanos(rng.below(PERIOD / 6)));
                }
                // Relaxed: pacing only.
                steps.fetch_add(1, Ordering::Relaxed);
            }
        });
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        // Release: ends the controller's loop (also when a worker panicked).
        finished.store(true, Ordering::Release);
        joined
            .into_iter()
            .flat_map(|w| w.unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Units admitted minus units refunded per span of `len` ns: an admission counts in the span
/// it charged, `ahead` spans before the one its reset ends in; a refund in the span of its
/// reading.
fn net_per_span(events: &[Event], len: u64, ahead: u64) -> std::collections::BTreeMap<u64, i64> {
    let mut net = std::collections::BTreeMap::<u64, i64>::new();
    for e in events {
        match *e {
            Event::Admitted { at, cost, reset } => {
                *net.entry((at + reset) / len - ahead).or_default() += cost as i64;
            }
            Event::Refunded { at, given } => *net.entry(at / len).or_default() -= given as i64,
            Event::Denied => {}
        }
    }
    net
}

/// Fixed window: per window, admitted - refunded ≤ limit. `Err` names the first window over.
fn check_fixed(events: &[Event]) -> Result<(), String> {
    // An admission's reset ends at its window's end.
    let net = net_per_span(events, PERIOD, 1);
    match net.iter().find(|&(_, &n)| n > LIMIT as i64) {
        Some((w, n)) => Err(format!("window {w} admitted {n} net, limit {LIMIT}")),
        None => Ok(()),
    }
}

/// Sliding window: any `K + 1` consecutive slots hold at most `limit` net.
fn check_sliding(events: &[Event]) -> Result<(), String> {
    // An admission's reset ends when its slot leaves the window, `K + 1` slots on.
    let net = net_per_span(events, PERIOD.div_ceil(SLOTS), SLOTS + 1);
    for &e in net.keys() {
        let held: i64 = net.range(e.saturating_sub(SLOTS)..=e).map(|(_, n)| n).sum();
        if held > LIMIT as i64 {
            return Err(format!("slots up to {e} hold {held} net, limit {LIMIT}"));
        }
    }
    Ok(())
}

/// Sliding log: any `period` holds at most `limit` admissions; it never refunds.
fn check_log(events: &[Event]) -> Result<(), String> {
    let mut times = Vec::new();
    for e in events {
        match *e {
            Event::Admitted { at, cost, reset } => {
                times.extend(std::iter::repeat_n(at + reset - PERIOD, cost as usize));
            }
            Event::Refunded { given, .. } => return Err(format!("the log gave back {given}")),
            Event::Denied => {}
        }
    }
    times.sort_unstable();
    let mut first = 0;
    for (i, &t) in times.iter().enumerate() {
        while t - times[first] >= PERIOD {
            first += 1;
        }
        if (i - first + 1) as u64 > LIMIT {
            return Err(format!(
                "{} admissions in a period ending at {t}",
                i - first + 1
            ));
        }
    }
    Ok(())
}

/// Token bucket: for every `[a, b]` between two admission readings, admitted in `[a, b]` minus
/// refunded in `[a - C, b + C]` ≤ burst + limit·(b - a)/period, where `C = period` is the
/// bucket's capacity in time (burst = limit). The margin: a refund read up to `C` away from
/// the admissions it frees can still lower the bucket they find.
fn check_bucket(events: &[Event]) -> Result<(), String> {
    let mut adm = std::collections::BTreeMap::<u64, u64>::new();
    let mut refs = std::collections::BTreeMap::<u64, u64>::new();
    for e in events {
        match *e {
            Event::Admitted { at, cost, .. } => *adm.entry(at).or_default() += cost,
            Event::Refunded { at, given } => *refs.entry(at).or_default() += given,
            Event::Denied => {}
        }
    }
    let times: Vec<(u64, u64)> = adm.into_iter().collect();
    // Refund readings and the units given back up to each (inclusive prefix sums).
    let (ref_at, ref_sum): (Vec<u64>, Vec<u64>) = refs
        .into_iter()
        .scan(0, |sum, (t, n)| {
            *sum += n;
            Some((t, *sum))
        })
        .unzip();
    let upto = |k: usize| if k == 0 { 0 } else { ref_sum[k - 1] };
    let cap = PERIOD;
    for (i, &(a, _)) in times.iter().enumerate() {
        let below = upto(ref_at.partition_point(|&t| t < a.saturating_sub(cap)));
        let (mut admitted, mut hi) = (0, 0);
        for &(b, n) in &times[i..] {
            admitted += n;
            while hi < ref_at.len() && ref_at[hi] <= b + cap {
                hi += 1;
            }
            let refunded = upto(hi) - below;
            let bound = LIMIT + LIMIT * (b - a) / PERIOD;
            if admitted > bound + refunded {
                return Err(format!(
                    "[{a}, {b}]: admitted {admitted}, refunded {refunded}, bound {bound}"
                ));
            }
        }
    }
    Ok(())
}

/// Charges one unit less than asked for costs above one: admits one extra.
struct Undercharges<L>(L);

impl<L: Limiter> Limiter for Undercharges<L> {
    fn try_acquire_n(&self, n: u64) -> tollgate::Decision {
        self.0.try_acquire_n(if n > 1 { n - 1 } else { n })
    }
    fn refund(&self, n: u64) -> u64 {
        self.0.refund(n)
    }
}

/// Gives back one unit more than it reports.
struct RefundsOneMore<L>(L);

impl<L: Limiter> Limiter for RefundsOneMore<L> {
    fn try_acquire_n(&self, n: u64) -> tollgate::Decision {
        self.0.try_acquire_n(n)
    }
    fn refund(&self, n: u64) -> u64 {
        self.0.refund(n + 1).min(n)
    }
}

type Check = fn(&[Event]) -> Result<(), String>;

/// The whole harness for one family: the same workload on one thread against both (decisions
/// alike), then 2 and 4 threads on each, every event checked; then the broken wrappers.
fn family<A, B>(
    make_a: impl Fn(Recording) -> A,
    make_b: impl Fn(Recording) -> B,
    check: Check,
    refunds: bool,
) where
    A: Limiter + 'static,
    B: Limiter + 'static,
{
    let seed = 0x5EED_0001;
    // One thread, the clock stepped inline: the lock-free limiter and its twin answer alike.
    let (ca, cb) = (Recording::default(), Recording::default());
    let (a, b) = (make_a(ca.clone()), make_b(cb.clone()));
    let mut rng = Rng(seed);
    for _ in 0..OPS {
        let cost = rng.below(4);
        assert_eq!(a.try_acquire_n(cost), b.try_acquire_n(cost));
        let n = rng.below(3);
        assert_eq!(a.refund(n), b.refund(n));
        if rng.below(8) == 0 {
            let back = ca.0.now_nanos().saturating_sub(rng.below(PERIOD / 4));
            ca.0.set(Duration::from_nanos(back));
            cb.0.set(Duration::from_nanos(back));
        } else {
            let step = Duration::from_nanos(rng.below(PERIOD / 6));
            ca.0.advance(step);
            cb.0.advance(step);
        }
    }

    for threads in [2, 4] {
        let seed = seed + threads;
        // `threads` threads on the limiter `make` builds on a fresh recording clock.
        let on_fresh = |make: &dyn Fn(Recording) -> Box<dyn Limiter>| {
            let clock = Recording::default();
            run(&*make(clock.clone()), refunds, &clock.0, threads, seed)
        };
        let events = on_fresh(&|c| Box::new(make_a(c)));
        // Both outcomes are common: the limit was reached, time moved on, again and again.
        let denied = events.iter().filter(|e| **e == Event::Denied).count() as u64;
        let admitted = events.len() as u64 - denied;
        assert!(
            admitted > OPS / 10 && denied > OPS / 5,
            "{admitted} / {denied}"
        );
        check(&events).unwrap_or_else(|e| panic!("lock-free, {threads} threads: {e}"));
        let events = on_fresh(&|c| Box::new(make_b(c)));
        check(&events).unwrap_or_else(|e| panic!("twin, {threads} threads: {e}"));

        // The checker catches a limiter that admits more than its bound.
        let events = on_fresh(&|c| Box::new(Undercharges(make_a(c))));
        assert!(
            check(&events).is_err(),
            "undercharging, {threads} threads: not caught"
        );
        if refunds {
            let events = on_fresh(&|c| Box::new(RefundsOneMore(make_a(c))));
            assert!(
                check(&events).is_err(),
                "over-refunding, {threads} threads: not caught"
            );
        }
    }
}

/// One test a family: `family` over the lock-free limiter and its mutex twin, each built on
/// the recording clock it is handed.
macro_rules! under_threads {
    ($($name:ident: $lock_free:expr, $twin:expr, $check:expr, refunds: $refunds:expr;)*) => {$(
        #[test]
        #[cfg_attr(miri, ignore)]
        fn $name() {
            family($lock_free, $twin, $check, $refunds);
        }
    )*};
}

under_threads! {
    token_bucket_under_threads:
        |c| TokenBucket::with_clock(quota(), c),
        |c| MutexTokenBucket::with_clock(quota(), c),
        check_bucket,
        refunds: true;
    fixed_window_under_threads:
        |c| FixedWindow::with_clock(quota(), c),
        |c| MutexFixedWindow::with_clock(quota(), c),
        check_fixed,
        refunds: true;
    sliding_window_under_threads:
        |c| SlidingWindow::with_clock(quota(), c),
        |c| MutexSlidingWindow::with_clock(quota(), c),
        check_sliding,
        refunds: true;
    sliding_log_under_threads:
        |c| SlidingLog::try_with_clock(quota(), c).expect("small log"),
        |c| MutexSlidingLog::try_with_clock(quota(), c).expect("small log"),
        check_log,
        refunds: false;
}
