//! Instruction counts (gungraun, under valgrind's callgrind): the regression gate.
//!
//! For every limiter, tollgate's and the peers', the single-thread allowed path and the denied
//! path: [`CALLS`](gate::CALLS) requests on a clock frozen at one second, so the counts repeat exactly from
//! run to run and machine to machine (same compiler, same dependencies). Each benchmark counts
//! only its own body: the limiter is built and drained in the argument expression, outside the
//! measurement, and handed back so that its drop is not counted either.
//!
//! The keyed map's entries are a binary of their own, `benches/instructions_keyed.rs`: with one
//! codegen unit, the keyed map's calls into the sliding window's and log's cores would change
//! what the compiler inlines into the single limiters here.
//!
//! `.ci/stages/50-bench.sh` compares a run against the baseline committed in
//! `benches/gungraun-baseline/` and fails when any count grows by more than 5 %
//! (`Callgrind::soft_limits`, in `gate/mod.rs`). `benches/README.md` says how to update the
//! baseline.

// gungraun's macros generate undocumented modules, one per benchmark function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use gungraun::prelude::*;
use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{
    FixedWindow, Lease, Leased, LiveFixedWindow, LiveTokenBucket, ManualClock, SlidingLog,
    SlidingWindow, TokenBucket,
};

mod gate;
mod peers;
mod together;
use gate::{closed, open, run, started};
use peers::{drained, Check, FixedNow, Governor, RateLimit, RateNet, StdMutexBucket, Tollgate};

type Tb = Tollgate<TokenBucket<ManualClock>>;
type MTb = Tollgate<MutexTokenBucket<ManualClock>>;
type Fw = Tollgate<FixedWindow<ManualClock>>;
type MFw = Tollgate<MutexFixedWindow<ManualClock>>;
type Sw = Tollgate<SlidingWindow<ManualClock>>;
type MSw = Tollgate<MutexSlidingWindow<ManualClock>>;
type Sl = Tollgate<SlidingLog<ManualClock>>;
type MSl = Tollgate<MutexSlidingLog<ManualClock>>;
type LTb = Tollgate<LiveTokenBucket<ManualClock>>;
type LFw = Tollgate<LiveFixedWindow<ManualClock>>;
type Ls = Tollgate<Leased<ManualClock>>;

/// A `Leased` bucket (leases of up to 64 tokens, 1 ms) whose thread has already spent 200
/// requests: its lease slot exists and its leases have grown to 64, so the measured requests
/// are the steady path (a thread-local spend, a clock read every few spends, one renewal per
/// 64).
fn leased_warm(clock: ManualClock) -> Ls {
    let lease = Lease::try_new(64, Duration::from_millis(1)).unwrap();
    let l = Tollgate(Leased::try_new(TokenBucket::with_clock(open(), clock), lease).unwrap());
    for _ in 0..200 {
        assert!(l.check());
    }
    l
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| TokenBucket::with_clock(open(), c))))]
#[bench::denied(drained(Tollgate(started(|c| TokenBucket::with_clock(closed(), c)))))]
fn token_bucket(limiter: Tb) -> Tb {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| MutexTokenBucket::with_clock(open(), c))))]
#[bench::denied(drained(Tollgate(started(|c| MutexTokenBucket::with_clock(closed(), c)))))]
fn mutex_token_bucket(limiter: MTb) -> MTb {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| FixedWindow::with_clock(open(), c))))]
#[bench::denied(drained(Tollgate(started(|c| FixedWindow::with_clock(closed(), c)))))]
fn fixed_window(limiter: Fw) -> Fw {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| MutexFixedWindow::with_clock(open(), c))))]
#[bench::denied(drained(Tollgate(started(|c| MutexFixedWindow::with_clock(closed(), c)))))]
fn mutex_fixed_window(limiter: MFw) -> MFw {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| SlidingWindow::with_clock(open(), c))))]
#[bench::denied(drained(Tollgate(started(|c| SlidingWindow::with_clock(closed(), c)))))]
fn sliding_window(limiter: Sw) -> Sw {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| MutexSlidingWindow::with_clock(open(), c))))]
#[bench::denied(drained(Tollgate(started(|c| MutexSlidingWindow::with_clock(closed(), c)))))]
fn mutex_sliding_window(limiter: MSw) -> MSw {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| SlidingLog::try_with_clock(open(), c).expect("a small log allocates"))))]
#[bench::denied(drained(Tollgate(started(|c| SlidingLog::try_with_clock(closed(), c).expect("a small log allocates")))))]
fn sliding_log(limiter: Sl) -> Sl {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| MutexSlidingLog::try_with_clock(open(), c).expect("a small log allocates"))))]
#[bench::denied(drained(Tollgate(started(|c| MutexSlidingLog::try_with_clock(closed(), c).expect("a small log allocates")))))]
fn mutex_sliding_log(limiter: MSl) -> MSl {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| LiveTokenBucket::with_clock(open(), c))))]
#[bench::denied(drained(Tollgate(started(|c| LiveTokenBucket::with_clock(closed(), c)))))]
fn live_token_bucket(limiter: LTb) -> LTb {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(Tollgate(started(|c| LiveFixedWindow::with_clock(open(), c))))]
#[bench::denied(drained(Tollgate(started(|c| LiveFixedWindow::with_clock(closed(), c)))))]
fn live_fixed_window(limiter: LFw) -> LFw {
    run(limiter)
}

