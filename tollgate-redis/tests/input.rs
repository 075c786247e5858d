//! Bad and extreme input on a real redis-server, on Redis's own clock: odd keys, odd costs,
//! quotas at the edge of what the scripts count exactly. A typed error or a correct decision,
//! never a panic or a wrong key.

mod common;

use std::time::Duration;

use common::{limiter_on, RedisServer};
use tollgate::{Algorithm, ManualClock, Quota, QuotaError};
use tollgate_redis::{BlockingRedisLimiter, Error, RedisLimiter, Source};

/// Keys that are empty, 10 KiB long, full of braces or binary: each is its own limiter (one
/// admission each at a limit of 1, so no two share state), under one hash tag per key.
#[tokio::test]
async fn odd_keys_are_distinct_limiters() {
    let server = RedisServer::start();
    let mut keys: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        vec![b'x'; 10 * 1024],
        b"{}".to_vec(),
        b"}".to_vec(),
        b"{".to_vec(),
        b"a}b{c".to_vec(),
        b"a}:tb".to_vec(),
        b"a".to_vec(),
        b"}:log".to_vec(),
        vec![0, 255, 0, 10, 13],
        "ключ🔑".as_bytes().to_vec(),
    ];
    keys.push(vec![0]);
    for algorithm in Algorithm::ALL {
        let l = limiter_on(server.url(), algorithm, Quota::per_hour(1).unwrap()).await;
        for key in &keys {
            assert!(
                l.try_acquire(key).await.unwrap().is_allowed(),
                "{algorithm:?} {key:?}"
            );
        }
        for key in &keys {
            let d = l.try_acquire(key).await.unwrap();
            assert!(!d.is_allowed(), "{algorithm:?} {key:?}: a second admission");
        }
    }
    let expected = keys.len() * Algorithm::ALL.len(); // one key per algorithm
    assert_eq!(server.cli(&["DBSIZE"]).trim(), expected.to_string());
}

/// Costs of 0 (peek), above capacity (refused at once, nothing taken, no retry), u64::MAX.
#[tokio::test]
async fn odd_costs_decide_correctly() {
    let server = RedisServer::start();
    for algorithm in Algorithm::ALL {
        let l = limiter_on(server.url(), algorithm, Quota::per_hour(10).unwrap()).await;
        let peek = l.try_acquire_n("k", 0).await.unwrap();
        assert!(peek.is_allowed() && peek.remaining() == 10, "{algorithm:?}");
        for n in [11, 1 << 53, u64::MAX] {
            let d = l.try_acquire_n("k", n).await.unwrap();
            assert!(d.exceeds_capacity() && !d.is_allowed(), "{algorithm:?} {n}");
            assert_eq!(
                (d.remaining(), d.retry_after()),
                (10, None),
                "{algorithm:?}"
            );
        }
        let d = l.try_acquire_n("k", 10).await.unwrap();
        assert!(d.is_allowed() && d.remaining() == 0);
        let d = l.try_acquire_n("k", 0).await.unwrap();
        assert!(
            d.is_allowed() && d.remaining() == 0,
            "a peek at an empty limiter passes"
        );
    }
}

/// Redis's clock: the first burst passes, then a denial whose retry is within one interval.
#[tokio::test]
async fn server_time_decisions() {
    let server = RedisServer::start();
    for algorithm in Algorithm::ALL {
        let l = limiter_on(server.url(), algorithm, Quota::per_hour(5).unwrap()).await;
        for left in (0..5).rev() {
            let d = l.try_acquire("k").await.unwrap();
            assert!(d.is_allowed() && d.remaining() == left, "{algorithm:?}");
            // The sliding window keeps an admission up to one slot (period / 8) past the period.
            assert!(
                d.reset_after() <= Duration::from_secs(4_050),
                "{algorithm:?}"
            );
        }
        let d = l.try_acquire("k").await.unwrap();
        assert!(!d.is_allowed());
        let retry = d.retry_after().expect("a retry");
        // The bucket's next token is 12 minutes away at most; the windows wait up to a period.
        let bound = match algorithm {
            Algorithm::TokenBucket => Duration::from_secs(720),
            Algorithm::SlidingWindow => Duration::from_secs(4_050),
            _ => Duration::from_secs(3_600),
        };
        assert!(
            retry > Duration::ZERO && retry <= bound,
            "{algorithm:?} {retry:?}"
        );
    }
}

