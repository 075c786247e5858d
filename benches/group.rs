//! `Limits`: what checking several limits all or nothing costs against one limiter's check,
//! on the default clock.
//!
//! ```text
//! nice -n 10 cargo bench --bench group -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Groups (compare ratios within one run: the machine is shared and noisy):
//! - `group/allowed`: every request admitted (quotas of 10^9 per second): one `TokenBucket`,
//!   a group of one bucket, and a group of three (two buckets and a fixed window);
//! - `group/denied`: every request denied, by the last member of three (the first two
//!   admit), against one denying `TokenBucket`: the peek writes nothing;
//! - `group/threads`: two threads on one shared group of three against two threads on one
//!   shared bucket (requests per second in total);
//! - `group/sliding_allowed`, `group/sliding_denied`: a group of three with a sliding-window
//!   member (a bucket, a fixed window, a sliding window) against one `SlidingWindow`, every
//!   request admitted, or every request denied by the sliding member (the last).
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

mod timing;
mod together;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use timing::per_request;
use together::{first_start_to_last_end, spans};
use tollgate::{Limiter, Limits, Member, MonotonicClock, Quota, SlidingWindow, TokenBucket};

fn open() -> Quota {
    Quota::per_second(1_000_000_000).unwrap()
}

/// A quota that is exhausted after one request and refills once an hour.
fn shut() -> Quota {
    Quota::per_hour(1).unwrap()
}

/// A bucket and a fixed window that admit everything, then `last`.
fn three(last: Member) -> Limits<MonotonicClock> {
    Limits::try_new(
        MonotonicClock::new(),
        [
            Arc::new(Member::token_bucket(open())),
            Arc::new(Member::fixed_window(open())),
            Arc::new(last),
        ],
    )
    .unwrap()
}

/// Benchmarks a request for one unit to `limiter` as `id` in `g`.
fn one_request(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, limiter: &impl Limiter) {
    g.bench_function(id, |b| {
        b.iter(|| limiter.try_acquire_n(black_box(1)).is_allowed())
    });
}

fn allowed(c: &mut Criterion) {
    let mut g = per_request(c, "group/allowed");
    let bucket = TokenBucket::new(open());
    one_request(&mut g, "one_bucket", &bucket);
    let one = Limits::try_new(
        MonotonicClock::new(),
        [Arc::new(Member::token_bucket(open()))],
    )
    .unwrap();
    one_request(&mut g, "group_of_one", &one);
    let three = three(Member::token_bucket(open()));
    one_request(&mut g, "group_of_three", &three);
    g.finish();
}

fn denied(c: &mut Criterion) {
    let mut g = per_request(c, "group/denied");
    let bucket = TokenBucket::new(shut());
    let _ = bucket.try_acquire();
    one_request(&mut g, "one_bucket", &bucket);
    let three = three(Member::token_bucket(shut()));
    let _ = three.try_acquire();
    one_request(&mut g, "group_of_three", &three);
    g.finish();
}

/// `iters` requests split over two threads on one shared limiter: from the first thread's start
/// to the last one's end.
fn two_threads(limiter: &dyn Limiter, iters: u64) -> Duration {
    first_start_to_last_end(&spans(2, |_| {
        for _ in 0..iters / 2 {
            black_box(limiter.try_acquire_n(black_box(1)).is_allowed());
        }
    }))
}

fn threads(c: &mut Criterion) {
    let mut g = per_request(c, "group/threads");
    let bucket = TokenBucket::new(open());
    g.bench_function("one_bucket", |b| {
        b.iter_custom(|iters| two_threads(&bucket, iters))
    });
    let three = three(Member::token_bucket(open()));
    g.bench_function("group_of_three", |b| {
        b.iter_custom(|iters| two_threads(&three, iters))
    });
    g.finish();
}

fn sliding(c: &mut Criterion, name: &str, quota: Quota) {
    let mut g = per_request(c, name);
    let window = SlidingWindow::new(quota);
    let three = three(Member::sliding_window(quota));
    let _ = (window.try_acquire(), three.try_acquire());
    // Each subject on the path it is timed on.
    let expect = quota == open();
    assert!((0..1_000).all(|_| window.try_acquire().is_allowed() == expect));
    assert!((0..1_000).all(|_| three.try_acquire().is_allowed() == expect));
    one_request(&mut g, "one_sliding_window", &window);
    one_request(&mut g, "group_of_three", &three);
    g.finish();
}

fn sliding_allowed(c: &mut Criterion) {
    sliding(c, "group/sliding_allowed", open());
}

fn sliding_denied(c: &mut Criterion) {
    sliding(c, "group/sliding_denied", shut());
}

criterion_group!(
    benches,
    allowed,
    denied,
    threads,
    sliding_allowed,
    sliding_denied
);
criterion_main!(benches);
