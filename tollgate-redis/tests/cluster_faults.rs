//! Faults of a real Redis Cluster (three primaries on loopback, started by the harness): a
//! primary frozen, a primary killed with its replica taking over, a slot migrated while
//! requests run. Each asserts who answers, within the deadline, and that no key is admitted
//! more than its quota across every client.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{wait_synced, RedisCluster};
use tollgate::{Algorithm, Quota};
use tollgate_redis::{Error, FailurePolicy, RedisLimiter, Source, Target};

const DEADLINE: Duration = Duration::from_millis(50);
/// What a call may take beyond its deadline on a loaded two-core machine.
const SLACK: Duration = Duration::from_millis(250);

async fn clients(
    target: &Target,
    algorithm: Algorithm,
    quota: Quota,
    n: usize,
) -> Vec<RedisLimiter> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            RedisLimiter::builder(target.clone(), algorithm, quota)
                .timeout(DEADLINE)
                .circuit_breaker(3, Duration::from_millis(300))
                .failure_policy(FailurePolicy::FailClosed {
                    retry_after: Duration::from_secs(1),
                })
                .deny_cache(0)
                .build()
                .await
                .unwrap(),
        );
    }
    out
}

/// The Redis key of `key` for the token bucket (the slot is its hash tag's).
fn tb(key: &str) -> String {
    format!("{{tollgate:{key}}}:tb")
}

/// One answer of a round, with how long it took.
struct Answer {
    key: usize,
    source: Source,
    allowed: bool,
    error: Option<Error>,
    took: Duration,
}

