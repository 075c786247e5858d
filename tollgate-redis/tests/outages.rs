//! Server error classes on real redis-servers: a server that cannot serve now (`BUSY`, `OOM`,
//! `READONLY` after a replica promotion) is an outage — a typed `Error::Unavailable`, counted
//! by the breaker, answered by the policy within the deadline — while a key of the wrong type
//! is a bug, denied and reported whatever the policy. And calls queued behind a frozen server
//! past their deadline: counted by Redis when it resumes, never admitted twice. And a refused
//! password: reported at `build`, at once.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{admitted_in_batch, free_port, state_suffix, RedisServer};
use tollgate::{Algorithm, Quota};
use tollgate_redis::{Error, FailurePolicy, RedisLimiter, Source};

const DEADLINE: Duration = Duration::from_millis(300);
const SLACK: Duration = Duration::from_millis(300);

async fn limiter(
    url: String,
    algorithm: Algorithm,
    quota: Quota,
    policy: FailurePolicy,
) -> RedisLimiter {
    RedisLimiter::builder(url, algorithm, quota)
        .timeout(DEADLINE)
        .deny_cache(0)
        .failure_policy(policy)
        .circuit_breaker(0, Duration::ZERO)
        .build()
        .await
        .expect("build")
}

fn code(e: &Error) -> Option<String> {
    match e {
        Error::Unavailable(r) | Error::Script(r) => r.code().map(str::to_owned),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_and_oom_are_outages_and_a_wrong_type_is_a_bug() {
    let server = RedisServer::start();
    for algorithm in Algorithm::ALL {
        let quota = Quota::per_hour(5).unwrap();
        let open = limiter(server.url(), algorithm, quota, FailurePolicy::FailOpen).await;

        // OOM: maxmemory below what is used; the script's write is refused.
        assert_eq!(
            server.cli(&["CONFIG", "SET", "maxmemory", "1"]).trim(),
            "OK"
        );
        let e = open.try_acquire("oom").await.unwrap_err();
        assert!(e.is_unavailable(), "{algorithm:?}: {e}");
        assert_eq!(code(&e).as_deref(), Some("OOM"), "{algorithm:?}: {e}");
        let c = open.check("oom", 1).await;
        assert_eq!(c.source, Source::FailOpen, "{algorithm:?}");
        server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
        assert!(open.try_acquire("oom").await.unwrap().is_allowed());

        // A key of the wrong type: a bug, not an outage; FailOpen does not admit it.
        let key = format!("{{tollgate:wrong}}:{}", state_suffix(algorithm));
        server.cli(&["LPUSH", &key, "x"]);
        let e = open.try_acquire("wrong").await.unwrap_err();
        assert!(
            matches!(e, Error::Script(_)) && !e.is_unavailable(),
            "{algorithm:?}: {e}"
        );
        assert_eq!(code(&e).as_deref(), Some("WRONGTYPE"));
        let c = open.check("wrong", 1).await;
        assert_eq!(c.source, Source::Error, "{algorithm:?}");
        assert!(!c.decision.is_allowed());
        assert_eq!(
            open.stats().policy_allowed,
            1,
            "{algorithm:?}: only the OOM call"
        );
    }

    // BUSY: a script running past busy-reply-threshold; every other command is refused.
    server.cli(&["CONFIG", "SET", "busy-reply-threshold", "50"]);
    let closed = limiter(
        server.url(),
        Algorithm::TokenBucket,
        Quota::per_hour(5).unwrap(),
        FailurePolicy::FailClosed {
            retry_after: Duration::from_millis(700),
        },
    )
    .await;
    let mut busy = Command::new("redis-cli")
        .args([
            "-p",
            &server.port.to_string(),
            "EVAL",
            "while true do end",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !server.cli(&["PING"]).starts_with("BUSY") {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the server never got busy"
        );
    }
    let start = Instant::now();
    let c = closed.check("k", 1).await;
    assert!(start.elapsed() < DEADLINE + SLACK, "{:?}", start.elapsed());
    assert_eq!(c.source, Source::FailClosed);
    let e = c.error.unwrap();
    assert!(
        e.is_unavailable() && code(&e).as_deref() == Some("BUSY"),
        "{e}"
    );
    server.cli(&["SCRIPT", "KILL"]);
    let _ = busy.wait();
    assert!(closed.try_acquire("k").await.unwrap().is_allowed());
}

fn connections(server: &RedisServer) -> u64 {
    server
        .cli(&["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// A replica promoted, the old primary demoted: the old primary answers READONLY (an outage,
/// and the connection is reopened), the new one has none of the scripts (loaded on demand)
/// and the replicated state: across both, never more than the quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_takes_over_and_the_demoted_primary_is_an_outage() {
    let a = RedisServer::start();
    let b = RedisServer::start_with(free_port(false), Vec::new());
    let port = |s: &RedisServer| s.port.to_string();
    b.cli(&["REPLICAOF", "127.0.0.1", &port(&a)]);
    let start = Instant::now();
    while !b
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "replica never synced"
        );
    }
    let quota = Quota::per_hour(10).unwrap();
    let fail_open = |url| limiter(url, Algorithm::TokenBucket, quota, FailurePolicy::FailOpen);
    let on_a = fail_open(a.url()).await;
    let mut admitted = 0;
    for _ in 0..6 {
        admitted += u64::from(on_a.try_acquire("k").await.unwrap().is_allowed());
    }
    // Every write acknowledged by the replica before the switch.
    assert_eq!(a.cli(&["WAIT", "1", "2000"]).trim(), "1");
    // And the key present on the replica (a real server event, bounded).
    let start = Instant::now();
    while b.cli(&["EXISTS", "{tollgate:k}:tb"]).trim() != "1" {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "not replicated: {}",
            b.cli(&["INFO", "replication"])
        );
    }
    b.cli(&["REPLICAOF", "NO", "ONE"]);
    a.cli(&["REPLICAOF", "127.0.0.1", &port(&b)]);
    let before = connections(&a);
    let c = on_a.check("k", 1).await;
    assert_eq!(c.source, Source::FailOpen);
    let e = c.error.unwrap();
    assert!(
        e.is_unavailable() && code(&e).as_deref() == Some("READONLY"),
        "{e}"
    );
    // The connection was replaced: the next call opens a new one.
    let _ = on_a.try_acquire("k").await;
    assert!(connections(&a) > before, "no reconnect after READONLY");

    // The new primary: scripts absent (never replicated), state present.
    assert_eq!(b.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    let on_b = fail_open(b.url()).await;
    b.cli(&["SCRIPT", "FLUSH"]);
    for _ in 0..10 {
        admitted += u64::from(on_b.try_acquire("k").await.unwrap().is_allowed());
    }
    assert_eq!(admitted, 10, "across the failover: one quota");
}

/// Frozen (SIGSTOP) with calls from 4 clients queued past their deadline: each caller gets
/// `Timeout` within the deadline; when the server resumes it runs the queued scripts, so those
/// units are counted although nobody was admitted by them (lost, never admitted twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_queued_behind_a_frozen_server_are_counted_not_admitted() {
    let server = RedisServer::start();
    let quota = Quota::per_hour(20).unwrap();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(
            limiter(
                server.url(),
                Algorithm::FixedWindow,
                quota,
                FailurePolicy::FailClosed {
                    retry_after: Duration::from_secs(1),
                },
            )
            .await,
        );
    }
    assert!(clients[0].try_acquire("k").await.unwrap().is_allowed());
    server.pause();
    let mut tasks = Vec::new();
    for l in clients.clone() {
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let c = l.check("k", 2).await;
            (
                start.elapsed(),
                c.source,
                c.error.map(|e| e.is_unavailable()),
            )
        }));
    }
    for t in tasks {
        let (took, source, unavailable) = t.await.unwrap();
        assert!(took < DEADLINE + SLACK, "{took:?}");
        assert_eq!((source, unavailable), (Source::FailClosed, Some(true)));
    }
    server.resume();
    // A queued call (2 units) runs when the server resumes unless its connection was dropped
    // first: each is counted or lost, never admitted. 1 + 2 × (0 to 4) counted.
    let peek = clients[1].try_acquire_n("k", 0).await.unwrap();
    let counted = 20 - peek.remaining();
    assert!(
        (1..=9).contains(&counted) && counted % 2 == 1,
        "{counted} counted"
    );
    let mut admitted = 1;
    for l in &clients {
        for _ in 0..10 {
            admitted += u64::from(l.try_acquire("k").await.unwrap().is_allowed());
        }
    }
    // A queued call may still land after the peek: never more than the peek left, and at most
    // its 2 units less per call still queued then.
    assert!(
        admitted <= 1 + peek.remaining() && admitted + (9 - counted) > peek.remaining(),
        "{admitted} admitted, {} left at the peek: never above the quota less what was counted",
        peek.remaining()
    );
}

