//! Throughput and latency of one process's checks on a loopback redis-server it starts, side
//! by side in one run: a bare `PING` on the limiter's own connection, the token bucket's
//! script, the naive client-side `GET` + `INCR` fixed window (two round trips, not atomic),
//! one call at a time and with concurrent callers (pipelined on the one connection), and a
//! denied hot key behind the deny cache. Bounded: a fixed count of calls per row.
//!
//! `cargo run --release -p tollgate-redis --example redis_latency [calls per row]`

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use tollgate::{Algorithm, Quota};
use tollgate_redis::RedisLimiter;

/// One row: `calls` calls split over `callers` concurrent tasks; throughput and per-call
/// latency percentiles.
async fn row<F, Fut>(name: &str, calls: usize, callers: usize, f: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let f = f.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(calls / callers);
                for i in 0..calls / callers {
                    let t = Instant::now();
                    f(c * calls + i).await;
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(calls);
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let wall = start.elapsed();
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    let rate = lat.len() as f64 / wall.as_secs_f64();
    println!(
        "| {name:<44} | {callers:>7} | {rate:>12.0} | {:>8.1} | {:>8.1} |",
        p(0.50).as_secs_f64() * 1e6,
        p(0.99).as_secs_f64() * 1e6
    );
    rate
}

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let server = common::RedisServer::start();
    let runtime = common::runtime(1);
    runtime.block_on(async move {
        let url = server.url();
        let roomy = Quota::per_second(1_000_000).unwrap();
        let limiter = RedisLimiter::builder(url.as_str(), Algorithm::TokenBucket, roomy)
            .timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        let leased = RedisLimiter::builder(url.as_str(), Algorithm::TokenBucket, roomy)
            .timeout(Duration::from_secs(1))
            .leases(64, Duration::from_millis(10))
            .build()
            .await
            .unwrap();
        let client = redis::Client::open(url.as_str()).unwrap();
        let naive = ConnectionManager::new(client).await.unwrap();
        let denied = RedisLimiter::builder(url.as_str(), Algorithm::TokenBucket, Quota::per_hour(1).unwrap())
            .timeout(Duration::from_secs(1));
        let cached = denied.build().await.unwrap();
        let uncached = RedisLimiter::builder(url.as_str(), Algorithm::TokenBucket, Quota::per_hour(1).unwrap())
            .timeout(Duration::from_secs(1))
            .deny_cache(0)
            .build()
            .await
            .unwrap();
        let _ = cached.try_acquire("denied").await.unwrap();

        println!("{calls} calls per row, one hot key, loopback, one client process");
        println!();
        println!("| call                                         | callers |      calls/s |  p50 µs  |  p99 µs  |");
        println!("|----------------------------------------------|--------:|-------------:|---------:|---------:|");
        for callers in [1, 64] {
            let l = limiter.clone();
            let ping = row("PING on the limiter's connection", calls, callers, move |_| {
                let l = l.clone();
                async move { l.ping().await.unwrap() }
            })
            .await;
            let l = limiter.clone();
            let script = row("token bucket check (EVALSHA)", calls, callers, move |_| {
                let l = l.clone();
                async move {
                    assert!(l.try_acquire("hot").await.unwrap().is_allowed());
                }
            })
            .await;
            let l = leased.clone();
            row("token bucket, leases of 64 tokens", calls, callers, move |_| {
                let l = l.clone();
                async move {
                    assert!(l.try_acquire("leased").await.unwrap().is_allowed());
                }
            })
            .await;
            let c = naive.clone();
            let naive_rate = row("naive GET + INCR fixed window (client side)", calls, callers, move |_| {
                let mut c = c.clone();
                async move {
                    let _ = common::naive_fixed_window(&mut c, "naive", u64::MAX).await;
                }
            })
            .await;
            println!(
                "|   ratios: script / PING {:.2}, script / naive {:.2}          |         |              |          |          |",
                script / ping,
                script / naive_rate
            );
        }
        let l = uncached.clone();
        let red = row("denied hot key, no deny cache", calls, 1, move |_| {
            let l = l.clone();
            async move {
                assert!(!l.try_acquire("denied").await.unwrap().is_allowed());
            }
        })
        .await;
        let l = cached.clone();
        let local = row("denied hot key, behind the deny cache", calls * 10, 1, move |_| {
            let l = l.clone();
            async move {
                assert!(!l.try_acquire("denied").await.unwrap().is_allowed());
            }
        })
        .await;
        println!(
            "|   ratio: deny cache / Redis {:.0}                            |         |              |          |          |",
            local / red
        );
    });
}
