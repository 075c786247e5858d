//! The subjects every comparison measures, shared by the criterion benches (`benches/compare.rs`)
//! and the README's short run (`benches/examples/compare.rs`): each tollgate limiter, its mutex
//! twin, the crates users would pick instead (governor, rate-net, ratelimit), and the plain
//! `std::sync::Mutex` token bucket people write by hand.
//!
//! A scenario hands each subject, built for that scenario, to a [`Visit`] by value: the visitor
//! measures it with static dispatch (no `dyn` call in the timed loop) and drops it. Every subject
//! answers [`Check::check`] with "allowed?", so the same loop times all of them.

#![allow(dead_code)] // each bench target uses a part of this module

use std::hash::Hash;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::together;

use governor::clock::{Clock as GovernorClock, QuantaClock, QuantaUpkeepClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{
    Clock, CoarseClock, FixedWindow, KeyedLimit, KeyedLimiter, KeyedTable, Limiter, MonotonicClock,
    Quota, SlidingLog, SlidingWindow, TokenBucket,
};

/// One request to a limiter: was it allowed?
pub trait Check: Sync {
    /// Asks for one unit.
    fn check(&self) -> bool;
}

/// Who wrote the limiter: the comparison tables group by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// A lock-free tollgate limiter.
    Ours,
    /// A tollgate mutex twin.
    Twin,
    /// Another crate, or the hand-written std mutex bucket.
    Peer,
}

/// Receives each subject of a scenario, by value.
pub trait Visit {
    /// Measures (or otherwise uses) one subject, then drops it.
    fn visit<L: Check + 'static>(&mut self, name: &'static str, family: Family, limiter: L);
}

/// A tollgate limiter or twin.
pub struct Tollgate<L>(pub L);

impl<L: Limiter> Check for Tollgate<L> {
    #[inline]
    fn check(&self) -> bool {
        self.0.try_acquire().is_allowed()
    }
}

/// A tollgate keyed map asked for one key: every request goes through
/// [`KeyedLimiter::try_acquire`] on that key.
pub struct TollgateKeyed<K, C>(pub KeyedLimiter<K, C>, pub K);

impl<K: Hash + Eq + Clone + Send + Sync, C: Clock + Sync> Check for TollgateKeyed<K, C> {
    #[inline]
    fn check(&self) -> bool {
        self.0.try_acquire(&self.1).is_allowed()
    }
}

/// A tollgate keyed table asked for one key: every request goes through
/// [`KeyedTable::try_acquire`] on that key.
pub struct TollgateTable<K, C>(pub KeyedTable<K, C>, pub K);

impl<K: Hash + Send + Sync, C: Clock + Sync> Check for TollgateTable<K, C> {
    #[inline]
    fn check(&self) -> bool {
        self.0.try_acquire(&self.1).is_allowed()
    }
}

/// Any tollgate [`KeyedLimit`] asked for one key (the sketches): every request goes through
/// [`KeyedLimit::try_acquire`] on that key.
pub struct TollgateKeyedLimit<L, K>(pub L, pub K);

impl<L: KeyedLimit<K> + Sync, K: Sync> Check for TollgateKeyedLimit<L, K> {
    #[inline]
    fn check(&self) -> bool {
        self.0.try_acquire(&self.1).is_allowed()
    }
}

/// governor's direct (un-keyed) limiter on clock `C`, answering through `check()`.
pub struct Governor<C: GovernorClock>(
    pub governor::RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>,
);

impl<C: GovernorClock + Sync> Check for Governor<C>
where
    C::Instant: Sync,
{
    #[inline]
    fn check(&self) -> bool {
        self.0.check().is_ok()
    }
}

/// rate-net's `DirectLimiter` (token bucket) on clock `C`.
pub struct RateNet<C: clock_lib::Clock + Clone>(pub rate_net::DirectLimiter<C>);

