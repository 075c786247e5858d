//! `Leased` against its bounds: a deterministic simulation (many virtual threads, one request at
//! a time, on a `ManualClock`, against the `MutexTokenBucket` twin) and a stress run with real
//! threads racing. Nothing sleeps.
//!
//! The virtual threads and the envelope check are shared with the `leased` fuzz target.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use tollgate::baseline::MutexTokenBucket;
use tollgate::{Clock, Lease, LeaseError, Leased, Limiter, ManualClock, Quota, TokenBucket};

#[path = "../fuzz/src/leased/harness.rs"]
mod harness;
use harness::{Cmd, Envelope, Worker};

/// A small deterministic generator (xorshift64*), so every run replays from its seed.
use tollgate_test_support::XorShift64Star as Rng;

/// A token bucket of `quota` on `clock` behind leases of `lease`, to share between threads.
fn shared_bucket(quota: Quota, lease: Lease, clock: &ManualClock) -> Arc<Leased<ManualClock>> {
    Arc::new(Leased::new(
        TokenBucket::with_clock(quota, clock.clone()),
        lease,
    ))
}

/// On a fresh clock, a token bucket of `per_second` per second behind leases of `tokens`
/// tokens that live `ttl`, to share between threads: the clock, the quota and the limiter.
fn bucket(
    per_second: u64,
    tokens: u64,
    ttl: Duration,
) -> (ManualClock, Quota, Arc<Leased<ManualClock>>) {
    let clock = ManualClock::new();
    let quota = Quota::per_second(per_second).unwrap();
    let lease = Lease::try_new(tokens, ttl).unwrap();
    let limiter = shared_bucket(quota, lease, &clock);
    (clock, quota, limiter)
}

/// `n` virtual threads sharing `limiter`.
fn workers(limiter: &Arc<Leased<ManualClock>>, n: usize) -> Vec<Worker> {
    (0..n).map(|_| Worker::spawn(limiter.clone())).collect()
}

/// Ends every thread of `workers`: each gives its lease back before its exit returns.
fn exit_all(workers: impl IntoIterator<Item = Worker>) {
    for w in workers {
        w.exit();
    }
}

/// The bucket's own level, exactly: a cost of 0 is decided by the bucket alone.
fn level(limiter: &Leased<ManualClock>) -> u64 {
    limiter.try_acquire_n(0).remaining()
}

#[derive(Clone, Copy, Debug)]
struct Setup {
    quota: Quota,
    lease: Lease,
    threads: usize,
    steps: usize,
    seed: u64,
}

#[derive(Debug, Default)]
struct Tally {
    leased: u64,
    twin: u64,
    requests: u64,
    /// Admitted by the twin, denied by `Leased`.
    spurious: u64,
    /// Admitted by `Leased`, denied by the twin.
    extra: u64,
}