/// Quotas at the edge of 2^53: the largest representable bucket works, one more token is
/// a typed error at build time; rates finer than a microsecond are refused on server time.
#[tokio::test]
async fn quotas_near_the_limit_of_exact_integers() {
    let server = RedisServer::start();
    let base = Quota::per_second(1).unwrap();
    // Interval 10^6 µs: 2^52 / 10^6 - 1 tokens of capacity.
    let max = (1u64 << 52) / 1_000_000 - 1;
    let big = limiter_on(
        server.url(),
        Algorithm::TokenBucket,
        base.with_burst(max).unwrap(),
    )
    .await;
    let d = big.try_acquire_n("k", max).await.unwrap();
    assert!(d.is_allowed() && d.remaining() == 0);
    assert!(!big.try_acquire("k").await.unwrap().is_allowed());
    let too_big = RedisLimiter::builder(
        server.url(),
        Algorithm::TokenBucket,
        base.with_burst(max + 1).unwrap(),
    )
    .build()
    .await;
    assert!(matches!(
        too_big,
        Err(Error::Quota(QuotaError::BurstTooLarge { max: m, .. })) if m == max
    ));
    // The windows count up to the core's largest limit, 2^48 - 1, in one call.
    let huge = Quota::try_new((1 << 48) - 1, Duration::from_secs(86_400)).unwrap();
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let l = limiter_on(server.url(), algorithm, huge).await;
        let d = l.try_acquire_n("k", (1 << 48) - 2).await.unwrap();
        assert!(d.is_allowed() && d.remaining() == 1, "{algorithm:?}");
        assert!(l
            .try_acquire_n("k", 2)
            .await
            .unwrap()
            .retry_after()
            .is_some());
    }
    let fine = Quota::try_new(1, Duration::from_nanos(1_500)).unwrap();
    for algorithm in Algorithm::ALL {
        let r = RedisLimiter::builder(server.url(), algorithm, fine)
            .build()
            .await;
        assert!(matches!(
            r,
            Err(Error::Quota(QuotaError::RateTooHigh { .. }))
        ));
    }
    // A plan's quota is checked per call.
    let l = limiter_on(server.url(), Algorithm::TokenBucket, base).await;
    let r = l.try_acquire_with("k", &fine).await;
    assert!(matches!(r, Err(Error::Quota(_))));
    // A test clock past 2^52 ns is a typed error, not a rounded time.
    let clock = ManualClock::new();
    let t = RedisLimiter::builder(server.url(), Algorithm::FixedWindow, base)
        .test_clock(clock.clone())
        .build()
        .await
        .unwrap();
    clock.set(Duration::from_nanos(1 << 52));
    assert!(matches!(
        t.try_acquire("k").await,
        Err(Error::ClockOutOfRange { .. })
    ));
}

/// Plans: each key's quota is the one asked for.
#[tokio::test]
async fn plans_per_call() {
    let server = RedisServer::start();
    let l = limiter_on(
        server.url(),
        Algorithm::SlidingWindow,
        Quota::per_hour(5).unwrap(),
    )
    .await;
    let pro = Quota::per_hour(50).unwrap();
    let mut n = 0;
    for _ in 0..60 {
        n += u32::from(
            l.try_acquire_with("carol", &pro)
                .await
                .unwrap()
                .is_allowed(),
        );
    }
    assert_eq!(n, 50);
}

