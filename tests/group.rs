//! `Limits`: all or nothing against a reference model, the most restrictive decision, one
//! clock read per check, exactness at a frozen instant under threads, and no member ever
//! over its quota while time moves; a sliding-window member against `SlidingWindow`, beside a
//! bucket, at a frozen instant under threads, and counting every live admission while
//! threads move the clock.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{admitted, ms, Rng};
use tollgate::{
    Clock, Limiter, Limits, LimitsError, ManualClock, Member, Quota, SlidingWindow, TokenBucket,
    MAX_MEMBERS,
};

/// Each member's remaining capacity now, read through a one-member group asking for 0.
fn remaining(m: &Arc<Member>, clock: &ManualClock) -> u64 {
    Limits::try_new(clock.clone(), [m.clone()])
        .unwrap()
        .try_acquire_n(0)
        .remaining()
}

/// A reference for one member, in plain integers: a token bucket whose interval is a whole
/// number of ns, or a fixed window.
#[derive(Clone, Copy, Debug)]
enum Model {
    Bucket {
        interval: u64,
        burst: u64,
        tat: u64,
    },
    Window {
        len: u64,
        limit: u64,
        window: u64,
        count: u64,
    },
}

impl Model {
    /// (admits, remaining after admitting) at `now` for `n`.
    fn peek(&self, now: u64, n: u64) -> (bool, u64) {
        match *self {
            Model::Bucket {
                interval,
                burst,
                tat,
            } => {
                let base = tat.max(now);
                let tokens = (now + burst * interval - base) / interval;
                (n <= tokens, tokens.saturating_sub(n))
            }
            Model::Window {
                len,
                limit,
                window,
                count,
            } => {
                let count = if now / len > window { 0 } else { count };
                (count + n <= limit, (limit - count).saturating_sub(n))
            }
        }
    }

    fn charge(&mut self, now: u64, n: u64) {
        match self {
            Model::Bucket { interval, tat, .. } => *tat = (*tat).max(now) + n * *interval,
            Model::Window {
                len, window, count, ..
            } => {
                if now / *len > *window {
                    (*window, *count) = (now / *len, 0);
                }
                *count += n;
            }
        }
    }
}

/// How many decisions of a random run admitted and how many denied.
#[derive(Default)]
struct Outcomes {
    admitted: u64,
    denied: u64,
}

impl Outcomes {
    fn count(&mut self, allowed: bool) {
        if allowed {
            self.admitted += 1;
        } else {
            self.denied += 1;
        }
    }

    /// Both outcomes common (each above 5 % of the `steps`): the comparison covered both.
    fn assert_both_common(&self, steps: u64, run: &str) {
        let Outcomes { admitted, denied } = self;
        assert!(
            *admitted > steps / 20 && *denied > steps / 20,
            "{run}: {admitted} admitted / {denied} denied"
        );
    }
}

#[test]
fn the_group_admits_exactly_when_every_member_would() {
    let clock = ManualClock::new();
    let members = [
        Arc::new(Member::token_bucket(Quota::per_second(5).unwrap())),
        Arc::new(Member::fixed_window(Quota::per_minute(40).unwrap())),
        Arc::new(Member::token_bucket(
            Quota::try_new(20, ms(2000)).unwrap().with_burst(8).unwrap(),
        )),
    ];
    let mut models = [
        Model::Bucket {
            interval: 200_000_000,
            burst: 5,
            tat: 0,
        },
        Model::Window {
            len: 60_000_000_000,
            limit: 40,
            window: 0,
            count: 0,
        },
        Model::Bucket {
            interval: 100_000_000,
            burst: 8,
            tat: 0,
        },
    ];
    let group = Limits::try_new(clock.clone(), members.clone()).unwrap();
    let mut rng = Rng(11);
    let mut outcomes = Outcomes::default();
    // Shorter under miri, which is a thousand times slower.
    let steps = if cfg!(miri) { 1_000 } else { 20_000 };
    for step in 0..steps {
        clock.advance(ms(rng.below(120)));
        let now = clock.now_nanos();
        let n = rng.below(4);
        let peeks: Vec<_> = models.iter().map(|m| m.peek(now, n)).collect();
        let all = peeks.iter().all(|p| p.0);
        let d = group.try_acquire_n(n);
        assert_eq!(d.is_allowed(), all, "step {step}: {peeks:?} {d:?}");
        outcomes.count(all);
        if all {
            models.iter_mut().for_each(|m| m.charge(now, n));
            let least = peeks.iter().map(|p| p.1).min().unwrap();
            assert_eq!(d.remaining(), least, "step {step}");
        }
        for (m, model) in members.iter().zip(&models) {
            assert_eq!(
                remaining(m, &clock),
                model.peek(now, 0).1,
                "step {step}: {model:?}"
            );
        }
    }
    outcomes.assert_both_common(steps, "the run");
}