/// Runs the seeded schedule: requests of mixed costs from random virtual threads, small
/// advances, idle gaps past the lease's ttl, jumps of seconds, steps back, threads exiting and
/// new ones starting, give-backs. Checks the envelope on every admission of both limiters
/// (the twin with no slack, `Leased` with `max_overshoot()`).
fn simulate(s: Setup) -> Tally {
    let clock = ManualClock::new();
    let limiter = shared_bucket(s.quota, s.lease, &clock);
    let twin = MutexTokenBucket::with_clock(s.quota, clock.clone());
    let x = limiter.max_overshoot();
    let mut leased_env = Envelope::new(&s.quota, x);
    let mut twin_env = Envelope::new(&s.quota, 0);
    let mut rng = Rng(s.seed | 1);
    let mut workers = workers(&limiter, s.threads);
    let ttl = duration_ns(s.lease.ttl());
    let bypass = s.lease.bypass_above();
    let mut tally = Tally::default();
    for step in 0..s.steps {
        let now = clock.now_nanos();
        match rng.below(100) {
            0..=69 => {
                let n = match rng.below(20) {
                    0 => 0,
                    1..=2 => 2 + rng.below(bypass.max(2) - 1),
                    3 => bypass + 1 + rng.below(s.quota.burst()),
                    _ => 1,
                };
                let w = rng.below(workers.len() as u64) as usize;
                let (got, _) = workers[w].run(Cmd::Acquire(n));
                let exact = twin.try_acquire_n(n);
                tally.requests += 1;
                if got.is_allowed() && n > 0 {
                    tally.leased += n;
                    leased_env
                        .admit(now, n)
                        .unwrap_or_else(|e| panic!("Leased, step {step}, seed {}: {e}", s.seed));
                }
                if exact.is_allowed() && n > 0 {
                    tally.twin += n;
                    twin_env
                        .admit(now, n)
                        .unwrap_or_else(|e| panic!("twin, step {step}, seed {}: {e}", s.seed));
                }
                match (got.is_allowed(), exact.is_allowed()) {
                    (false, true) => tally.spurious += 1,
                    (true, false) => tally.extra += 1,
                    _ => {}
                }
                // A cost the bucket can never hold is refused the same way by both.
                assert_eq!(got.exceeds_capacity(), exact.exceeds_capacity());
            }
            70..=84 => clock.advance(Duration::from_nanos(rng.below(ttl / 4 + 2))),
            85..=88 => clock.advance(Duration::from_nanos(ttl + rng.below(4 * ttl))),
            89 => clock.advance(Duration::from_secs(1 + rng.below(3))),
            90..=91 => clock.set(Duration::from_nanos(now.saturating_sub(rng.below(2 * ttl)))),
            92..=94 => {
                let w = rng.below(workers.len() as u64) as usize;
                let old = workers.swap_remove(w);
                old.exit();
                workers.push(Worker::spawn(limiter.clone()));
            }
            _ => {
                let w = rng.below(workers.len() as u64) as usize;
                let (bucket, credited) = workers[w].run(Cmd::GiveBack);
                // Never above the burst: what was credited fit in what the bucket missed.
                assert!(bucket.remaining() + credited <= s.quota.burst());
            }
        }
    }
    exit_all(workers);
    tally
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

fn setups() -> Vec<Setup> {
    let mut all = Vec::new();
    let configs = [
        // (limit/s, burst, lease, ttl µs, cap, clock every)
        (1_000, 50, 8, 1_000, 32, 8),
        (100_000, 500, 16, 200, 64, 1),
        (10, 10, 4, 50_000, 4, 3),
        (1_000_000, 2_000, 64, 100, 1_024, 8),
    ];
    for (i, &(limit, burst, tokens, ttl_us, cap, every)) in configs.iter().enumerate() {
        let quota = Quota::per_second(limit).unwrap().with_burst(burst).unwrap();
        let lease = Lease::try_new(tokens, Duration::from_micros(ttl_us))
            .unwrap()
            .with_max_parked(cap)
            .unwrap()
            .with_clock_every(every)
            .unwrap();
        // One seed and short runs under miri, which is a thousand times slower.
        for seed in 0..if cfg!(miri) { 1 } else { 3u64 } {
            all.push(Setup {
                quota,
                lease,
                threads: 4 + 4 * i,
                steps: if cfg!(miri) { 100 } else { 6_000 },
                seed: 0x9e37_79b9 * (seed + 1) + i as u64,
            });
        }
    }
    all
}

#[test]
fn every_admission_stays_in_the_envelope_against_the_twin() {
    let mut requests = 0;
    let mut spurious = 0;
    for s in setups() {
        let t = simulate(s);
        assert!(
            t.leased > 0 && t.twin > 0,
            "the schedule admitted nothing: {t:?}"
        );
        requests += t.requests;
        spurious += t.spurious;
        println!(
            "limit {}/s burst {} lease {} cap {} threads {}: leased {} twin {}, spurious \
             denials {} and extra admissions {} of {} requests",
            s.quota.limit(),
            s.quota.burst(),
            s.lease.max_tokens(),
            s.lease.max_parked(),
            s.threads,
            t.leased,
            t.twin,
            t.spurious,
            t.extra,
            t.requests
        );
    }
    println!(
        "spurious denials: {spurious} of {requests} requests ({:.3} %)",
        100.0 * spurious as f64 / requests as f64
    );
}

#[test]
fn the_envelope_check_catches_an_excess() {
    // The checker itself: at one instant the burst passes, one more does not.
    let quota = Quota::per_second(10).unwrap();
    let mut env = Envelope::new(&quota, 2);
    for _ in 0..12 {
        env.admit(5, 1).unwrap();
    }
    assert!(env.admit(5, 1).is_err());
    // A step back starts afresh; a second later ten more fit again.
    let mut env = Envelope::new(&quota, 0);
    env.admit(0, 10).unwrap();
    assert!(env.admit(999_999_999, 10).is_err());
    let mut env = Envelope::new(&quota, 0);
    env.admit(0, 10).unwrap();
    env.admit(1_000_000_000, 10).unwrap();
}

#[test]
fn a_frozen_instant_admits_exactly_the_burst_across_threads() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(3));
    let quota = Quota::per_second(100).unwrap().with_burst(37).unwrap();
    let lease = Lease::try_new(8, Duration::from_secs(1)).unwrap();
    let limiter = shared_bucket(quota, lease, &clock);
    let workers = workers(&limiter, 9);
    let mut admitted = 0;
    // Round robin until every thread is denied: each leftover lease is spent or given back.
    let mut denied = vec![false; workers.len()];
    while denied.iter().any(|d| !d) {
        for (i, w) in workers.iter().enumerate() {
            let (d, _) = w.run(Cmd::Acquire(1));
            if d.is_allowed() {
                admitted += 1;
            } else {
                denied[i] = true;
            }
        }
    }
    assert_eq!(admitted, 37);
    assert_eq!(level(&limiter), 0);
    exit_all(workers);
}

