//! Faults on a real redis-server: frozen (SIGSTOP), killed and restarted, scripts flushed,
//! clients killed, many clients on one key. Every call answers within its deadline with a
//! typed error or the policy's decision, and the limiter recovers by itself.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{limiter_on, RedisServer};
use tollgate::{Algorithm, KeyedLimiter, Quota};
use tollgate_redis::{Error, FailurePolicy, RedisLimiter, Source, Target};

const DEADLINE: Duration = Duration::from_millis(200);
/// Scheduling slack on a loaded machine, beyond the deadline itself.
const SLACK: Duration = Duration::from_millis(200);

async fn limiter(server: &RedisServer, policy: FailurePolicy) -> RedisLimiter {
    RedisLimiter::builder(
        server.url(),
        Algorithm::TokenBucket,
        Quota::per_second(1_000).unwrap(),
    )
    .timeout(DEADLINE)
    .failure_policy(policy)
    .circuit_breaker(3, Duration::from_millis(100))
    .build()
    .await
    .expect("build")
}

/// Polls `check` until Redis answers again; the time it took.
async fn until_redis_answers(l: &RedisLimiter, key: &str) -> Duration {
    let start = Instant::now();
    loop {
        if l.check(key, 1).await.source == Source::Redis {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no recovery in 15 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_times_out_and_the_policy_answers_within_the_deadline() {
    let server = RedisServer::start();
    let closed = limiter(
        &server,
        FailurePolicy::FailClosed {
            retry_after: Duration::from_millis(700),
        },
    )
    .await;
    assert_eq!(closed.check("k", 1).await.source, Source::Redis);
    server.pause();
    for i in 0..5 {
        let start = Instant::now();
        let c = closed.check("k", 1).await;
        let took = start.elapsed();
        assert!(took < DEADLINE + SLACK, "call {i} took {took:?}");
        assert_eq!(c.source, Source::FailClosed);
        assert!(!c.decision.is_allowed());
        assert_eq!(c.decision.retry_after(), Some(Duration::from_millis(700)));
        // The first calls wait out the deadline; once the breaker opens, they answer at once.
        match c.error {
            Some(Error::Timeout { after }) => {
                assert_eq!(after, DEADLINE);
                assert!(took >= DEADLINE, "timed out early: {took:?}");
            }
            Some(Error::CircuitOpen) => assert!(i >= 3, "circuit open after {i} failures"),
            other => panic!("unexpected {other:?}"),
        }
    }
    let raw = closed.try_acquire("k").await;
    assert!(
        matches!(raw, Err(Error::CircuitOpen | Error::Timeout { .. })),
        "{raw:?}"
    );
    server.resume();
    until_redis_answers(&closed, "k").await;
    let s = closed.stats();
    assert_eq!(s.policy_allowed, 0, "fail closed admitted nothing");
    assert!(s.policy_denied >= 5 && s.errors >= 6, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_reconnected_and_only_the_policy_admits_meanwhile() {
    let mut server = RedisServer::start();
    let open = limiter(&server, FailurePolicy::FailOpen).await;
    let local = Arc::new(
        KeyedLimiter::<Vec<u8>>::try_new(Algorithm::TokenBucket, Quota::per_hour(3).unwrap())
            .unwrap(),
    );
    let fallback = limiter(&server, FailurePolicy::Local(local)).await;
    for _ in 0..10 {
        assert_eq!(open.check("k", 1).await.source, Source::Redis);
    }
    server.kill();
    for _ in 0..20 {
        let start = Instant::now();
        let c = open.check("k", 1).await;
        assert!(start.elapsed() < DEADLINE + SLACK);
        assert_eq!(c.source, Source::FailOpen);
        assert!(c.decision.is_allowed());
        assert!(
            c.error.as_ref().is_some_and(Error::is_unavailable),
            "{:?}",
            c.error
        );
    }
    // The local fallback: its own limit (3 per hour here), counted apart.
    let local_admitted = {
        let mut n = 0;
        for _ in 0..10 {
            let c = fallback.check("k", 1).await;
            assert_eq!(c.source, Source::Local);
            n += u64::from(c.decision.is_allowed());
        }
        n
    };
    assert_eq!(local_admitted, 3);
    assert_eq!(fallback.stats().policy_allowed, 3);
    assert_eq!(fallback.stats().policy_denied, 7);
    let s = open.stats();
    assert_eq!((s.redis_allowed, s.policy_allowed), (10, 20), "{s:?}");

    server.restart();
    until_redis_answers(&open, "k").await;
    until_redis_answers(&fallback, "k").await;
    // The restarted server had no scripts: they were reloaded without an error.
    let d = open.try_acquire("k").await.expect("answered after restart");
    assert!(d.is_allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_scripts_are_reloaded_transparently() {
    let server = RedisServer::start();
    server.cli(&["CONFIG", "RESETSTAT"]);
    for algorithm in Algorithm::ALL {
        let l = RedisLimiter::builder(server.url(), algorithm, Quota::per_second(10).unwrap())
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        assert_eq!(l.try_acquire("k").await.unwrap().remaining(), 9);
        assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
        // The next call finds no script (NOSCRIPT), sends it again, and decides.
        let d = l.try_acquire("k").await.expect("reloaded");
        assert_eq!(d.remaining(), 8, "{algorithm:?}");
        let loaded = server.cli(&["INFO", "memory"]);
        assert!(loaded.contains("number_of_cached_scripts:1"), "{loaded}");
        // One EVAL to reload, then EVALSHA again: the body is not sent on every call.
        for _ in 0..5 {
            let _ = l.try_acquire("k").await.unwrap();
        }
        let stats = server.cli(&["INFO", "commandstats"]);
        let calls = |cmd: &str| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0)
        };
        assert_eq!(
            (calls("eval"), calls("evalsha")),
            (1, 7),
            "{algorithm:?}: {stats}"
        );
        server.cli(&["CONFIG", "RESETSTAT"]);
        server.cli(&["FLUSHALL"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_client_connections_recover() {
    let server = RedisServer::start();
    let l = limiter(&server, FailurePolicy::FailOpen).await;
    assert!(l.try_acquire("k").await.is_ok());
    for _ in 0..3 {
        let killed = server.cli(&["CLIENT", "KILL", "TYPE", "normal"]);
        assert!(killed.trim().parse::<u32>().unwrap_or(0) >= 1, "{killed}");
        // Some calls may fail while the connection is re-established; none panic, and
        // Redis answers again soon.
        match l.try_acquire("k").await {
            Ok(_) | Err(Error::Connection(_) | Error::Timeout { .. } | Error::CircuitOpen) => {}
            Err(e) => panic!("unexpected {e}"),
        }
        until_redis_answers(&l, "k").await;
    }
}

/// 8 clients with their own connections (tasks) on one key, at one frozen instant: the total
/// admitted is exactly what one exact limiter admits, for every algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_clients_never_exceed_one_limit() {
    let server = RedisServer::start();
    let target = Target::from(server.url());
    for algorithm in Algorithm::ALL {
        let quota = Quota::per_minute(100).unwrap();
        let total = common::eight_clients_admitted(&target, algorithm, quota, 60, 2).await;
        assert_eq!(total, 100, "{algorithm:?}");
    }
}

/// The same across processes: 4 child processes and 4 tasks, on Redis's own clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_clients_across_processes_never_exceed_one_limit() {
    let server = RedisServer::start();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args(["worker_process", "--exact", "--ignored", "--nocapture"])
                .env("TOLLGATE_REDIS_WORKER", server.url())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn a worker process")
        })
        .collect();
    let mut total = 0;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let url = server.url();
        tasks.push(tokio::spawn(async move { work(&url).await }));
    }
    for t in tasks {
        total += t.await.unwrap();
    }
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "worker failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("admitted="))
            .unwrap_or_else(|| panic!("no count from a worker: {text}"));
        total += line.trim().parse::<u64>().unwrap();
    }
    // 50 per hour, burst 50: within this test's seconds, no further token arrives.
    assert_eq!(total, 50);
}

/// The body of one client: 40 requests on the hot key, how many were admitted.
async fn work(url: &str) -> u64 {
    let quota = Quota::per_hour(50).unwrap();
    let l = limiter_on(url, Algorithm::TokenBucket, quota).await;
    let mut admitted = 0;
    for _ in 0..40 {
        admitted += u64::from(l.try_acquire("hot").await.unwrap().is_allowed());
    }
    admitted
}

/// Run as a child process by the test above (`--ignored --exact worker_process`).
#[tokio::test]
#[ignore = "a worker process of eight_clients_across_processes_never_exceed_one_limit"]
async fn worker_process() {
    let url = std::env::var("TOLLGATE_REDIS_WORKER").expect("started by the parent test");
    println!("admitted={}", work(&url).await);
}

/// Down for longer than the connection's reconnect attempts last (6 tries, 50 ms doubling to
/// 1 s, 2.6 s in all): the limiter still reconnects once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_outage_still_ends_in_a_reconnect() {
    let mut server = RedisServer::start();
    let l = limiter(&server, FailurePolicy::FailOpen).await;
    assert!(l.try_acquire("k").await.is_ok());
    server.kill();
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(4) {
        assert_eq!(l.check("k", 1).await.source, Source::FailOpen);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.restart();
    until_redis_answers(&l, "k").await;
}