/// A batch: answers in order, one per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_answer_in_order() {
    let server = RedisServer::start();
    let l = limiter_on(
        server.url(),
        Algorithm::FixedWindow,
        Quota::per_hour(3).unwrap(),
    )
    .await;
    let batch: Vec<(String, u64)> = (0..50).map(|i| (format!("k{}", i % 5), 1)).collect();
    let answers = l.try_acquire_many(batch).await;
    assert_eq!(answers.len(), 50);
    let allowed = answers
        .iter()
        .filter(|a| a.as_ref().unwrap().is_allowed())
        .count();
    assert_eq!(allowed, 15, "3 for each of 5 keys");
    for (i, a) in answers.iter().enumerate().take(15) {
        assert!(
            a.as_ref().unwrap().is_allowed(),
            "the first three of each key, call {i}"
        );
    }
}

/// The deny cache answers a denied key locally until its retry time, then asks Redis again.
#[tokio::test]
async fn the_deny_cache_answers_denied_keys_locally_until_retry() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let l = RedisLimiter::builder(
        server.url(),
        Algorithm::TokenBucket,
        Quota::per_second(2).unwrap(),
    )
    .test_clock(clock.clone())
    .timeout(Duration::from_secs(5))
    .build()
    .await
    .unwrap();
    assert_eq!(l.check("k", 1).await.source, Source::Redis);
    assert_eq!(l.check("k", 1).await.source, Source::Redis);
    let denied = l.check("k", 1).await;
    assert_eq!(denied.source, Source::Redis);
    assert_eq!(
        denied.decision.retry_after(),
        Some(Duration::from_millis(500))
    );
    clock.advance(Duration::from_millis(100));
    for _ in 0..100 {
        let c = l.check("k", 1).await;
        assert_eq!(c.source, Source::DenyCache);
        assert_eq!(c.decision.retry_after(), Some(Duration::from_millis(400)));
    }
    assert_eq!(l.stats().cache_denied, 100);
    assert_eq!(l.stats().redis_denied, 1);
    clock.advance(Duration::from_millis(400));
    let c = l.check("k", 1).await;
    assert_eq!(c.source, Source::Redis);
    assert!(c.decision.is_allowed());
}

