//! Keyed limiters: tollgate's `KeyedLimiter` (papaya) and `KeyedTable` (one table of fixed
//! size) against governor's keyed limiter (`RateLimiter::keyed` / `check_key`, a DashMap), all
//! on their default clocks and hashers.
//!
//! ```text
//! nice -n 10 cargo bench --bench keyed
//! ```
//!
//! The single-thread groups (`one_key`, `million_keys`) are timed in the benchmark thread's
//! CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time: on a shared machine a thread that is
//! descheduled mid-sample would otherwise charge the wait to whichever limiter was running.
//! Cache and memory contention from other processes still count.
//!
//! Groups (compare ratios within one run: the machine is shared and noisy):
//! - `keyed/one_key`: one key, every request admitted (a quota of 10^9 per second);
//!   also tollgate with SipHash (std's `RandomState`) to show what the default hasher buys,
//!   the three other algorithms, and `tollgate_table`: a `KeyedTable` token bucket made for
//!   [`TABLE_KEYS`] keys;
//! - `keyed/million_keys`: 1,000,000 keys made up front, requests on keys drawn at random
//!   (a fixed xorshift sequence, the same for every subject): cache misses dominate;
//!   `tollgate_table` is a `KeyedTable` made for the million keys;
//! - `keyed/threads`: requests on disjoint keys (1,024 per thread) from 1 and from 2 threads;
//!   throughput in requests per second, so the ratio is the scaling. `disjoint_keys` asks a
//!   `KeyedLimiter`, `disjoint_keys_table` a `KeyedTable` made for the 2,048 keys (the two
//!   threads' keys share its cache lines, four slots a line); `control_unkeyed` runs one plain
//!   bucket per thread the same way: its scaling is what the machine allows then;
//! - `keyed/set_quota`: one quota change of a live map (`live()`) of 100,000 keys, all of the
//!   changed plan, every one charged: the token bucket's walk carries each key, the fixed
//!   window's change only publishes; throughput in keys per second.
#![allow(missing_docs)]

mod keyed_common;
mod timing;
mod together;

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use crossbeam_utils::CachePadded;
use governor::RateLimiter;
use tollgate::{Algorithm, KeyedLimiter, KeyedTable, Limiter, Quota, TokenBucket};
use tollgate_test_support::cpu::thread_cpu;

use keyed_common::{gov_quota, on_keys, on_one_key, quota, random_keys, MILLION, RATE};
use timing::{on_cpu_bench, per_request};
use together::{first_start_to_last_end, spans};

/// Requests a pinned limiter takes per pin in the `*_pinned` benchmarks.
const BATCH: u64 = 64;

/// The keys `keyed/one_key`'s `KeyedTable` is made for: a request's path does not depend on
/// the table's size, only its cache misses do.
const TABLE_KEYS: usize = 1024;

/// A `KeyedTable` token bucket on the default clock and hasher, made for `keys` keys, with the
/// keys of `fill` in it. Stops the run if a key found no slot (denied, `WhenFull::Deny`): its
/// requests would take the slow path, and the row would time something else.
fn filled_table(keys: usize, fill: impl IntoIterator<Item = u64>) -> KeyedTable<u64> {
    let made_for = NonZeroUsize::new(keys).unwrap();
    let table = KeyedTable::<u64>::try_new(Algorithm::TokenBucket, quota(), made_for).unwrap();
    let (mut filled, mut no_slot) = (0, 0);
    for key in fill {
        filled += 1;
        if !table.try_acquire(&key).is_allowed() {
            no_slot += 1;
        }
    }
    assert!(
        no_slot == 0,
        "{no_slot} of {filled} keys found no slot in a KeyedTable made for {keys}"
    );
    assert_eq!(table.len(), filled);
    table
}

/// `iters` requests made `BATCH` at a time by `batch(len)`, timed in this thread's CPU time.
fn on_batches(iters: u64, mut batch: impl FnMut(u64)) -> Duration {
    let start = thread_cpu();
    let mut left = iters;
    while left > 0 {
        let len = left.min(BATCH);
        batch(len);
        left -= len;
    }
    thread_cpu() - start
}

fn one_key(c: &mut Criterion) {
    let mut g = per_request(c, "keyed/one_key");

    let tollgate = KeyedLimiter::<u64>::try_new(Algorithm::TokenBucket, quota()).unwrap();
    on_one_key(&mut g, "tollgate", &tollgate);

    let governor = RateLimiter::keyed(gov_quota());
    on_cpu_bench(&mut g, "governor", || {
        governor.check_key(black_box(&42u64)).is_ok()
    });

    g.bench_function("tollgate_pinned", |b| {
        b.iter_custom(|iters| {
            on_batches(iters, |len| {
                let pin = tollgate.pin();
                for _ in 0..len {
                    black_box(pin.try_acquire(black_box(&42)).is_allowed());
                }
            })
        })
    });

    let siphash = KeyedLimiter::<u64>::builder(Algorithm::TokenBucket, quota())
        .hasher(std::hash::RandomState::new())
        .build()
        .unwrap();
    on_one_key(&mut g, "tollgate_siphash", &siphash);

    let table = filled_table(TABLE_KEYS, [42]);
    on_one_key(&mut g, "tollgate_table", &table);

    // Maps whose quotas can change while they run (`live()`), beside the fixed ones.
    for (name, algorithm, live) in [
        ("tollgate_fixed_window", Algorithm::FixedWindow, false),
        ("tollgate_sliding_window", Algorithm::SlidingWindow, false),
        ("tollgate_live", Algorithm::TokenBucket, true),
        ("tollgate_live_fixed_window", Algorithm::FixedWindow, true),
    ] {
        let builder = KeyedLimiter::<u64>::builder(algorithm, quota());
        let limiter = if live { builder.live() } else { builder }.build().unwrap();
        on_one_key(&mut g, name, &limiter);
    }
    // The log keeps one entry per admission: a small limit, read on its (lock-free) denials.
    let log = KeyedLimiter::<u64>::try_new(Algorithm::SlidingLog, Quota::per_second(100).unwrap())
        .unwrap();
    on_one_key(&mut g, "tollgate_sliding_log_denied", &log);
    g.finish();
}

