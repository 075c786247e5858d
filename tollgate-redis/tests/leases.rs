//! Leases on a real redis-server: tokens the script grants ahead are spent locally, never
//! more than it granted, and lapse at the lease's end. Test clock only: nothing sleeps.

mod common;

use std::time::Duration;

use common::RedisServer;
use tollgate::{Algorithm, ManualClock, Quota};
use tollgate_redis::{Error, RedisLimiter, Source};

async fn leased(server: &RedisServer, clock: &ManualClock, size: u64) -> RedisLimiter {
    RedisLimiter::builder(
        server.url(),
        Algorithm::TokenBucket,
        Quota::per_minute(100).unwrap(),
    )
    .test_clock(clock.clone())
    .timeout(Duration::from_secs(5))
    .leases(size, Duration::from_millis(100))
    .build()
    .await
    .unwrap()
}

#[tokio::test]
async fn one_call_in_ten_goes_to_redis_and_the_total_is_the_limit() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let l = leased(&server, &clock, 10).await;
    let mut sources = Vec::new();
    for _ in 0..120 {
        let c = l.check("hot", 1).await;
        sources.push((c.decision.is_allowed(), c.source));
    }
    let allowed = sources.iter().filter(|(a, _)| *a).count();
    assert_eq!(allowed, 100, "exactly the bucket's burst");
    let s = l.stats();
    assert_eq!((s.redis_allowed, s.lease_allowed), (10, 90), "{s:?}");
    assert_eq!(sources[0].1, Source::Redis);
    assert_eq!(sources[1].1, Source::Lease);
    // The lease's decisions count down what it holds.
    assert_eq!(l.try_acquire("k").await.unwrap().remaining(), 90);
    assert_eq!(l.try_acquire("k").await.unwrap().remaining(), 8);
}

#[tokio::test]
async fn leases_lapse_at_their_end() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let l = leased(&server, &clock, 10).await;
    assert!(l.try_acquire("k").await.unwrap().is_allowed()); // takes 10, spends 1
    assert_eq!(l.check("k", 1).await.source, Source::Lease);
    clock.advance(Duration::from_millis(100));
    // The 8 left lapsed: the next request asks Redis, whose bucket lost them (no refund).
    let c = l.check("k", 1).await;
    assert_eq!(c.source, Source::Redis);
    // 100 - 10 taken + 0.1 s × 100/min refilled (0 whole tokens) - 10 taken now = 80.
    assert_eq!(c.decision.remaining(), 80);
}

/// Eight clients, each with its own leases, on one hot key at one frozen instant: never more
/// than the limit in total, and no more lost in unspent leases than they can hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_leasing_clients_never_exceed_the_limit() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let l = leased(&server, &clock, 7).await;
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            for _ in 0..40 {
                n += u64::from(l.try_acquire("hot").await.unwrap().is_allowed());
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert!(total <= 100, "admitted {total} of a limit of 100");
    assert!(total > 100 - 8 * 7, "admitted {total}");
}

#[tokio::test]
async fn leases_need_the_token_bucket() {
    let server = RedisServer::start();
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let r = RedisLimiter::builder(server.url(), algorithm, Quota::per_second(5).unwrap())
            .leases(5, Duration::from_millis(10))
            .build()
            .await;
        assert!(matches!(r, Err(Error::Unsupported(_))), "{algorithm:?}");
    }
}