#[test]
fn a_denial_charges_no_member_and_names_the_tightest() {
    let clock = ManualClock::new();
    let wide = Arc::new(Member::token_bucket(Quota::per_second(10).unwrap()));
    let narrow = Arc::new(Member::fixed_window(Quota::per_second(2).unwrap()));
    let group = Limits::try_new(clock.clone(), [wide.clone(), narrow.clone()]).unwrap();
    clock.advance(ms(250));
    assert!(group.try_acquire_n(2).is_allowed());
    let (d, by) = group.try_acquire_explained(1);
    assert!(!d.is_allowed());
    assert_eq!((by, d.retry_after()), (1, Some(ms(750))));
    assert_eq!(
        remaining(&wide, &clock),
        8,
        "the denial took nothing from the wide member"
    );
    let (d, by) = group.try_acquire_explained(11);
    assert!(
        d.exceeds_capacity() && by == 0,
        "a cost above a capacity beats a wait"
    );
    assert_eq!(remaining(&wide, &clock), 8);
    // Both deny: the longer wait is reported.
    let _ = Limits::try_new(clock.clone(), [wide.clone()])
        .unwrap()
        .try_acquire_n(8);
    let (d, by) = group.try_acquire_explained(1);
    assert_eq!((by, d.retry_after()), (1, Some(ms(750))));
    clock.advance(ms(750));
    let (d, by) = group.try_acquire_explained(1);
    assert!(d.is_allowed(), "{d:?}");
    // The bucket has 6 left after this one (7.5 refilled since 250 ms), the new window 1.
    assert_eq!((by, d.remaining()), (1, 1));
    assert_eq!(remaining(&wide, &clock), 6);
}

#[test]
fn bad_groups_are_refused() {
    let none: Vec<Arc<Member>> = Vec::new();
    assert_eq!(
        Limits::try_new(ManualClock::new(), none).unwrap_err(),
        LimitsError::Empty
    );
    let many =
        (0..=MAX_MEMBERS).map(|_| Arc::new(Member::token_bucket(Quota::per_second(1).unwrap())));
    let err = Limits::try_new(ManualClock::new(), many).unwrap_err();
    assert_eq!(
        err,
        LimitsError::TooMany {
            members: MAX_MEMBERS + 1
        }
    );
    assert!(err.to_string().contains("at most 8"));
}

/// A manual clock that counts its readings.
#[derive(Clone, Default)]
struct Counting {
    clock: ManualClock,
    reads: Arc<AtomicU64>,
}
impl Clock for Counting {
    fn now_nanos(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.clock.now_nanos()
    }
}

#[test]
fn every_check_reads_the_clock_once() {
    let clock = Counting::default();
    let group = Limits::try_new(
        clock.clone(),
        [
            Arc::new(Member::token_bucket(Quota::per_second(3).unwrap())),
            Arc::new(Member::fixed_window(Quota::per_second(2).unwrap())),
            Arc::new(Member::token_bucket(Quota::per_second(1).unwrap())),
        ],
    )
    .unwrap();
    // One reading when the group is made: where its members' time starts.
    assert_eq!(clock.reads.load(Ordering::Relaxed), 1);
    for i in 1..=10 {
        let _ = group.try_acquire();
        assert_eq!(clock.reads.load(Ordering::Relaxed), 1 + i);
    }
}

