//! Live limiters: what a quota that can change costs a request, against the fixed-quota
//! limiter of the same algorithm, on the default clock; and a request while another thread
//! changes the quota.
//!
//! ```text
//! nice -n 10 cargo bench --bench live -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Groups (compare ratios within one run: the machine is shared and noisy):
//! - `live/allowed`: every request admitted (10^9 per second): `TokenBucket` against
//!   `LiveTokenBucket`, `FixedWindow` against `LiveFixedWindow`;
//! - `live/denied`: every request denied (one per hour, drained);
//! - `live/changing`: one thread's requests on a `LiveTokenBucket` while a second thread
//!   flips its quota between two (a change every microsecond or so), against the same
//!   requests with no changes.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use tollgate::{FixedWindow, Limiter, LiveFixedWindow, LiveTokenBucket, Quota, TokenBucket};

fn open() -> Quota {
    Quota::per_second(1_000_000_000).unwrap()
}

/// A quota that is exhausted after one request and refills once an hour.
fn shut() -> Quota {
    Quota::per_hour(1).unwrap()
}

fn configure<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    g
}

fn one(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, l: &dyn Limiter) {
    g.bench_function(name, |b| {
        b.iter(|| l.try_acquire_n(black_box(1)).is_allowed())
    });
}

fn allowed(c: &mut Criterion) {
    let mut g = configure(c, "live/allowed");
    one(&mut g, "token_bucket", &TokenBucket::new(open()));
    one(&mut g, "live_token_bucket", &LiveTokenBucket::new(open()));
    one(&mut g, "fixed_window", &FixedWindow::new(open()));
    one(&mut g, "live_fixed_window", &LiveFixedWindow::new(open()));
    g.finish();
}

fn denied(c: &mut Criterion) {
    let mut g = configure(c, "live/denied");
    let drained = |l: &dyn Limiter| {
        let _ = l.try_acquire();
    };
    let (tb, ltb) = (TokenBucket::new(shut()), LiveTokenBucket::new(shut()));
    let (fw, lfw) = (FixedWindow::new(shut()), LiveFixedWindow::new(shut()));
    for l in [&tb as &dyn Limiter, &ltb, &fw, &lfw] {
        drained(l);
    }
    one(&mut g, "token_bucket", &tb);
    one(&mut g, "live_token_bucket", &ltb);
    one(&mut g, "fixed_window", &fw);
    one(&mut g, "live_fixed_window", &lfw);
    g.finish();
}

/// `iters` requests on `bucket`, while a second thread changes its quota back and forth if
/// `change` is set; the requests' time.
fn while_changing(bucket: &LiveTokenBucket, iters: u64, change: bool) -> Duration {
    let done = AtomicBool::new(false);
    let (a, b) = (open(), Quota::per_second(999_999_999).unwrap());
    std::thread::scope(|s| {
        if change {
            s.spawn(|| {
                let mut flip = false;
                // Relaxed: a stop flag; the scope's join orders the rest.
                while !done.load(Ordering::Relaxed) {
                    bucket.set_quota(if flip { a } else { b }).unwrap();
                    flip = !flip;
                    std::thread::sleep(Duration::from_micros(1));
                }
            });
        }
        let start = Instant::now();
        for _ in 0..iters {
            black_box(bucket.try_acquire_n(black_box(1)).is_allowed());
        }
        let elapsed = start.elapsed();
        // Relaxed: see the load.
        done.store(true, Ordering::Relaxed);
        elapsed
    })
}

fn changing(c: &mut Criterion) {
    let mut g = configure(c, "live/changing");
    let bucket = LiveTokenBucket::new(open());
    g.bench_function("no_changes", |b| {
        b.iter_custom(|iters| while_changing(&bucket, iters, false))
    });
    g.bench_function("changes_beside", |b| {
        b.iter_custom(|iters| while_changing(&bucket, iters, true))
    });
    g.finish();
}

criterion_group!(benches, allowed, denied, changing);
criterion_main!(benches);