#[test]
fn exiting_threads_give_their_leases_back() {
    let (_, _, limiter) = bucket(1_000, 32, Duration::from_secs(1));
    let workers = workers(&limiter, 4);
    let mut admitted = 0;
    for w in &workers {
        for _ in 0..10 {
            assert!(w.run(Cmd::Acquire(1)).0.is_allowed());
            admitted += 1;
        }
    }
    // Leases of 1, 2, 4, 8 and 16 tokens: some are parked in each thread.
    assert!(level(&limiter) < 1_000 - admitted);
    exit_all(workers);
    // Conservation at a frozen instant: bucket + admitted = burst, nothing lost.
    assert_eq!(level(&limiter) + admitted, 1_000);
}

#[test]
fn an_empty_bucket_admits_nothing_through_leases() {
    // The regression test of batched consumption (one extra per batch): from empty, with
    // many threads and many calls each, nothing passes.
    let (_, _, limiter) = bucket(64, 16, Duration::from_secs(1));
    assert!(limiter.try_acquire_n(64).is_allowed()); // drained, on the exact path

    // Under miri (~1000× slower) 100 calls per thread instead of 1,000: still many leases'
    // worth (16 tokens at most) each.
    let calls = if cfg!(miri) { 100 } else { 1_000 };
    let passed: u64 = thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..calls)
                        .filter(|_| limiter.try_acquire().is_allowed())
                        .count() as u64
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(passed, 0);
}