fn million_keys(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed/million_keys");
    g.warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(1));
    let keys = random_keys(1 << 20);
    let mask = keys.len() - 1;

    {
        let tollgate = KeyedLimiter::<u64>::try_new(Algorithm::TokenBucket, quota()).unwrap();
        for key in 0..MILLION {
            let _ = tollgate.try_acquire(&key);
        }
        on_keys(&mut g, "tollgate", &keys, |key| {
            tollgate.try_acquire(key).is_allowed()
        });
        let mut at = 0;
        g.bench_function("tollgate_pinned", |b| {
            b.iter_custom(|iters| {
                on_batches(iters, |len| {
                    let pin = tollgate.pin();
                    for _ in 0..len {
                        at = (at + 1) & mask;
                        black_box(pin.try_acquire(&keys[at]).is_allowed());
                    }
                })
            })
        });
    }
    {
        let table = filled_table(MILLION as usize, 0..MILLION);
        on_keys(&mut g, "tollgate_table", &keys, |key| {
            table.try_acquire(key).is_allowed()
        });
    }
    {
        let governor = RateLimiter::keyed(gov_quota());
        for key in 0..MILLION {
            let _ = governor.check_key(&key);
        }
        on_keys(&mut g, "governor", &keys, |key| {
            governor.check_key(key).is_ok()
        });
    }
    g.finish();
}

/// Benchmarks `request(thread, i)` as `id` (parameter `threads`): each iteration one request on
/// each of `threads` threads, started together, timed from the first thread's start to the last
/// one's end.
fn on_threads(
    g: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    threads: u64,
    request: impl Fn(u64, u64) + Sync,
) {
    g.bench_with_input(BenchmarkId::new(id, threads), &threads, |b, &n| {
        b.iter_custom(|iters| {
            first_start_to_last_end(&spans(n as usize, |t| {
                for i in 0..iters {
                    request(t as u64, i);
                }
            }))
        })
    });
}

fn threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed/threads");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let limiter = KeyedLimiter::<u64>::try_new(Algorithm::TokenBucket, quota()).unwrap();
    const KEYS_PER_THREAD: u64 = 1024;
    let key_of = |t: u64, k: u64| t << 32 | k;
    for t in 0..2u64 {
        for k in 0..KEYS_PER_THREAD {
            let _ = limiter.try_acquire(&key_of(t, k));
        }
    }
    let keys = (0..2).flat_map(|t| (0..KEYS_PER_THREAD).map(move |k| key_of(t, k)));
    let table = filled_table(2 * KEYS_PER_THREAD as usize, keys);
    // The control: one plain (unkeyed) bucket per thread, nothing shared but the clock. How
    // well it scales is what the machine allows at the time of the run.
    // Padded: two buckets side by side share a cache line, and each thread's compare-exchange
    // would take it from the other (the control would measure that, not the machine).
    let buckets = [
        CachePadded::new(TokenBucket::new(quota())),
        CachePadded::new(TokenBucket::new(quota())),
    ];
    for threads in [1u64, 2] {
        // One iteration: one request on each thread, on that thread's own keys.
        g.throughput(Throughput::Elements(threads));
        on_threads(&mut g, "disjoint_keys", threads, |t, i| {
            let key = key_of(t, i % KEYS_PER_THREAD);
            black_box(limiter.try_acquire(&key).is_allowed());
        });
        on_threads(&mut g, "disjoint_keys_table", threads, |t, i| {
            let key = key_of(t, i % KEYS_PER_THREAD);
            black_box(table.try_acquire(&key).is_allowed());
        });
        on_threads(&mut g, "control_unkeyed", threads, |t, _| {
            black_box(buckets[t as usize].try_acquire().is_allowed());
        });
    }
    g.finish();
}

fn set_quota(c: &mut Criterion) {
    const KEYS: u64 = 100_000;
    let mut g = c.benchmark_group("keyed/set_quota");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10)
        .throughput(Throughput::Elements(KEYS));
    let (a, b) = (quota(), Quota::per_second(RATE as u64 / 2).unwrap());
    for (name, algorithm) in [
        ("token_bucket", Algorithm::TokenBucket),
        ("fixed_window", Algorithm::FixedWindow),
    ] {
        let map = KeyedLimiter::<u64>::builder(algorithm, a)
            .live()
            .build()
            .unwrap();
        for key in 0..KEYS {
            assert!(map.try_acquire(&key).is_allowed());
        }
        g.bench_function(name, |bench| {
            bench.iter_custom(|iters| {
                let start = Instant::now();
                for i in 0..iters {
                    // Each change carries every key (their words are in the previous version).
                    map.set_quota(if i % 2 == 0 { b } else { a }).unwrap();
                }
                start.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, one_key, million_keys, threads, set_quota);
criterion_main!(benches);
