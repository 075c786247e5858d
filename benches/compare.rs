//! Wall-time comparison, one criterion group per scenario (see `benches/README.md`):
//!
//! 1. `1-allowed`: one thread, one limiter, every request allowed;
//! 2. `2-denied`: one thread, a drained limiter, every request denied (the deny path);
//! 3. `3-floor`: reading each clock alone, and a clock read + one uncontended CAS;
//! 4. `4-threads`: 1, 2 and 4 threads on ONE shared limiter, every request allowed (4 threads
//!    oversubscribe the 2-core machine these numbers come from);
//! 5. `5-clock`: the same limiters on the precise and the coarse clock.
//!
//! Every subject (tollgate's four limiters, their mutex twins, governor, rate-net, ratelimit and
//! a hand-written `std::sync::Mutex` bucket) comes from `benches/peers`, shared with
//! `benches/examples/compare.rs`. Each is checked to answer as its scenario says before it is
//! timed.
//!
//! Run: `cargo bench --bench compare` (all, ~5 min), `cargo bench --bench compare -- 1-allowed`
//! (one group), `cargo bench --bench compare -- --quick` (fewer samples).

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};

mod peers;
mod together;
use peers::{assert_answers, contended, Check, CoarseClocks, Family, Floor, Visit};

/// Benches each subject on one thread: `b.iter` around one request.
struct SingleThread<'a, 'c> {
    group: &'a mut BenchmarkGroup<'c, WallTime>,
    expect_allowed: bool,
}

impl Visit for SingleThread<'_, '_> {
    fn visit<L: Check + 'static>(&mut self, name: &'static str, _: Family, limiter: L) {
        assert_answers(name, &limiter, self.expect_allowed);
        self.group
            .bench_function(name, |b| b.iter(|| limiter.check()));
    }
}

/// Benches each subject with `threads` threads on it.
struct Threads<'a, 'c> {
    group: &'a mut BenchmarkGroup<'c, WallTime>,
    threads: usize,
}

impl Visit for Threads<'_, '_> {
    fn visit<L: Check + 'static>(&mut self, name: &'static str, _: Family, limiter: L) {
        assert_answers(name, &limiter, true);
        let threads = self.threads;
        self.group
            .bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iters| contended(&limiter, threads, iters))
            });
    }
}

fn group<'c>(c: &'c mut Criterion, name: &str) -> BenchmarkGroup<'c, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    g
}

/// The group `name`: each subject `scenario` hands over, on one thread, every request answered
/// as `expect_allowed` says.
fn single_thread(
    c: &mut Criterion,
    name: &str,
    expect_allowed: bool,
    scenario: impl FnOnce(&mut SingleThread<'_, '_>),
) {
    let mut g = group(c, name);
    scenario(&mut SingleThread {
        group: &mut g,
        expect_allowed,
    });
    g.finish();
}

fn allowed(c: &mut Criterion) {
    single_thread(c, "1-allowed", true, |v| peers::allowed(v));
}

fn denied(c: &mut Criterion) {
    single_thread(c, "2-denied", false, |v| peers::denied(v));
}

fn floor(c: &mut Criterion, clocks: &CoarseClocks) {
    let f = Floor::new(clocks.tollgate.clone());
    let mut g = group(c, "3-floor");
    g.bench_function("quanta-raw", |b| b.iter(|| f.quanta_raw()));
    g.bench_function("quanta-now", |b| b.iter(|| f.quanta_now()));
    g.bench_function("std-instant-now", |b| b.iter(|| f.std_now()));
    g.bench_function("MonotonicClock", |b| b.iter(|| f.monotonic()));
    g.bench_function("CoarseClock", |b| b.iter(|| f.coarse()));
    g.bench_function("MonotonicClock+CAS", |b| b.iter(|| f.monotonic_cas()));
    g.bench_function("CoarseClock+CAS", |b| b.iter(|| f.coarse_cas()));
    g.finish();
}

fn threads(c: &mut Criterion) {
    let mut g = group(c, "4-threads");
    for threads in [1, 2, 4] {
        peers::allowed(&mut Threads {
            group: &mut g,
            threads,
        });
    }
    g.finish();
}

fn clock(c: &mut Criterion, clocks: &CoarseClocks) {
    single_thread(c, "5-clock", true, |v| peers::coarse_vs_precise(v, clocks));
}

fn main() {
    // First: governor's upkeep clock insists on starting quanta's upkeep thread itself.
    let clocks = CoarseClocks::start();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    allowed(&mut c);
    denied(&mut c);
    floor(&mut c, &clocks);
    threads(&mut c);
    clock(&mut c, &clocks);
    c.final_summary();
}
