//! `Leased` against the plain `TokenBucket` and governor, one criterion group per scenario
//! (tables in `benches/README.md`):
//!
//! 1. `leased-1-thread`: one thread, one limiter, every request allowed;
//! 2. `leased-hot-key`: 1 and 2 threads on ONE shared limiter (one hot key), every request
//!    allowed; criterion's throughput is the aggregate rate of all threads. The control,
//!    `Leased_own_limiter`, runs the same requests with each thread on a limiter of its own:
//!    how well it scales is what the machine allows at the time of the run, and the gap to
//!    `Leased` is what sharing the bucket's word costs.
//! 3. `leased-lease-size`: the same with leases of 64, 256 and 1024 tokens: what a lease's
//!    size buys a second thread.
//!
//! Every subject runs on its default precise clock (tollgate's `MonotonicClock`, governor's
//! `QuantaClock`) with 10^9 requests per second and a burst of as many, so nothing is denied.
//! `Leased` uses leases of 64 tokens living 1 ms (cap 1024 parked tokens).
//!
//! Run: `cargo bench --bench leased -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::clock::QuantaClock;

mod peers;
mod together;
use peers::{assert_answers, contended, Check, Governor, Tollgate, OPEN_PER_SEC};
use tollgate::{Lease, Leased, Quota, TokenBucket};

fn bucket() -> TokenBucket {
    TokenBucket::new(Quota::per_second(OPEN_PER_SEC).expect("valid quota"))
}

fn leased() -> Leased {
    let lease = Lease::try_new(64, Duration::from_millis(1)).expect("valid lease");
    Leased::try_new(bucket(), lease).expect("the burst holds a lease")
}

fn governor() -> Governor<QuantaClock> {
    let per_second = NonZeroU32::new(OPEN_PER_SEC as u32).expect("non-zero");
    Governor(governor::RateLimiter::direct_with_clock(
        governor::Quota::per_second(per_second),
        QuantaClock::default(),
    ))
}

fn one_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("leased-1-thread");
    g.throughput(Throughput::Elements(1));
    let l = Tollgate(leased());
    assert_answers("Leased", &l, true);
    g.bench_function("Leased", |b| b.iter(|| l.check()));
    let t = Tollgate(bucket());
    assert_answers("TokenBucket", &t, true);
    g.bench_function("TokenBucket", |b| b.iter(|| t.check()));
    let gov = governor();
    assert_answers("governor", &gov, true);
    g.bench_function("governor", |b| b.iter(|| gov.check()));
    g.finish();
}

fn threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("leased-hot-key");
    g.throughput(Throughput::Elements(1));
    for threads in [1, 2] {
        let l = Tollgate(leased());
        g.bench_function(BenchmarkId::new("Leased", threads), |b| {
            b.iter_custom(|iters| contended(&l, threads, iters))
        });
        let own = [Tollgate(leased()), Tollgate(leased())];
        g.bench_function(BenchmarkId::new("Leased_own_limiter", threads), |b| {
            b.iter_custom(|iters| apart(&own, threads, iters))
        });
        let t = Tollgate(bucket());
        g.bench_function(BenchmarkId::new("TokenBucket", threads), |b| {
            b.iter_custom(|iters| contended(&t, threads, iters))
        });
        let gov = governor();
        g.bench_function(BenchmarkId::new("governor", threads), |b| {
            b.iter_custom(|iters| contended(&gov, threads, iters))
        });
    }
    g.finish();
}

/// As [`contended`], but thread `t` asks `own[t]`: nothing is shared but the clock.
fn apart<L: Check>(own: &[L], threads: usize, iters: u64) -> Duration {
    let per_thread = (iters / threads as u64).max(1);
    let spans = together::spans(threads, |t| {
        for _ in 0..per_thread {
            black_box(own[t].check());
        }
    });
    let wall = together::first_start_to_last_end(&spans);
    wall.mul_f64(iters as f64 / (per_thread * threads as u64) as f64)
}

/// Two threads on one `Leased` with leases of 64, 256 and 1024 tokens (the cap raised so that
/// every thread's lease is full): each lease's grant moves the bucket's word between cores,
/// and that handoff, spread over the lease, is what two threads pay beyond one.
fn lease_size(c: &mut Criterion) {
    let mut g = c.benchmark_group("leased-lease-size");
    g.throughput(Throughput::Elements(1));
    for tokens in [64, 256, 1024] {
        let lease = Lease::try_new(tokens, Duration::from_millis(1))
            .and_then(|l| l.with_max_parked(16 * tokens))
            .expect("valid lease");
        let l = Tollgate(Leased::try_new(bucket(), lease).expect("valid lease"));
        for threads in [1, 2] {
            g.bench_function(BenchmarkId::new(format!("{tokens}"), threads), |b| {
                b.iter_custom(|iters| contended(&l, threads, iters))
            });
        }
    }
    g.finish();
}

criterion_group!(
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = one_thread, threads, lease_size
);
criterion_main!(benches);