/// Unit requests, `each` per thread on `threads` threads at once: how many passed.
fn admitted_by_threads(group: &Limits<ManualClock>, threads: usize, each: usize) -> u64 {
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..each {
                    if group.try_acquire().is_allowed() {
                        // Relaxed: a tally read after the threads are joined.
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    admitted.into_inner()
}

#[test]
fn threads_at_a_frozen_instant_admit_exactly_what_is_left() {
    // Shorter under miri: 2 rounds of 2 threads (80 requests still ask for more than the
    // fixed window's 60 + round).
    let (rounds, threads) = if cfg!(miri) { (2, 2) } else { (20u64, 4) };
    for round in 0..rounds {
        let clock = ManualClock::new();
        clock.advance(ms(round * 37));
        let members = [
            Arc::new(Member::token_bucket(Quota::per_second(100).unwrap())),
            Arc::new(Member::fixed_window(Quota::per_second(60 + round).unwrap())),
            Arc::new(Member::token_bucket(Quota::per_second(1000).unwrap())),
        ];
        let group = Limits::try_new(clock.clone(), members.clone()).unwrap();
        let admitted = admitted_by_threads(&group, threads, 40);
        assert_eq!(admitted, 60 + round);
        let left: Vec<_> = members.iter().map(|m| remaining(m, &clock)).collect();
        assert_eq!(left, [100 - admitted, 0, 1000 - admitted], "round {round}");
    }
}

std::thread_local! {
    static LAST_READ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A manual clock that remembers, per thread, the reading it last gave.
#[derive(Clone, Default)]
struct Recording(ManualClock);
impl Clock for Recording {
    fn now_nanos(&self) -> u64 {
        let now = self.0.now_nanos();
        LAST_READ.with(|l| l.set(now));
        now
    }
}

/// Two groups on `clock`, each of the members `members()` gives it.
fn two_groups(clock: &Recording, members: impl Fn() -> [Arc<Member>; 2]) -> [Limits<Recording>; 2] {
    [(); 2].map(|_| Limits::try_new(clock.clone(), members()).unwrap())
}

/// The clock readings of the admissions of 4 racing threads, by thread: thread `t` checks
/// `groups[t % 2]` with a generator seeded `seed(t)`, and while `more(i)` for its `i`-th
/// check first moves the clock by what `step` draws (if anything), then checks.
fn admissions_of_racing_threads(
    groups: &[Limits<Recording>; 2],
    clock: &Recording,
    seed: impl Fn(usize) -> u64 + Sync,
    more: impl Fn(usize) -> bool + Sync,
    step: impl Fn(&mut Rng) -> Option<Duration> + Sync,
) -> Vec<Vec<u64>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (group, seed, more, step) = (&groups[t % 2], &seed, &more, &step);
                s.spawn(move || {
                    let mut rng = Rng(seed(t));
                    let mut stamps = Vec::new();
                    for _ in (0..).take_while(|&i| more(i)) {
                        if let Some(by) = step(&mut rng) {
                            clock.0.advance(by);
                        }
                        if group.try_acquire().is_allowed() {
                            stamps.push(LAST_READ.with(|l| l.get()));
                        }
                    }
                    stamps
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn no_member_goes_over_its_quota_while_time_moves() {
    // A shared global bucket in two groups, with per-group windows; threads move the clock.
    let clock = Recording::default();
    let global = Arc::new(Member::token_bucket(
        Quota::per_second(50).unwrap().with_burst(10).unwrap(),
    ));
    let groups = two_groups(&clock, || {
        let window = Arc::new(Member::fixed_window(Quota::try_new(15, ms(100)).unwrap()));
        [window, global.clone()]
    });
    // Shorter under miri: 100 ms of clock, in which the global bucket can admit its burst of 10
    // and 5 more.
    let end = if cfg!(miri) {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(2)
    };
    let stamps = admissions_of_racing_threads(
        &groups,
        &clock,
        |t| t as u64 + 1,
        |_| clock.0.now() < end,
        |rng| (rng.below(4) == 0).then(|| Duration::from_micros(rng.below(500))),
    );
    // Each group's window: at most 15 per 100 ms window (threads t and t + 2 share group t).
    for g in 0..2 {
        let mut per_window = std::collections::HashMap::<u64, u64>::new();
        for &t in stamps[g].iter().chain(&stamps[g + 2]) {
            *per_window.entry(t / 100_000_000).or_default() += 1;
        }
        assert!(per_window.values().all(|&c| c <= 15), "{per_window:?}");
    }
    let mut all: Vec<u64> = stamps.iter().flatten().copied().collect();
    all.sort_unstable();
    // The global bucket: in any span [a, b] at most burst + (b - a) × rate admissions (each
    // admission's reading is at most its check's, so a span of readings bounds it).
    for (i, &a) in all.iter().enumerate() {
        for (j, &b) in all.iter().enumerate().skip(i) {
            let allowed = 10 + (b - a) / 20_000_000;
            assert!((j - i + 1) as u64 <= allowed, "{} in [{a}, {b}]", j - i + 1);
        }
    }
    // More than the burst: the bucket refilled while the threads ran.
    let least = if cfg!(miri) { 11 } else { 50 };
    assert!(all.len() > least, "only {} admitted", all.len());
}

/// The decision a fresh look at one member gives now, writing nothing.
fn look(m: &Arc<Member>, clock: &ManualClock, n: u64) -> tollgate::Decision {
    Limits::try_new(clock.clone(), [m.clone()]).unwrap().peek(n)
}

#[test]
fn a_sliding_member_alone_decides_as_a_sliding_window() {
    // Quotas and slot counts, each a random run of acquires, peeks and refunds on one clock
    // that moves forwards (and now and then back), compared field by field.
    let cases = [
        (Quota::per_second(5).unwrap(), 8),
        (Quota::try_new(20, ms(1_500)).unwrap(), 3),
        (Quota::per_minute(7).unwrap(), 1),
        (Quota::try_new(3, ms(90)).unwrap(), 16),
    ];
    let steps = if cfg!(miri) { 120 } else { 6_000 };
    for (case, (quota, slots)) in cases.into_iter().enumerate() {
        let clock = ManualClock::new();
        let window = SlidingWindow::try_with_slots(quota, slots, clock.clone()).unwrap();
        let member = Arc::new(Member::try_sliding_window_with_slots(quota, slots).unwrap());
        let group = Limits::try_new(clock.clone(), [member.clone()]).unwrap();
        let mut rng = Rng(case as u64 + 5);
        let period = quota.period().as_nanos() as u64;
        let mut outcomes = Outcomes::default();
        for step in 0..steps {
            match rng.below(20) {
                0 => clock.set(Duration::from_nanos(
                    clock.now_nanos().saturating_sub(period / 3),
                )),
                _ => clock.advance(Duration::from_nanos(rng.below(period / 4 + 1))),
            }
            let n = match rng.below(10) {
                0 => quota.limit() + 1 + rng.below(3), // above the capacity
                1 => 0,
                _ => 1 + rng.below(3),
            };
            match rng.below(6) {
                0 => assert_eq!(group.peek(n), window.peek(n), "case {case} step {step}"),
                1 => assert_eq!(group.refund(n), window.refund(n), "case {case} step {step}"),
                _ => {
                    let d = group.try_acquire_n(n);
                    assert_eq!(d, window.try_acquire_n(n), "case {case} step {step}");
                    outcomes.count(d.is_allowed());
                }
            }
            assert_eq!(
                look(&member, &clock, 1),
                window.peek(1),
                "case {case} step {step}"
            );
        }
        outcomes.assert_both_common(steps, &format!("case {case}"));
    }
}

#[test]
fn a_sliding_member_and_a_bucket_charge_both_or_neither() {
    // The group against its two members' limiters run side by side: it admits exactly when
    // both would, charges both then, neither on a denial, and reports the tighter decision.
    let clock = ManualClock::new();
    let (w, b) = (
        Quota::try_new(8, ms(2_000)).unwrap(),
        Quota::per_second(4).unwrap().with_burst(3).unwrap(),
    );
    let sliding = Arc::new(Member::sliding_window(w));
    let bucket = Arc::new(Member::token_bucket(b));
    let group = Limits::try_new(clock.clone(), [sliding.clone(), bucket.clone()]).unwrap();
    let (ref_w, ref_b) = (
        SlidingWindow::with_clock(w, clock.clone()),
        TokenBucket::with_clock(b, clock.clone()),
    );
    let mut rng = Rng(23);
    let steps = if cfg!(miri) { 200 } else { 20_000 };
    let (mut by_window, mut by_bucket, mut admitted) = (0, 0, 0);
    for step in 0..steps {
        clock.advance(ms(rng.below(150)));
        let n = rng.below(4);
        let (pw, pb) = (ref_w.peek(n), ref_b.peek(n));
        let (d, by) = group.try_acquire_explained(n);
        assert_eq!(
            d.is_allowed(),
            pw.is_allowed() && pb.is_allowed(),
            "step {step}"
        );
        if d.is_allowed() {
            admitted += 1;
            assert!(ref_w.try_acquire_n(n).is_allowed() && ref_b.try_acquire_n(n).is_allowed());
            assert_eq!(
                d,
                [pw, pb][by],
                "step {step}: the decision is member {by}'s"
            );
            assert_eq!(
                d.remaining(),
                pw.remaining().min(pb.remaining()),
                "step {step}"
            );
        } else {
            if !pw.is_allowed() && pb.is_allowed() {
                by_window += 1;
            }
            if pw.is_allowed() && !pb.is_allowed() {
                by_bucket += 1;
            }
        }
        // Each member holds exactly what its own limiter holds: a denial by one charged
        // neither.
        assert_eq!(look(&sliding, &clock, 1), ref_w.peek(1), "step {step}");
        assert_eq!(look(&bucket, &clock, 1), ref_b.peek(1), "step {step}");
    }
    // Both members denied alone while the other would have admitted, often.
    let often = steps / 50;
    assert!(
        by_window > often && by_bucket > often && admitted > often,
        "{by_window} / {by_bucket} / {admitted}"
    );
}

#[test]
fn threads_at_a_frozen_instant_admit_exactly_the_sliding_members_allowance() {
    // The sliding member is the tightest; its head starts in an older slot, so the first
    // charge of each round moves it (writing the finished slot to the ring) while the others
    // race it.
    let (rounds, threads) = if cfg!(miri) { (2, 2) } else { (20u64, 4) };
    for round in 0..rounds {
        let clock = ManualClock::new();
        let limit = 60 + round;
        let members = [
            Arc::new(Member::token_bucket(Quota::per_second(100).unwrap())),
            Arc::new(Member::sliding_window(Quota::per_second(limit).unwrap())),
            Arc::new(Member::token_bucket(Quota::per_second(1000).unwrap())),
        ];
        let group = Limits::try_new(clock.clone(), members.clone()).unwrap();
        clock.set(ms(100));
        assert_eq!(admitted(&group, 10), 10);
        // A later slot of the same window: the 10 still count; the buckets are full again.
        clock.set(ms(600 + round * 13));
        let allowance = limit - 10;
        let taken = admitted_by_threads(&group, threads, 40);
        assert_eq!(taken, allowance, "round {round}");
        let left: Vec<_> = members.iter().map(|m| remaining(m, &clock)).collect();
        assert_eq!(left, [100 - taken, 0, 1000 - taken], "round {round}");
    }
}

#[test]
fn no_sliding_member_counts_less_than_its_live_admissions_while_time_moves() {
    // Two groups share a sliding member (10 per 100 ms in 4 slots of 25 ms) with a bucket
    // each that denies now and then, so charges of the sliding member are rolled back while
    // threads move the clock across slots. An admission counts in a slot at or after the one
    // its reading falls in, so when the threads are done, every admission read in the last
    // `K + 1` slots must still be counted: the member never has more left than the limit
    // minus those (a rollback that gave back a unit counted elsewhere would).
    let clock = Recording::default();
    let sliding = Arc::new(
        Member::try_sliding_window_with_slots(Quota::try_new(10, ms(100)).unwrap(), 4).unwrap(),
    );
    let groups = two_groups(&clock, || {
        let bucket = Arc::new(Member::token_bucket(Quota::try_new(6, ms(100)).unwrap()));
        [sliding.clone(), bucket]
    });
    let rounds = if cfg!(miri) { 3 } else { 200 };
    let mut checked = 0;
    for round in 0..rounds {
        let stamps: Vec<u64> = admissions_of_racing_threads(
            &groups,
            &clock,
            |t| (round * 4 + t) as u64 + 1,
            |i| i < 30,
            |rng| (rng.below(3) == 0).then(|| Duration::from_micros(rng.below(4_000))),
        )
        .concat();
        let now = clock.0.now_nanos();
        let first_live = (now / 25_000_000).saturating_sub(4) * 25_000_000;
        let live = stamps.iter().filter(|&&t| t >= first_live).count() as u64;
        let left = remaining(&sliding, &clock.0);
        assert!(
            left + live <= 10,
            "round {round}: {left} left, {live} live admissions"
        );
        checked += live;
    }
    assert!(
        checked > rounds as u64,
        "only {checked} live admissions checked"
    );
}

/// A callback a clock runs once.
type Hook = Arc<std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A manual clock that, on its `at`-th reading, first runs a callback (once).
#[derive(Clone)]
struct Hooked {
    clock: ManualClock,
    reads: Arc<AtomicU64>,
    at: u64,
    hook: Hook,
}
impl Clock for Hooked {
    fn now_nanos(&self) -> u64 {
        if self.reads.fetch_add(1, Ordering::Relaxed) + 1 == self.at {
            let hook = self.hook.lock().unwrap().take();
            if let Some(hook) = hook {
                hook();
            }
        }
        self.clock.now_nanos()
    }
}

#[test]
fn a_bucket_rollback_gives_back_only_what_a_later_charge_left_owed() {
    // Bucket B: 1 per second, burst 2. Window W: 1 per hour, listed twice in A's group, so
    // that A's check charges B, charges W, then finds W used up at its second listing and
    // rolls back. Its rollback reads the clock (the 2nd reading): at that moment another
    // group charges B at 0.9 s (tat 1 s -> 2 s), building on A's charge.
    let clock = ManualClock::new();
    let b = Arc::new(Member::token_bucket(
        Quota::per_second(1).unwrap().with_burst(2).unwrap(),
    ));
    let w = Arc::new(Member::fixed_window(Quota::per_hour(1).unwrap()));
    let other = Limits::try_new(clock.clone(), [b.clone()]).unwrap();
    let hooked = Hooked {
        clock: clock.clone(),
        reads: Arc::default(),
        at: 2,
        hook: Arc::default(),
    };
    let (late, other_clock) = (clock.clone(), other);
    *hooked.hook.lock().unwrap() = Some(Box::new(move || {
        late.set(ms(900));
        assert!(other_clock.try_acquire().is_allowed());
    }));
    let a = Limits::try_new(hooked.clone(), [b.clone(), w.clone(), w.clone()]).unwrap();
    let (d, by) = a.try_acquire_explained(1);
    assert!(!d.is_allowed() && by == 2, "{d:?} by {by}");
    // The limiter's start, the check, the rollback (again after a compare-exchange that
    // failed, as a weak one may spuriously, e.g. under miri).
    assert!(
        hooked.reads.load(Ordering::Relaxed) >= 3,
        "the rollback read the clock"
    );
    assert_eq!(
        remaining(&w, &clock),
        1,
        "the window's charge was given back"
    );
    // B now holds what the charge at 0.9 s alone would have left (tat 1.9 s): at 1 s one
    // more passes, 2 in [0.9 s, 1 s], the burst. Giving back A's whole charge (tat 1 s)
    // would let two pass at 1 s: 3 in 0.1 s.
    clock.set(ms(1_000));
    let alone = Limits::try_new(clock.clone(), [b]).unwrap();
    assert_eq!(
        (0..4).filter(|_| alone.try_acquire().is_allowed()).count(),
        1
    );
}
