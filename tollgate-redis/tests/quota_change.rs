//! A key's state written under one quota, then decided under another (a redeploy with a new
//! quota, or `try_acquire_with`), on a real redis-server: every algorithm, a longer and a
//! shorter period, a lower and a higher limit. Each call answers (never an error), decides by
//! the quota it is called with, admits no more than that quota allows on top of what the
//! stored state counted, and waits no longer than that quota's own `retry_after`.

mod common;

use std::time::Duration;

use common::RedisServer;
use tollgate::{Algorithm, ManualClock, Quota};
use tollgate_redis::RedisLimiter;

async fn on(
    server: &RedisServer,
    algorithm: Algorithm,
    quota: Quota,
    clock: Option<&ManualClock>,
) -> RedisLimiter {
    let mut b = RedisLimiter::builder(server.url(), algorithm, quota)
        .timeout(Duration::from_secs(5))
        .deny_cache(0);
    if let Some(c) = clock {
        b = b.test_clock(c.clone());
    }
    b.build().await.expect("build")
}

/// The longest wait the quota itself can answer for one unit: a period (the sliding window:
/// one slot more).
fn own_wait(algorithm: Algorithm, q: Quota) -> Duration {
    match algorithm {
        Algorithm::TokenBucket => {
            q.period() / u32::try_from(q.limit()).unwrap() + q.period() / 1000
        }
        Algorithm::SlidingWindow => q.period() + q.period() / 8 + Duration::from_nanos(8),
        _ => q.period(),
    }
}

/// Fills `key` under `old` at one instant, then asks under `new` at the same instant and after
/// the wait it answers: the properties of the module's doc.
async fn change(server: &RedisServer, algorithm: Algorithm, old: Quota, new: Quota) {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000_000));
    let before = on(server, algorithm, old, Some(&clock)).await;
    let after = on(server, algorithm, new, Some(&clock)).await;
    let key = format!("change-{algorithm:?}-{old:?}-{new:?}");
    let what = format!("{algorithm:?} {old:?} -> {new:?}");
    let mut counted = 0;
    for _ in 0..old.limit() + 2 {
        counted += u64::from(before.try_acquire(&key).await.unwrap().is_allowed());
    }
    assert_eq!(counted, old.limit(), "{what}: the old quota filled");
    let mut admitted = 0;
    let mut last = None;
    for _ in 0..new.limit() + 2 {
        let d = after
            .try_acquire(&key)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(d.remaining() <= new.limit(), "{what}: {d:?}");
        if d.is_allowed() {
            admitted += 1;
        } else {
            let wait = d.retry_after().expect("a denial of one unit says when");
            assert!(
                wait <= own_wait(algorithm, new),
                "{what}: waits {wait:?}, beyond the new quota's own"
            );
            last = Some(wait);
        }
    }
    assert!(
        admitted <= new.limit().saturating_sub(counted),
        "{what}: {admitted} admitted on top of {counted} counted"
    );
    // After the wait it answered, the new quota admits again: no lockout.
    let wait = last.expect("the new quota filled");
    clock.advance(wait);
    let d = after.try_acquire(&key).await.unwrap();
    assert!(d.is_allowed(), "{what}: still denied after {wait:?}: {d:?}");
    // And the old quota, asked again, decides too (no error, no negative).
    let d = before.try_acquire_n(&key, 0).await.unwrap();
    assert!(d.remaining() <= old.limit(), "{what}: back: {d:?}");
}

#[tokio::test]
async fn every_algorithm_decides_by_the_quota_it_is_called_with() {
    let server = RedisServer::start();
    let cases = [
        // A longer period (the stored window used to be read as years away).
        (
            Quota::per_second(10).unwrap(),
            Quota::per_minute(10).unwrap(),
        ),
        // A shorter one.
        (
            Quota::per_minute(10).unwrap(),
            Quota::per_second(10).unwrap(),
        ),
        // A lower limit (the stored count above it used to answer remaining = -50).
        (
            Quota::per_minute(100).unwrap(),
            Quota::per_minute(50).unwrap(),
        ),
        // A higher one.
        (
            Quota::per_minute(50).unwrap(),
            Quota::per_minute(100).unwrap(),
        ),
    ];
    for algorithm in Algorithm::ALL {
        for (old, new) in cases {
            change(&server, algorithm, old, new).await;
        }
    }
}

/// The token bucket's conversion, exactly: 10 tokens owed at 0.1 s are 10 tokens owed at 6 s.
#[tokio::test]
async fn a_token_bucket_owes_tokens_not_time_under_another_quota() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let bucket = |quota| on(&server, Algorithm::TokenBucket, quota, Some(&clock));
    let fast = bucket(Quota::per_second(10).unwrap()).await;
    let slow = bucket(Quota::per_minute(10).unwrap()).await;
    for _ in 0..4 {
        assert!(fast.try_acquire("k").await.unwrap().is_allowed());
    }
    // 4 owed under the new quota: 6 of its 10 left.
    let d = slow.try_acquire_n("k", 0).await.unwrap();
    assert_eq!(d.remaining(), 6);
    assert_eq!(d.reset_after(), Duration::from_secs(24));
    let d = slow.try_acquire_n("k", 7).await.unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Some(Duration::from_secs(6)));
}

/// On Redis's own clock: the TTL a new quota writes is its own (the fixed window's used to be
/// years), and a lower limit's denial is an answer, not `BadReply`.
#[tokio::test]
async fn on_server_time_ttls_follow_the_new_quota() {
    let server = RedisServer::start();
    for algorithm in Algorithm::ALL {
        let minute = on(&server, algorithm, Quota::per_minute(10).unwrap(), None).await;
        let hour = on(&server, algorithm, Quota::per_hour(1_000).unwrap(), None).await;
        let key = format!("ttl-{algorithm:?}");
        for _ in 0..5 {
            assert!(minute.try_acquire(&key).await.unwrap().is_allowed());
        }
        let d = hour.try_acquire(&key).await.unwrap();
        assert!(d.is_allowed(), "{algorithm:?}: {d:?}");
        assert!(d.remaining() < 1_000, "{algorithm:?}: {d:?}");
        let ttl: u64 = server.state_pttl(&key, algorithm);
        assert!(
            ttl > 0 && ttl <= 3_600_000 * 9 / 8,
            "{algorithm:?}: PTTL {ttl} ms"
        );
        // Down to 2 per hour: remaining 0 and a wait within the hour, never an error.
        let low = on(&server, algorithm, Quota::per_hour(2).unwrap(), None).await;
        let d = low.try_acquire(&key).await.unwrap();
        assert!(
            !d.is_allowed() && d.remaining() == 0,
            "{algorithm:?}: {d:?}"
        );
        let wait = d.retry_after().unwrap();
        assert!(
            wait <= Duration::from_secs(3_600 * 9 / 8),
            "{algorithm:?}: {wait:?}"
        );
        // And check() answers from Redis, whatever the policy.
        let c = low.check(&key, 1).await;
        assert_eq!(
            c.source,
            tollgate_redis::Source::Redis,
            "{algorithm:?}: {:?}",
            c.error
        );
    }
}