/// A refused password ends `build` at once with the server's refusal (not a timeout after
/// retries until the connect deadline: the manager's six retries wait 2.5 s in all), and no
/// password at all is a typed error too; the right one builds and counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_password_is_reported_at_build_not_retried() {
    let server = RedisServer::start_with_password("s3cret");
    let quota = Quota::per_hour(2).unwrap();
    let at = |auth: &str| format!("redis://{auth}127.0.0.1:{}/", server.port);
    let build = |url: String| {
        RedisLimiter::builder(url, Algorithm::FixedWindow, quota)
            .connect_timeout(Duration::from_secs(2))
            .build()
    };
    let wrong = build(at(":wrong@")).await.unwrap_err();
    assert!(matches!(wrong, Error::Connection(_)), "{wrong}");
    assert!(
        wrong.to_string().contains("AuthenticationFailed"),
        "{wrong}"
    );
    let none = build(at("")).await.unwrap_err();
    assert!(!matches!(none, Error::Timeout { .. }), "{none}");
    assert!(none.to_string().contains("NOAUTH"), "{none}");
    let l = build(at(":s3cret@")).await.expect("the right password");
    let admitted = admitted_in_batch(&l, (0..3).map(|_| ("k", 1))).await;
    assert_eq!(admitted, [true, true, false]);
}
