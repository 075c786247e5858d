//! Criterion: checks per second on a loopback redis-server this bench starts, one hot key.
//! One group per scenario; in each, a bare `PING` on the limiter's connection and the
//! naive client-side `GET` + `INCR` fixed window run beside the script, in the same run.
//!
//! `cargo bench -p tollgate-redis --bench redis -- --warm-up-time 1 --measurement-time 3`
//! (latency percentiles: `cargo run --release -p tollgate-redis --example redis_latency`).

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use redis::aio::ConnectionManager;
use tokio::runtime::Runtime;
use tollgate::{Algorithm, Quota};
use tollgate_redis::RedisLimiter;

struct Setup {
    _server: common::RedisServer,
    runtime: Runtime,
    roomy: RedisLimiter,
    leased: RedisLimiter,
    naive: ConnectionManager,
    cached: RedisLimiter,
    uncached: RedisLimiter,
}

fn setup() -> Setup {
    let server = common::RedisServer::start();
    let runtime = common::runtime(1);
    let url = server.url();
    let (roomy, leased, naive, cached, uncached) = runtime.block_on(async {
        let build = |q: Quota, cache: usize| {
            RedisLimiter::builder(url.as_str(), Algorithm::TokenBucket, q)
                .timeout(Duration::from_secs(1))
                .deny_cache(cache)
                .build()
        };
        let roomy = build(Quota::per_second(1_000_000).unwrap(), 0)
            .await
            .unwrap();
        let leased = RedisLimiter::builder(
            url.as_str(),
            Algorithm::TokenBucket,
            Quota::per_second(1_000_000).unwrap(),
        )
        .timeout(Duration::from_secs(1))
        .leases(64, Duration::from_millis(10))
        .build()
        .await
        .unwrap();
        let cached = build(Quota::per_hour(1).unwrap(), 10_000).await.unwrap();
        let uncached = build(Quota::per_hour(1).unwrap(), 0).await.unwrap();
        let _ = cached.try_acquire("denied").await.unwrap();
        let naive = ConnectionManager::new(redis::Client::open(url.as_str()).unwrap())
            .await
            .unwrap();
        (roomy, leased, naive, cached, uncached)
    });
    Setup {
        _server: server,
        runtime,
        roomy,
        leased,
        naive,
        cached,
        uncached,
    }
}

/// `iters` calls of `f` split over `callers` concurrent tasks; the wall time.
fn timed<F, Fut>(rt: &Runtime, iters: u64, callers: u64, f: F) -> Duration
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    rt.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|c| {
                let f = f.clone();
                let share = iters / callers + u64::from(c < iters % callers);
                tokio::spawn(async move {
                    for _ in 0..share {
                        f().await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed()
    })
}

/// One benchmark: `try_acquire(key)` on `l` from `callers` concurrent tasks, each answer
/// checked against `allowed`.
fn checks(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    name: &str,
    (l, key, allowed): (&RedisLimiter, &str, bool),
    callers: u64,
) {
    // A key of the whole run (a bench process), so that no call allocates one.
    let key: &'static str = Box::leak(key.to_owned().into_boxed_str());
    let l = l.clone();
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let l = l.clone();
            timed(rt, iters, callers, move || {
                let l = l.clone();
                async move {
                    assert_eq!(l.try_acquire(&key).await.unwrap().is_allowed(), allowed);
                }
            })
        })
    });
}

fn bench_callers(c: &mut Criterion, s: &Setup, group: &str, callers: u64) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    let l = s.roomy.clone();
    g.bench_function("ping", |b| {
        b.iter_custom(|iters| {
            let l = l.clone();
            timed(&s.runtime, iters, callers, move || {
                let l = l.clone();
                async move { l.ping().await.unwrap() }
            })
        })
    });
    let rt = &s.runtime;
    checks(
        &mut g,
        rt,
        "token_bucket_script",
        (&s.roomy, "hot", true),
        callers,
    );
    checks(
        &mut g,
        rt,
        "token_bucket_leases_of_64",
        (&s.leased, "hot", true),
        callers,
    );
    let conn = s.naive.clone();
    g.bench_function("naive_get_incr", |b| {
        b.iter_custom(|iters| {
            let conn = conn.clone();
            timed(&s.runtime, iters, callers, move || {
                let mut c = conn.clone();
                async move {
                    common::naive_fixed_window(&mut c, "naive", u64::MAX).await;
                }
            })
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let s = setup();
    bench_callers(c, &s, "redis_one_at_a_time", 1);
    bench_callers(c, &s, "redis_concurrent_64", 64);
    let mut g = c.benchmark_group("redis_denied_hot_key");
    g.throughput(Throughput::Elements(1));
    checks(
        &mut g,
        &s.runtime,
        "deny_cache",
        (&s.cached, "denied", false),
        1,
    );
    checks(
        &mut g,
        &s.runtime,
        "no_deny_cache",
        (&s.uncached, "denied", false),
        1,
    );
    g.finish();
}

/// A full sliding log denies in O(log n): a log of 1,000 members against one of 10.
fn sliding_log_denials(c: &mut Criterion) {
    let s = setup();
    let mut g = c.benchmark_group("redis_sliding_log_denied");
    g.throughput(Throughput::Elements(1));
    for limit in [10u64, 1_000] {
        let key = format!("full-{limit}");
        let l = s.runtime.block_on(async {
            let l = RedisLimiter::builder(
                s._server.url(),
                Algorithm::SlidingLog,
                Quota::per_hour(limit).unwrap(),
            )
            .timeout(Duration::from_secs(1))
            .deny_cache(0)
            .build()
            .await
            .unwrap();
            for _ in 0..limit {
                assert!(l.try_acquire(&key).await.unwrap().is_allowed());
            }
            l
        });
        checks(
            &mut g,
            &s.runtime,
            &format!("limit_{limit}"),
            (&l, &key, false),
            1,
        );
    }
    g.finish();
}

criterion_group!(redis_benches, benches, sliding_log_denials);
criterion_main!(redis_benches);