/// Every client checks every key once, the clients concurrently.
async fn round(clients: &[RedisLimiter], keys: &[String]) -> Vec<Answer> {
    let mut tasks = Vec::new();
    for l in clients {
        let (l, keys) = (l.clone(), keys.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                let t0 = Instant::now();
                let c = l.check(k, 1).await;
                out.push(Answer {
                    key: i,
                    source: c.source,
                    allowed: c.decision.is_allowed(),
                    error: c.error,
                    took: t0.elapsed(),
                });
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// One primary frozen (SIGSTOP): its keys get the policy's answer within the deadline, and
/// its breaker opens; keys on the two other primaries keep getting Redis's decisions (their
/// breakers stay closed), and no key is admitted more than its quota.
#[test]
fn a_frozen_primary_opens_its_own_breaker_only() {
    let cluster = RedisCluster::start_with(&["--cluster-require-full-coverage", "no"]);
    let target = Target::cluster(cluster.urls());
    let keys: Vec<String> = (0..30).map(|i| format!("user:{i}")).collect();
    let frozen = 0;
    let on_frozen: Vec<bool> = keys
        .iter()
        .map(|k| cluster.node_of(&tb(k)) == frozen)
        .collect();
    assert!(on_frozen.iter().any(|&f| f) && on_frozen.iter().any(|&f| !f));
    let quota = Quota::per_hour(3).unwrap();
    common::runtime(2).block_on(async {
        let clients = clients(&target, Algorithm::TokenBucket, quota, 4).await;
        let mut admitted = vec![0u64; keys.len()];
        // Healthy: every key admitted once.
        for a in round(&clients[..1], &keys).await {
            assert_eq!(a.source, Source::Redis);
            assert!(a.allowed);
            admitted[a.key] += 1;
        }
        cluster.nodes[frozen].pause();
        let mut circuit_open = 0;
        for _ in 0..4 {
            for a in round(&clients, &keys).await {
                assert!(
                    a.took <= DEADLINE + SLACK,
                    "{:?} for {}",
                    a.took,
                    keys[a.key]
                );
                if on_frozen[a.key] {
                    assert_eq!(a.source, Source::FailClosed, "{}", keys[a.key]);
                    assert!(!a.allowed);
                    let e = a.error.expect("the error answered for");
                    assert!(e.is_unavailable(), "{e}");
                    circuit_open += usize::from(matches!(e, Error::CircuitOpen));
                } else {
                    assert_eq!(a.source, Source::Redis, "{}: {:?}", keys[a.key], a.error);
                    admitted[a.key] += u64::from(a.allowed);
                }
            }
        }
        cluster.nodes[frozen].resume();
        assert!(
            circuit_open > 0,
            "the frozen primary's breaker never opened"
        );
        for (i, &n) in admitted.iter().enumerate() {
            // 1 + 16 asked: the quota exactly on live primaries, the first one on the frozen.
            let expected = if on_frozen[i] { 1 } else { 3 };
            assert_eq!(n, expected, "{}", keys[i]);
        }
    });
}

/// A primary killed (SIGKILL) with a synced replica: its keys get the policy's answer within
/// the deadline until the replica is promoted, then Redis's again from the replicated state
/// (scripts loaded on demand: the replica never ran them), never an admission above the
/// quota. Keys on the other primaries get Redis's decisions, but for the calls caught in the
/// `redis` crate's slot refreshes (it holds every request while it reads the new slot map):
/// a few, each a timeout answered by the policy within the deadline, never a breaker opened.
#[test]
fn a_killed_primary_is_replaced_by_its_replica() {
    let extra = ["--cluster-require-full-coverage", "no"];
    let mut cluster = RedisCluster::start_with(&extra);
    let replica = cluster.add_replica(0, &extra);
    let target = Target::cluster(cluster.urls());
    let keys: Vec<String> = (0..30).map(|i| format!("user:{i}")).collect();
    let on_killed: Vec<bool> = keys.iter().map(|k| cluster.node_of(&tb(k)) == 0).collect();
    assert!(on_killed.iter().any(|&f| f) && on_killed.iter().any(|&f| !f));
    let quota = Quota::per_hour(3).unwrap();
    common::runtime(2).block_on(async {
        let clients = clients(&target, Algorithm::TokenBucket, quota, 4).await;
        let mut admitted = vec![0u64; keys.len()];
        // The killed primary's keys filled to the quota; the others' admitted once.
        for _ in 0..3 {
            for a in round(&clients[..1], &keys).await {
                assert_eq!(a.source, Source::Redis);
                admitted[a.key] += u64::from(a.allowed);
            }
        }
        assert!(admitted.iter().all(|&n| n == 3));
        wait_synced(&cluster.nodes[0], &replica);
        cluster.nodes[0].kill();
        let start = Instant::now();
        let (mut policy, mut after) = (0, 0);
        let (mut healthy, mut stalled) = (0, 0);
        loop {
            let answers = round(&clients, &keys).await;
            let mut all_redis = true;
            for a in &answers {
                assert!(
                    a.took <= DEADLINE + SLACK,
                    "{:?} for {}",
                    a.took,
                    keys[a.key]
                );
                admitted[a.key] += u64::from(a.allowed);
                healthy += usize::from(!on_killed[a.key]);
                match a.source {
                    Source::Redis => {}
                    Source::FailClosed
                        if !on_killed[a.key] && matches!(a.error, Some(Error::Timeout { .. })) =>
                    {
                        stalled += 1;
                    }
                    Source::FailClosed if on_killed[a.key] => {
                        assert!(a.error.as_ref().is_some_and(Error::is_unavailable));
                        all_redis = false;
                        policy += 1;
                    }
                    s => panic!("{}: {s:?} {:?}", keys[a.key], a.error),
                }
            }
            if all_redis && policy > 0 {
                after += 1;
                if after == 2 {
                    break;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the replica never took over: {:?}",
                replica.cli(&["CLUSTER", "NODES"])
            );
        }
        assert_eq!(replica.replication("role").as_deref(), Some("master"));
        assert!(
            stalled * 20 <= healthy,
            "{stalled} of {healthy} calls on live primaries timed out"
        );
        for (i, &n) in admitted.iter().enumerate() {
            assert_eq!(n, 3, "{}: admitted above the quota", keys[i]);
        }
    });
}

/// A slot holding live keys of all four algorithms migrated from one primary to another
/// (`SETSLOT IMPORTING`/`MIGRATING`, `MIGRATE` key by key, `SETSLOT NODE`) while four clients
/// keep asking: every call gets a decision (the client follows `ASK` with `ASKING`, `MOVED`
/// with a new slot map, and reloads the script on the node that lacks it), and each
/// algorithm admits exactly its quota across the clients.
#[test]
fn a_slot_migrated_under_load_answers_every_call() {
    let cluster = RedisCluster::start();
    let target = Target::cluster(cluster.urls());
    let quota = Quota::per_hour(40).unwrap();
    let hot = "hot";
    let from = cluster.node_of(&tb(hot));
    let to = (from + 1) % 3;
    let slot = cluster.nodes[0]
        .cli(&["CLUSTER", "KEYSLOT", &tb(hot)])
        .trim()
        .to_owned();
    let calls = Arc::new(AtomicU64::new(0));
    let rt = common::runtime(2);
    let limiters: Vec<Vec<RedisLimiter>> = rt.block_on(async {
        let mut all = Vec::new();
        for a in Algorithm::ALL {
            let mut per = Vec::new();
            for _ in 0..4 {
                per.push(
                    RedisLimiter::builder(target.clone(), a, quota)
                        .timeout(Duration::from_secs(3))
                        .deny_cache(0)
                        .build()
                        .await
                        .unwrap(),
                );
            }
            all.push(per);
        }
        all
    });
    // Live state in the slot before it moves: a first call of each algorithm.
    let first: u64 = rt.block_on(async {
        let mut n = 0;
        for per in &limiters {
            n += u64::from(per[0].try_acquire(hot).await.unwrap().is_allowed());
        }
        n
    });
    assert_eq!(first, 4);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (ai, per) in limiters.iter().enumerate() {
        for l in per {
            let (l, calls, done) = (l.clone(), calls.clone(), done.clone());
            tasks.push(rt.spawn(async move {
                let mut admitted = 0u64;
                let mut after_done = 0;
                while after_done < 20 {
                    let d = l
                        .try_acquire(hot)
                        .await
                        .unwrap_or_else(|e| panic!("{:?}: {e}", Algorithm::ALL[ai]));
                    admitted += u64::from(d.is_allowed());
                    calls.fetch_add(1, Ordering::SeqCst);
                    if done.load(Ordering::SeqCst) {
                        after_done += 1;
                    }
                }
                (ai, admitted)
            }));
        }
    }
    // Each step waits for the clients to have made 30 more calls, so that calls run in
    // every phase of the migration.
    let wait_calls = |n: u64| {
        let target = calls.load(Ordering::SeqCst) + n;
        let start = Instant::now();
        while calls.load(Ordering::SeqCst) < target {
            assert!(start.elapsed() < Duration::from_secs(30), "clients stalled");
            std::thread::yield_now();
        }
    };
    let (src, dst) = (&cluster.nodes[from], &cluster.nodes[to]);
    let (src_id, dst_id) = (src.id(), dst.id());
    wait_calls(30);
    assert_eq!(
        dst.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id])
            .trim(),
        "OK"
    );
    assert_eq!(
        src.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id])
            .trim(),
        "OK"
    );
    let mut moved = 0;
    loop {
        wait_calls(30);
        let keys = src.cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "1"]);
        let Some(key) = keys.lines().next().filter(|k| !k.is_empty()) else {
            break;
        };
        let out = src.cli(&[
            "MIGRATE",
            "127.0.0.1",
            &dst.port.to_string(),
            key,
            "0",
            "5000",
        ]);
        assert!(matches!(out.trim(), "OK" | "NOKEY"), "MIGRATE {key}: {out}");
        moved += 1;
    }
    assert_eq!(moved, 4, "the four algorithms' keys, one by one");
    wait_calls(30);
    for node in [dst, src, &cluster.nodes[3 - from - to]] {
        assert_eq!(
            node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id])
                .trim(),
            "OK"
        );
    }
    done.store(true, Ordering::SeqCst);
    let mut admitted = [first / 4; 4];
    for t in tasks {
        let (ai, n) = rt.block_on(t).unwrap();
        admitted[ai] += n;
    }
    assert!(dst.serves(slot.parse().unwrap()));
    // The paths taken: ASK followed with ASKING, the script missing on the importing node.
    let stats = dst.cli(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_asking:"), "no ASKING reached {to}");
    let errors = dst.cli(&["INFO", "errorstats"]);
    assert!(
        errors.contains("errorstat_NOSCRIPT:"),
        "no NOSCRIPT on {to}: {errors}"
    );
    for (ai, n) in admitted.iter().enumerate() {
        assert_eq!(*n, 40, "{:?}: admitted {n} of 40", Algorithm::ALL[ai]);
    }
    assert!(calls.load(Ordering::SeqCst) >= 40 * 4);
}