impl<C: clock_lib::Clock + Clone + Sync> Check for RateNet<C> {
    #[inline]
    fn check(&self) -> bool {
        self.0.check().is_allow()
    }
}

/// ratelimit's lock-free token bucket on clock `C`.
pub struct RateLimit<C: ratelimit::Clock>(pub ratelimit::Ratelimiter<C>);

impl<C: ratelimit::Clock + Sync> Check for RateLimit<C> {
    #[inline]
    fn check(&self) -> bool {
        self.0.try_wait().is_ok()
    }
}

/// Where [`StdMutexBucket`] reads the time.
pub trait Now: Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// `Instant::now()`, as the hand-written bucket would use it.
pub struct StdNow;

impl Now for StdNow {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A frozen instant: repeatable instruction counts.
pub struct FixedNow(pub Instant);

impl Now for FixedNow {
    #[inline]
    fn now(&self) -> Instant {
        self.0
    }
}

/// The token bucket people write by hand: `f64` tokens and the last refill instant behind a
/// `std::sync::Mutex`, refilled on every call.
pub struct StdMutexBucket<N: Now = StdNow> {
    state: Mutex<(f64, Instant)>,
    per_sec: f64,
    burst: f64,
    now: N,
}

impl<N: Now> StdMutexBucket<N> {
    /// `per_sec` tokens per second, up to `burst`, starting full.
    pub fn new(per_sec: f64, burst: f64, now: N) -> Self {
        StdMutexBucket {
            state: Mutex::new((burst, now.now())),
            per_sec,
            burst,
            now,
        }
    }
}

impl<N: Now> Check for StdMutexBucket<N> {
    #[inline]
    fn check(&self) -> bool {
        let now = self.now.now();
        let mut state = self.state.lock().unwrap();
        let (tokens, last) = &mut *state;
        let earned = now.saturating_duration_since(*last).as_secs_f64() * self.per_sec;
        *tokens = (*tokens + earned).min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A limit far above what any loop here reaches: every request is allowed.
pub const OPEN_PER_SEC: u64 = 1_000_000_000;

/// The sliding log keeps one 8-byte entry per admission in its period: 2^24 per second (128 MiB)
/// is above the ~13 M/s one thread reaches here, so its requests are all allowed too.
pub const LOG_OPEN_PER_SEC: u64 = 1 << 24;

fn open() -> Quota {
    Quota::per_second(OPEN_PER_SEC).expect("valid quota")
}

fn log_open() -> Quota {
    Quota::per_second(LOG_OPEN_PER_SEC).expect("valid quota")
}

/// One per hour, taken at once: every later request in the run is denied.
fn closed() -> Quota {
    Quota::per_hour(1).expect("valid quota")
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

fn governor_open<C: GovernorClock>(clock: C) -> Governor<C> {
    let quota = governor::Quota::per_second(nz(OPEN_PER_SEC as u32));
    Governor(governor::RateLimiter::direct_with_clock(quota, clock))
}

fn governor_closed<C: GovernorClock>(clock: C) -> Governor<C> {
    let quota = governor::Quota::per_hour(nz(1));
    Governor(governor::RateLimiter::direct_with_clock(quota, clock))
}

fn rate_net_open() -> RateNet<clock_lib::SystemClock> {
    let quota = rate_net::Quota::per_second(OPEN_PER_SEC as u32);
    RateNet(rate_net::DirectLimiter::with_quota(quota))
}

fn rate_net_closed() -> RateNet<clock_lib::SystemClock> {
    let quota = rate_net::Quota::rate(1, Duration::from_secs(3600)).expect("valid quota");
    RateNet(rate_net::DirectLimiter::with_quota(quota))
}

fn ratelimit_open<C: ratelimit::Clock>(clock: C) -> RateLimit<C> {
    // 10^12 tokens to start with and 10^9 more per second: never empty in a run.
    let limiter = ratelimit::Builder::with_clock(OPEN_PER_SEC, clock)
        .max_tokens(1_000_000_000_000)
        .initial_available(1_000_000_000_000)
        .build()
        .expect("valid ratelimit");
    RateLimit(limiter)
}

fn ratelimit_closed<C: ratelimit::Clock>(clock: C) -> RateLimit<C> {
    let limiter = ratelimit::Builder::with_clock(1, clock)
        .period(Duration::from_secs(3600))
        .max_tokens(1)
        .initial_available(1)
        .build()
        .expect("valid ratelimit");
    RateLimit(limiter)
}

/// ratelimit's own `StdClock` is private to its builder's default; this is the same
/// `Instant::elapsed`.
pub struct RatelimitStdClock(pub Instant);

impl ratelimit::Clock for RatelimitStdClock {
    #[inline]
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// What a scenario builds every subject with: the quota of each tollgate limiter, and each
/// peer's own constructor or figures for the same limit.
struct Quotas {
    /// tollgate's limiters and twins, the sliding logs aside.
    quota: fn() -> Quota,
    /// The sliding logs (each admission is an entry: see [`LOG_OPEN_PER_SEC`]).
    log: fn() -> Quota,
    governor: fn(QuantaClock) -> Governor<QuantaClock>,
    rate_net: fn() -> RateNet<clock_lib::SystemClock>,
    ratelimit: fn(RatelimitStdClock) -> RateLimit<RatelimitStdClock>,
    /// The hand-written bucket's tokens per second and burst.
    std_bucket: (f64, f64),
}

/// Every request allowed.
const OPEN: Quotas = Quotas {
    quota: open,
    log: log_open,
    governor: governor_open,
    rate_net: rate_net_open,
    ratelimit: ratelimit_open,
    std_bucket: (OPEN_PER_SEC as f64, OPEN_PER_SEC as f64),
};

/// One request per hour.
const CLOSED: Quotas = Quotas {
    quota: closed,
    log: closed,
    governor: governor_closed,
    rate_net: rate_net_closed,
    ratelimit: ratelimit_closed,
    std_bucket: (1.0 / 3600.0, 1.0),
};

/// Every subject, each on its default clock, built with `quotas`.
fn every_subject(v: &mut impl Visit, quotas: &Quotas) {
    use Family::*;
    let quota = quotas.quota;
    v.visit("TokenBucket", Ours, Tollgate(TokenBucket::new(quota())));
    v.visit(
        "MutexTokenBucket",
        Twin,
        Tollgate(MutexTokenBucket::new(quota())),
    );
    v.visit("FixedWindow", Ours, Tollgate(FixedWindow::new(quota())));
    v.visit(
        "MutexFixedWindow",
        Twin,
        Tollgate(MutexFixedWindow::new(quota())),
    );
    v.visit("SlidingWindow", Ours, Tollgate(SlidingWindow::new(quota())));
    v.visit(
        "MutexSlidingWindow",
        Twin,
        Tollgate(MutexSlidingWindow::new(quota())),
    );
    let log = quotas.log;
    v.visit(
        "SlidingLog",
        Ours,
        Tollgate(SlidingLog::try_new(log()).expect("a small log allocates")),
    );
    v.visit(
        "MutexSlidingLog",
        Twin,
        Tollgate(MutexSlidingLog::try_new(log()).expect("a small log allocates")),
    );
    v.visit("governor", Peer, (quotas.governor)(QuantaClock::default()));
    v.visit("rate-net", Peer, (quotas.rate_net)());
    v.visit(
        "ratelimit",
        Peer,
        (quotas.ratelimit)(RatelimitStdClock(Instant::now())),
    );
    let (per_sec, burst) = quotas.std_bucket;
    v.visit(
        "std-mutex-bucket",
        Peer,
        StdMutexBucket::new(per_sec, burst, StdNow),
    );
}

/// Every subject with every request allowed (scenarios 1 and 4), on its default clock.
pub fn allowed(v: &mut impl Visit) {
    every_subject(v, &OPEN);
}

/// Takes what a closed limiter has, so that every later request is denied.
pub fn drained<L: Check>(limiter: L) -> L {
    let mut taken = 0;
    while limiter.check() {
        taken += 1;
        assert!(taken < 10, "a closed limiter kept allowing");
    }
    limiter
}

/// Hands each subject on, [`drained`].
struct Drained<'a, V>(&'a mut V);

impl<V: Visit> Visit for Drained<'_, V> {
    fn visit<L: Check + 'static>(&mut self, name: &'static str, family: Family, limiter: L) {
        self.0.visit(name, family, drained(limiter));
    }
}

/// Every subject at one request per hour, already taken: every request denied (scenario 2).
pub fn denied(v: &mut impl Visit) {
    every_subject(&mut Drained(v), &CLOSED);
}

/// The coarse clocks, each refreshed every 1 ms by its own upkeep thread: governor's
/// `QuantaUpkeepClock` (quanta's `recent()`; it must start quanta's upkeep thread itself),
/// tollgate's `CoarseClock` and rate-net's `CoarseClock`.
pub struct CoarseClocks {
    /// governor's clock on quanta's `recent()`; owns quanta's upkeep thread.
    pub governor: QuantaUpkeepClock,
    /// tollgate's coarse clock (its own upkeep thread).
    pub tollgate: CoarseClock,
    /// rate-net's coarse clock, ticked by its own thread every 1 ms.
    pub rate_net: rate_net::CoarseClock,
}

impl CoarseClocks {
    /// Starts the upkeep threads (1 ms).
    pub fn start() -> Self {
        let governor = QuantaUpkeepClock::from_interval(Duration::from_millis(1))
            .expect("quanta's upkeep thread starts once, here");
        let tollgate = CoarseClock::new();
        let rate_net = rate_net::CoarseClock::spawn(Duration::from_millis(1)).expect("ticker");
        // Let the upkeep threads publish a first time.
        std::thread::sleep(Duration::from_millis(5));
        CoarseClocks {
            governor,
            tollgate,
            rate_net,
        }
    }
}

/// Scenario 5: the same limiters on the precise and the coarse clock, all requests allowed.
pub fn coarse_vs_precise(v: &mut impl Visit, clocks: &CoarseClocks) {
    use Family::*;
    let coarse = clocks.tollgate.clone();
    v.visit(
        "TokenBucket/precise",
        Ours,
        Tollgate(TokenBucket::new(open())),
    );
    let tb = TokenBucket::with_clock(open(), coarse.clone());
    v.visit("TokenBucket/coarse", Ours, Tollgate(tb));
    v.visit(
        "FixedWindow/precise",
        Ours,
        Tollgate(FixedWindow::new(open())),
    );
    let fw = FixedWindow::with_clock(open(), coarse.clone());
    v.visit("FixedWindow/coarse", Ours, Tollgate(fw));
    let sw = SlidingWindow::with_clock(open(), coarse.clone());
    v.visit("SlidingWindow/coarse", Ours, Tollgate(sw));
    let twin = MutexSlidingWindow::with_clock(open(), coarse);
    v.visit("MutexSlidingWindow/coarse", Twin, Tollgate(twin));
    v.visit(
        "governor/precise",
        Peer,
        governor_open(QuantaClock::default()),
    );
    v.visit(
        "governor/coarse",
        Peer,
        governor_open(clocks.governor.clone()),
    );
    v.visit("rate-net/precise", Peer, rate_net_open());
    let quota = rate_net::Quota::per_second(OPEN_PER_SEC as u32);
    let rn = rate_net::DirectLimiter::with_quota(quota).with_clock(clocks.rate_net.clone());
    v.visit("rate-net/coarse", Peer, RateNet(rn));
}

/// Scenario 3, the floor: what reading a clock costs, and a clock read plus one uncontended
/// compare-exchange (the least a lock-free limiter on that clock can do).
pub struct Floor {
    monotonic: MonotonicClock,
    coarse: CoarseClock,
    quanta: quanta::Clock,
    word: std::sync::atomic::AtomicU64,
}

impl Floor {
    /// The clocks, made once. The coarse clock shares quanta's upkeep thread if one runs.
    pub fn new(coarse: CoarseClock) -> Self {
        Floor {
            monotonic: MonotonicClock::new(),
            coarse,
            quanta: quanta::Clock::new(),
            word: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `quanta::Clock::raw()`: the TSC read itself.
    #[inline]
    pub fn quanta_raw(&self) -> u64 {
        self.quanta.raw()
    }

    /// `quanta::Clock::now()`: TSC read and scaling to an `Instant`.
    #[inline]
    pub fn quanta_now(&self) -> quanta::Instant {
        self.quanta.now()
    }

    /// `std::time::Instant::now()` (the vDSO's `clock_gettime`).
    #[inline]
    pub fn std_now(&self) -> Instant {
        Instant::now()
    }

    /// tollgate's `MonotonicClock` (quanta raw + scaling + high-water mark).
    #[inline]
    pub fn monotonic(&self) -> u64 {
        self.monotonic.now_nanos()
    }

    /// tollgate's `CoarseClock` (quanta `recent()` + high-water mark).
    #[inline]
    pub fn coarse(&self) -> u64 {
        self.coarse.now_nanos()
    }

    /// `MonotonicClock` read + one load + one uncontended compare-exchange, as the token
    /// bucket's admission does.
    #[inline]
    pub fn monotonic_cas(&self) -> bool {
        self.cas_after(self.monotonic.now_nanos())
    }

    /// `CoarseClock` read + one load + one uncontended compare-exchange.
    #[inline]
    pub fn coarse_cas(&self) -> bool {
        self.cas_after(self.coarse.now_nanos())
    }

    /// One load + one uncontended compare-exchange of the word, to past `now`.
    #[inline]
    fn cas_after(&self, now: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let old = self.word.load(Relaxed);
        self.word
            .compare_exchange_weak(old, old.max(now) + 1, Relaxed, Relaxed)
            .is_ok()
    }
}

/// `threads` threads, released together, each make `per_thread` requests to one limiter;
/// returns each thread's (start, end).
pub fn spans<L: Check>(limiter: &L, threads: usize, per_thread: u64) -> Vec<(Instant, Instant)> {
    together::spans(threads, |_| {
        for _ in 0..per_thread {
            black_box(limiter.check());
        }
    })
}

/// `threads` threads, started together, share `iters` requests to one limiter. Returns the wall
/// time from the first thread's start to the last one's end (threads that took turns cannot pass
/// for threads that contended), scaled to exactly `iters` requests: criterion's time per
/// iteration is then the aggregate time per request, and its throughput the aggregate rate.
pub fn contended<L: Check>(limiter: &L, threads: usize, iters: u64) -> Duration {
    let per_thread = (iters / threads as u64).max(1);
    let wall = together::first_start_to_last_end(&spans(limiter, threads, per_thread));
    wall.mul_f64(iters as f64 / (per_thread * threads as u64) as f64)
}

/// Checks that a subject answers as its scenario says (all allowed, or all denied) before it is
/// measured: a misconfigured peer would otherwise be timed on the wrong path.
pub fn assert_answers<L: Check>(name: &str, limiter: &L, expect_allowed: bool) {
    for i in 0..1_000 {
        let got = black_box(limiter.check());
        assert_eq!(
            got,
            expect_allowed,
            "{name}: request {i} was {} in a scenario where all are {}",
            if got { "allowed" } else { "denied" },
            if expect_allowed { "allowed" } else { "denied" }
        );
    }
}