#[test]
fn leases_grow_with_demand_and_shrink_as_the_bucket_empties() {
    let (_, _, limiter) = bucket(1_000, 64, Duration::from_secs(1));
    // Demand doubles: leases of 1, 2, 4, 8, 16, 32, 64 (127 tokens) for 127 requests.
    for _ in 0..127 {
        assert!(limiter.try_acquire().is_allowed());
    }
    assert_eq!(level(&limiter), 1_000 - 127);
    assert!(limiter.try_acquire().is_allowed()); // the next lease: 64 more out of the bucket
    assert_eq!(level(&limiter), 1_000 - 127 - 64);
    // Drain the rest: the last grants are single tokens, and the total is the burst.
    let mut admitted = 128;
    while limiter.try_acquire().is_allowed() {
        admitted += 1;
    }
    assert_eq!(admitted, 1_000);
}

#[test]
fn large_costs_bypass_the_lease() {
    let (_, _, limiter) = bucket(100, 16, Duration::from_secs(1));
    let d = limiter.try_acquire_n(9); // above bypass_above() = 8: exact
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 91);
    assert_eq!(level(&limiter), 91);
    let d = limiter.try_acquire_n(101);
    assert!(d.exceeds_capacity() && !d.is_allowed());
}

/// One thread using several leased limiters in turn (the first two found at once, the others
/// by a search): each spends from its own lease, and at a frozen instant each admits exactly
/// its own burst; a limiter dropped and one made after it never share a lease.
#[test]
fn limiters_used_in_turn_on_one_thread_keep_their_own_leases() {
    let clock = ManualClock::new();
    let lease = Lease::try_new(8, Duration::from_secs(60)).unwrap();
    let burst_of = |burst| Quota::per_second(1).unwrap().with_burst(burst).unwrap();
    let bursts = [50, 170, 400, 30];
    let limiters: Vec<_> = bursts
        .iter()
        .map(|&burst| shared_bucket(burst_of(burst), lease, &clock))
        .collect();
    let mut admitted = [0; 4];
    for _ in 0..500 {
        for (i, limiter) in limiters.iter().enumerate() {
            admitted[i] += u64::from(limiter.try_acquire().is_allowed());
        }
    }
    assert_eq!(admitted, bursts);
    for limiter in &limiters {
        assert_eq!(level(limiter), 0, "every lease spent, the bucket empty");
    }
    // A new limiter after these are dropped: a fresh lease, its own burst only.
    drop(limiters);
    let fresh = shared_bucket(burst_of(6), lease, &clock);
    let passed = (0..20).filter(|_| fresh.try_acquire().is_allowed()).count();
    assert_eq!(passed, 6);
}

#[test]
fn an_expired_lease_goes_back_and_a_step_back_ends_it() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(1_000).unwrap();
    let lease = Lease::try_new(16, Duration::from_millis(1))
        .unwrap()
        .with_clock_every(1)
        .unwrap();
    let limiter = Leased::new(TokenBucket::with_clock(quota, clock.clone()), lease);
    clock.set(Duration::from_secs(10));
    for _ in 0..4 {
        assert!(limiter.try_acquire().is_allowed()); // leases of 1, 2, then 4 (3 left)
    }
    assert_eq!(level(&limiter), 1_000 - 7);
    // Past the ttl the next request gives the 3 back and takes a fresh lease sized by the
    // demand on the last one (1 spent, so 2 tokens: 1 spent now, 1 parked).
    clock.advance(Duration::from_millis(1));
    assert!(limiter.try_acquire().is_allowed());
    // Refill in 1 ms: 1 token. Bucket: 993 + 1 (refill) + 3 (back) − 2 (new lease).
    assert_eq!(level(&limiter), 995);
    // The clock steps back 5 s: the lease is not spent from at a reading before its grant;
    // it goes back, and the bucket, as it was 5 s earlier, has nothing to give.
    clock.set(Duration::from_secs(5));
    assert!(!limiter.try_acquire().is_allowed());
    assert_eq!(
        limiter.give_back(),
        0,
        "the step back already returned the lease"
    );
    clock.set(Duration::from_secs(11));
    assert_eq!(level(&limiter), 1_000);
}