type Gov = Governor<governor::clock::FakeRelativeClock>;

fn governor_with(quota: governor::Quota) -> Gov {
    let clock = governor::clock::FakeRelativeClock::default();
    clock.advance(Duration::from_secs(1));
    Governor(governor::RateLimiter::direct_with_clock(quota, clock))
}

fn governor_open() -> Gov {
    governor_with(governor::Quota::per_second(1_000_000.try_into().unwrap()))
}

fn governor_closed() -> Gov {
    drained(governor_with(governor::Quota::per_hour(
        1.try_into().unwrap(),
    )))
}

#[library_benchmark]
#[bench::allowed(governor_open())]
#[bench::denied(governor_closed())]
fn peer_governor(limiter: Gov) -> Gov {
    run(limiter)
}

type RNet = RateNet<Arc<clock_lib::ManualClock>>;

fn rate_net_with(quota: rate_net::Quota) -> RNet {
    let clock = Arc::new(clock_lib::ManualClock::new());
    let limiter = rate_net::DirectLimiter::with_quota(quota).with_clock(Arc::clone(&clock));
    clock.advance(Duration::from_secs(1));
    RateNet(limiter)
}

fn rate_net_open() -> RNet {
    rate_net_with(rate_net::Quota::per_second(1_000_000))
}

fn rate_net_closed() -> RNet {
    let quota = rate_net::Quota::rate(1, Duration::from_secs(3600)).unwrap();
    drained(rate_net_with(quota))
}

#[library_benchmark]
#[bench::allowed(rate_net_open())]
#[bench::denied(rate_net_closed())]
fn peer_rate_net(limiter: RNet) -> RNet {
    run(limiter)
}

/// ratelimit's clock, frozen at one second.
struct FrozenElapsed;

impl ratelimit::Clock for FrozenElapsed {
    fn elapsed(&self) -> Duration {
        Duration::from_secs(1)
    }
}

type RLim = RateLimit<FrozenElapsed>;

fn ratelimit_open() -> RLim {
    let limiter = ratelimit::Builder::with_clock(1_000_000, FrozenElapsed)
        .max_tokens(1_000_000)
        .initial_available(1_000_000)
        .build()
        .unwrap();
    RateLimit(limiter)
}

fn ratelimit_closed() -> RLim {
    let limiter = ratelimit::Builder::with_clock(1, FrozenElapsed)
        .period(Duration::from_secs(3600))
        .max_tokens(1)
        .initial_available(1)
        .build()
        .unwrap();
    drained(RateLimit(limiter))
}

#[library_benchmark]
#[bench::allowed(ratelimit_open())]
#[bench::denied(ratelimit_closed())]
fn peer_ratelimit(limiter: RLim) -> RLim {
    run(limiter)
}

type StdBucket = StdMutexBucket<FixedNow>;

fn std_bucket(per_sec: f64, burst: f64) -> StdBucket {
    StdMutexBucket::new(per_sec, burst, FixedNow(Instant::now()))
}

#[library_benchmark]
#[bench::allowed(std_bucket(1_000_000.0, 1_000_000.0))]
#[bench::denied(drained(std_bucket(1.0 / 3600.0, 1.0)))]
fn std_mutex_bucket(limiter: StdBucket) -> StdBucket {
    run(limiter)
}

#[library_benchmark]
#[bench::allowed(started(leased_warm))]
fn leased(limiter: Ls) -> Ls {
    run(limiter)
}

library_benchmark_group!(
    name = tollgate_limiters,
    benchmarks = [
        token_bucket,
        fixed_window,
        sliding_window,
        sliding_log,
        mutex_token_bucket,
        mutex_fixed_window,
        mutex_sliding_window,
        mutex_sliding_log,
        live_token_bucket,
        live_fixed_window,
        leased
    ]
);

library_benchmark_group!(
    name = peer_limiters,
    benchmarks = [
        peer_governor,
        peer_rate_net,
        peer_ratelimit,
        std_mutex_bucket
    ]
);

main!(
    config = gate::config();
    library_benchmark_groups = tollgate_limiters, peer_limiters
);