/// The blocking wrapper, from plain threads.
#[test]
fn the_blocking_wrapper_serves_threads() {
    let server = RedisServer::start();
    let b = RedisLimiter::builder(
        server.url(),
        Algorithm::SlidingLog,
        Quota::per_hour(40).unwrap(),
    )
    .timeout(Duration::from_secs(5));
    let l = BlockingRedisLimiter::build(b).unwrap();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                s.spawn(move || {
                    (0..20)
                        .filter(|_| l.try_acquire("k").unwrap().is_allowed())
                        .count() as u64
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(total, 40);
    assert_eq!(l.check("k", 1).source, Source::DenyCache);
}

/// Denials write nothing (no dirty keys, so no replication or AOF traffic), admissions set
/// relative TTLs of at most the time until the limiter is full again.
#[tokio::test]
async fn denials_write_nothing_and_keys_expire_when_full_again() {
    let server = RedisServer::start();
    let changes = || -> u64 {
        server
            .cli(&["INFO", "persistence"])
            .lines()
            .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("rdb_changes_since_last_save")
    };
    // A day: no window edge passes while the test runs on real time.
    let quota = Quota::try_new(3, Duration::from_secs(86_400)).unwrap();
    let day_ms = 86_400_000i64;
    for algorithm in Algorithm::ALL {
        let l = RedisLimiter::builder(server.url(), algorithm, quota)
            .timeout(Duration::from_secs(5))
            .deny_cache(0)
            .build()
            .await
            .unwrap();
        let key = format!("ttl-{algorithm:?}");
        let d = l.try_acquire_n(&key, 3).await.unwrap();
        assert!(d.is_allowed(), "{algorithm:?}");
        let ttl: i64 = server.state_pttl(&key, algorithm);
        // Full again within the period (the sliding window: one slot more).
        assert!(
            ttl > 0 && ttl <= day_ms * 9 / 8 + 1,
            "{algorithm:?}: PTTL {ttl}"
        );
        assert!(
            // Less what passed before PTTL ran (a process start on a loaded machine).
            u128::from(ttl as u64) + 500 >= d.reset_after().as_millis(),
            "{algorithm:?}: the key expires before its state: {ttl} ms, {d:?}"
        );
        let before = changes();
        for _ in 0..50 {
            assert!(
                !l.try_acquire(&key).await.unwrap().is_allowed(),
                "{algorithm:?}"
            );
            assert!(l.try_acquire_n(&key, 0).await.unwrap().is_allowed());
            assert!(l.try_acquire_n(&key, 4).await.unwrap().exceeds_capacity());
        }
        assert_eq!(changes(), before, "{algorithm:?}: a denial or a peek wrote");
    }
}

/// Admissions that leave a key's expiry where it is (`KEEPTTL`, or the sliding log's expiry
/// read and kept) never leave it short of the state: after each of a run of admissions on one
/// key, the key lives at least until the limiter would be full again.
#[tokio::test]
async fn every_admission_leaves_the_key_alive_until_it_is_full_again() {
    let server = RedisServer::start();
    // A day: no window edge passes while the test runs; 1,000 per day: every unit admitted
    // moves the bucket's full time by 86.4 s.
    let quota = Quota::try_new(1_000, Duration::from_secs(86_400)).unwrap();
    let day_ms = 86_400_000u128;
    for algorithm in Algorithm::ALL {
        let l = limiter_on(server.url(), algorithm, quota).await;
        let key = format!("keep-{algorithm:?}");
        // 440 units in all: the bucket's full time passes the eighth of a drained bucket
        // its expiry is moved ahead by, several times.
        for i in 0..40 {
            let d = l.try_acquire_n(&key, 1 + (i % 3) * 10).await.unwrap();
            assert!(d.is_allowed(), "{algorithm:?} #{i}");
            let ttl: u128 = server.state_pttl(&key, algorithm);
            assert!(
                // Less what passed before PTTL ran (a process start on a loaded machine).
                ttl + 500 >= d.reset_after().as_millis(),
                "{algorithm:?} #{i}: the key expires before its state: {ttl} ms, {d:?}"
            );
            assert!(ttl <= day_ms * 9 / 8 + 1, "{algorithm:?} #{i}: PTTL {ttl}");
        }
    }
}

/// A bucket stored by an earlier version (five numbers, no expiry recorded) is read as the
/// same bucket: the tokens it spent stay spent, and the next admission moves the expiry.
#[tokio::test]
async fn a_bucket_stored_without_its_expiry_is_read_as_the_same_bucket() {
    let server = RedisServer::start();
    let quota = Quota::try_new(1, Duration::from_secs(86_400))
        .and_then(|q| q.with_burst(10))
        .unwrap();
    let l = limiter_on(server.url(), Algorithm::TokenBucket, quota).await;
    assert!(l.try_acquire_n("old", 6).await.unwrap().is_allowed());
    let dropped = server.cli(&[
        "EVAL",
        "local u, r, i, s, c = struct.unpack('dddddd', redis.call('GET', KEYS[1])) \
         redis.call('SET', KEYS[1], struct.pack('ddddd', u, r, i, s, c), 'KEEPTTL') \
         return #redis.call('GET', KEYS[1])",
        "1",
        "{tollgate:old}:tb",
    ]);
    assert_eq!(dropped.trim(), "40");
    let d = l.try_acquire_n("old", 4).await.unwrap();
    assert!(d.is_allowed() && d.remaining() == 0, "{d:?}");
    assert!(!l.try_acquire("old").await.unwrap().is_allowed());
    let ttl: u128 = server.state_pttl("old", Algorithm::TokenBucket);
    assert!(ttl + 500 >= d.reset_after().as_millis(), "{ttl} ms, {d:?}");
}