#[test]
fn a_give_back_to_a_full_bucket_is_lost_not_credited() {
    let (clock, _, limiter) = bucket(10, 8, Duration::from_secs(10));
    for _ in 0..2 {
        assert!(limiter.try_acquire().is_allowed()); // leases of 1, then 2: 1 parked
    }
    clock.advance(Duration::from_secs(1)); // the bucket refills to its burst
    assert_eq!(limiter.give_back(), 0);
    assert_eq!(level(&limiter), 10);
}

#[test]
fn lease_errors_are_typed() {
    assert_eq!(
        Lease::try_new(0, Duration::from_secs(1)),
        Err(LeaseError::ZeroTokens)
    );
    assert_eq!(Lease::try_new(1, Duration::ZERO), Err(LeaseError::ZeroTtl));
    let lease = Lease::try_new(8, Duration::from_secs(1)).unwrap();
    assert_eq!(
        lease.with_max_parked(7),
        Err(LeaseError::CapBelowLease {
            max_parked: 7,
            max_tokens: 8
        })
    );
    assert_eq!(lease.with_clock_every(0), Err(LeaseError::ZeroClockEvery));
    let bucket = TokenBucket::with_clock(Quota::per_second(5).unwrap(), ManualClock::new());
    assert_eq!(
        Leased::try_new(bucket, lease).err(),
        Some(LeaseError::LeaseAboveBurst {
            max_tokens: 8,
            burst: 5
        })
    );
    // The extreme settings are accepted and never overflow.
    let huge = Lease::try_new(u64::MAX, Duration::MAX).unwrap();
    assert_eq!(huge.max_parked(), u64::MAX);
    let bucket = TokenBucket::with_clock(Quota::per_second(5).unwrap(), ManualClock::new());
    let limiter = Leased::new(bucket, huge);
    assert_eq!(limiter.lease().max_tokens(), 5);
    assert_eq!(
        (0..10)
            .filter(|_| limiter.try_acquire().is_allowed())
            .count(),
        5
    );
}

