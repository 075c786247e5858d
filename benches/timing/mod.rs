//! What the criterion benches of single requests (`group.rs`, `keyed.rs`, `sketch.rs`) share:
//! the settings of a group whose iterations are one request each, and a request timed in the
//! benchmark thread's CPU time.

#![allow(dead_code)] // each of those benches uses a part of this module

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use tollgate_test_support::cpu::on_cpu;

/// The group `name`, one request an iteration: 1 s of warm-up, 3 s of measurement, throughput
/// in requests.
pub fn per_request<'c>(c: &'c mut Criterion, name: &str) -> BenchmarkGroup<'c, WallTime> {
    let mut g = c.benchmark_group(name);
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    g
}

/// Benchmarks `request` as `id` in `g`: one call an iteration, its answer through `black_box`,
/// timed in this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so that a slice the shared
/// machine gives another process is not charged to whichever limiter was running.
pub fn on_cpu_bench(
    g: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    mut request: impl FnMut() -> bool,
) {
    g.bench_function(id, |b| {
        b.iter_custom(|iters| {
            on_cpu(iters, |_| {
                black_box(request());
            })
        })
    });
}
