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
use gate::{closed, gate_bench, open, started};
use peers::{drained, Check, FixedNow, Governor, RateLimit, RateNet, StdMutexBucket, Tollgate};

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

/// The second of two `Leased` buckets a thread uses (each as [`leased_warm`]; the first is
/// never dropped, so its slot stays first): its requests find the second of the thread's lease
/// slots.
fn leased_second_warm(clock: ManualClock) -> Ls {
    std::mem::forget(leased_warm(clock.clone()));
    leased_warm(clock)
}

/// A tollgate limiter's benchmarks, on a clock frozen at one second ([`started`]): `allowed`
/// on the limiter `$make(open(), clock)` builds, `denied` on the one `$make(closed(), clock)`
/// builds, [`drained`]. `$make` is `$limiter::with_clock` unless given.
macro_rules! tollgate_bench {
    ($name:ident($limiter:ident)) => {
        tollgate_bench!($name($limiter) = $limiter::with_clock);
    };
    ($name:ident($limiter:ident) = $make:expr) => {
        gate_bench!(
            $name(Tollgate<$limiter<ManualClock>>),
            allowed = Tollgate(started(|c| ($make)(open(), c))),
            denied = drained(Tollgate(started(|c| ($make)(closed(), c)))),
        );
    };
}

tollgate_bench!(token_bucket(TokenBucket));
tollgate_bench!(mutex_token_bucket(MutexTokenBucket));
tollgate_bench!(fixed_window(FixedWindow));
tollgate_bench!(mutex_fixed_window(MutexFixedWindow));
tollgate_bench!(sliding_window(SlidingWindow));
tollgate_bench!(mutex_sliding_window(MutexSlidingWindow));
tollgate_bench!(
    sliding_log(SlidingLog) =
        |q, c| SlidingLog::try_with_clock(q, c).expect("a small log allocates")
);
tollgate_bench!(
    mutex_sliding_log(MutexSlidingLog) =
        |q, c| MutexSlidingLog::try_with_clock(q, c).expect("a small log allocates")
);
tollgate_bench!(live_token_bucket(LiveTokenBucket));
tollgate_bench!(live_fixed_window(LiveFixedWindow));

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

gate_bench!(
    peer_governor(Gov),
    allowed = governor_open(),
    denied = governor_closed()
);

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

gate_bench!(
    peer_rate_net(RNet),
    allowed = rate_net_open(),
    denied = rate_net_closed()
);

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

gate_bench!(
    peer_ratelimit(RLim),
    allowed = ratelimit_open(),
    denied = ratelimit_closed()
);

type StdBucket = StdMutexBucket<FixedNow>;

fn std_bucket(per_sec: f64, burst: f64) -> StdBucket {
    StdMutexBucket::new(per_sec, burst, FixedNow(Instant::now()))
}

gate_bench!(
    std_mutex_bucket(StdBucket),
    allowed = std_bucket(1_000_000.0, 1_000_000.0),
    denied = drained(std_bucket(1.0 / 3600.0, 1.0)),
);

gate_bench!(leased(Ls), allowed = started(leased_warm));
gate_bench!(leased_second(Ls), allowed = started(leased_second_warm));

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
        leased,
        leased_second
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