/// Real threads racing on one hot key while one of them moves the clock: the total admitted
/// never exceeds `burst + rate × elapsed + max_overshoot()`. Prints the measured extra.
#[test]
fn racing_threads_stay_within_the_bound() {
    const THREADS: usize = 4;
    // Under miri (~1000× slower) 1,000 calls per thread against a burst of 2,000: the offered
    // load stays well above the bound, as with 100,000 calls against 5,000.
    const CALLS: u64 = if cfg!(miri) { 1_000 } else { 100_000 };
    const BURST: u64 = if cfg!(miri) { 2_000 } else { 5_000 };
    let clock = ManualClock::new();
    let quota = Quota::per_second(10_000_000)
        .unwrap()
        .with_burst(BURST)
        .unwrap();
    let lease = Lease::try_new(64, Duration::from_micros(20))
        .unwrap()
        .with_max_parked(512)
        .unwrap();
    let limiter = Leased::new(TokenBucket::with_clock(quota, clock.clone()), lease);
    let barrier = Barrier::new(THREADS);
    let admitted: u64 = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (limiter, clock, barrier) = (&limiter, &clock, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut passed = 0;
                    for i in 0..CALLS {
                        // Thread 0 is also the clock: 100 ns every 8 of its calls.
                        if t == 0 && i % 8 == 0 {
                            clock.advance(Duration::from_nanos(100));
                        }
                        passed += u64::from(limiter.try_acquire().is_allowed());
                    }
                    passed
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let elapsed = clock.now_nanos();
    let exact = quota.burst() + elapsed * quota.limit() / 1_000_000_000;
    let bound = exact + limiter.max_overshoot();
    println!(
        "stress: {THREADS} threads × {CALLS}: admitted {admitted}, exact bound {exact}, \
         extra {} (max_overshoot {})",
        admitted.saturating_sub(exact),
        limiter.max_overshoot()
    );
    assert!(admitted <= bound, "admitted {admitted} > bound {bound}");
    // The limit binds: the offered load is far above it.
    assert!(admitted + limiter.max_overshoot() >= exact / 2);
}

/// Requests from `w` until one is denied (at most `max`): how many passed, and their count
/// for the envelope at `now`.
fn spend_until_denied(w: &Worker, env: &mut Envelope, now: u64, max: u64) -> u64 {
    let mut passed = 0;
    while passed < max && w.run(Cmd::Acquire(1)).0.is_allowed() {
        env.admit(now, 1).unwrap_or_else(|e| panic!("{e}"));
        passed += 1;
    }
    passed
}

/// Tokens parked while the bucket was rich, then spent at the instant another thread drains
/// the refilled bucket: `burst + max_overshoot()` at one instant, the bound and no more.
#[test]
fn parked_tokens_spent_as_the_refilled_bucket_drains_reach_the_bound_and_stop_there() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10_000).unwrap();
    let lease = Lease::try_new(8, Duration::from_secs(10))
        .unwrap()
        .with_max_parked(12)
        .unwrap()
        .with_clock_every(1)
        .unwrap();
    let limiter =
        Arc::new(Leased::try_new(TokenBucket::with_clock(quota, clock.clone()), lease).unwrap());
    assert_eq!(limiter.max_overshoot(), 12);
    let mut env = Envelope::new(&quota, limiter.max_overshoot());
    let [a, b, drainer] = std::array::from_fn(|_| Worker::spawn(limiter.clone()));
    // Leases grow with demand (1, 2, 4, then 8): after 8 requests `a` holds 7 unspent, and
    // `b`, whose last lease the cap cuts to 6, holds 5. The 12 parked are the cap.
    for w in [&a, &b] {
        for _ in 0..8 {
            assert!(w.run(Cmd::Acquire(1)).0.is_allowed());
            env.admit(0, 1).unwrap();
        }
    }
    // Idle until the bucket is full again; the leases are still within their ttl.
    clock.set(Duration::from_secs(1));
    let now = clock.now_nanos();
    let drained = spend_until_denied(&drainer, &mut env, now, 20_000);
    assert_eq!(
        drained,
        quota.burst(),
        "the drain takes the whole refilled bucket"
    );
    let parked =
        spend_until_denied(&a, &mut env, now, 100) + spend_until_denied(&b, &mut env, now, 100);
    assert_eq!(parked, 12);
    // At this one instant: the burst and the overshoot, exactly the stated bound.
    assert_eq!(drained + parked, quota.burst() + limiter.max_overshoot());
    // Tight: with one unit less of slack, the same admissions break the envelope.
    let mut tighter = Envelope::new(&quota, limiter.max_overshoot() - 1);
    let mut broke = false;
    for t in std::iter::repeat_n(0, 16).chain(std::iter::repeat_n(now, (drained + parked) as usize))
    {
        broke |= tighter.admit(t, 1).is_err();
    }
    assert!(broke, "the bound is not reached");
    exit_all([a, b, drainer]);
}

/// Leases of one token park nothing: the overshoot is 0, and at one instant the threads
/// admit exactly the burst.
#[test]
fn leases_of_one_token_never_overshoot() {
    let (clock, quota, limiter) = bucket(100, 1, Duration::from_secs(10));
    assert_eq!(limiter.max_overshoot(), 0);
    let mut env = Envelope::new(&quota, 0);
    let workers = workers(&limiter, 3);
    // The first thread drains the bucket, one-token leases at a time; the others find it
    // empty, and nobody keeps a token aside.
    let first: Vec<u64> = workers
        .iter()
        .map(|w| spend_until_denied(w, &mut env, 0, 200))
        .collect();
    assert_eq!(first, [quota.burst(), 0, 0]);
    clock.set(Duration::from_secs(1));
    let passed: u64 = workers
        .iter()
        .map(|w| spend_until_denied(w, &mut env, 1_000_000_000, 200))
        .sum();
    assert_eq!(passed, quota.burst());
    exit_all(workers);
}
