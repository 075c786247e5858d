//! The same limiters on a real Redis Cluster of three primaries (started by the harness with
//! `redis-server --cluster-enabled yes` and `redis-cli --cluster create`, torn down after).

mod common;

use std::time::Duration;

use common::{admitted, all, limiter_on, RedisCluster};
use tollgate::{Algorithm, Quota};
use tollgate_redis::{RedisLimiter, Target};
use tollgate_test_support::stream_quotas;

/// Conformance, scripts reloaded on every node, keys spread over the slots, and eight
/// clients on one hot key: one cluster for all of it (starting one takes a few seconds).
#[test]
fn the_limiters_on_a_three_primary_cluster() {
    let cluster = RedisCluster::start();
    let target = Target::cluster(cluster.urls());

    // Identical decisions to the in-process limiters (the test clock), every algorithm.
    let quotas = &stream_quotas()[..3];
    common::random_streams(&target, quotas, 200);
    for (s, _) in all(&target, Quota::per_second(5).unwrap()) {
        assert_eq!(admitted(&s, 10), 5, "{}", s.name);
    }

    let runtime = common::runtime(2);
    for node in &cluster.nodes {
        node.cli(&["FLUSHALL"]);
    }
    runtime.block_on(async {
        // Many keys: spread over all three primaries; the log's two keys share each slot
        // (a cross-slot script would be refused by the cluster).
        for algorithm in Algorithm::ALL {
            let l = limiter_on(target.clone(), algorithm, Quota::per_hour(2).unwrap()).await;
            let keys: Vec<(String, u64)> = (0..60).map(|i| (format!("user:{i}"), 1)).collect();
            for a in l.try_acquire_many(keys.clone()).await {
                assert!(a.unwrap().is_allowed(), "{algorithm:?}");
            }
            for a in l
                .try_acquire_many(keys.iter().map(|(k, _)| (k.as_str(), 2)))
                .await
            {
                assert!(!a.unwrap().is_allowed(), "{algorithm:?}: 1 + 2 > 2");
            }
            // SCRIPT FLUSH on every node: reloaded per node on the next call.
            for node in &cluster.nodes {
                assert_eq!(node.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
            }
            for a in l.try_acquire_many(keys).await {
                let d = a.expect("reloaded after SCRIPT FLUSH");
                assert!(d.is_allowed() && d.remaining() == 0, "{algorithm:?}");
            }
        }
        let per_node = cluster.keys_per_node();
        assert!(
            per_node.iter().all(|&n| n > 0),
            "keys on every primary: {per_node:?}"
        );
        // 60 keys × 4 algorithms, one key each.
        assert_eq!(per_node.iter().sum::<usize>(), 60 * 4);

        // Keys with braces and binary bytes: each key its own limiter, in its own tag (a
        // `}` in a key is escaped, so it cannot end the tag early).
        let odd: [&[u8]; 6] = [b"", b"{}", b"}", b"a}b{c", b"{x}", &[0, 255, b'}', 10]];
        for algorithm in Algorithm::ALL {
            let l = RedisLimiter::builder(target.clone(), algorithm, Quota::per_hour(1).unwrap())
                .timeout(Duration::from_secs(5))
                .key_prefix("odd")
                .build()
                .await
                .unwrap();
            for key in odd {
                assert!(
                    l.try_acquire(key).await.unwrap().is_allowed(),
                    "{algorithm:?} {key:?}"
                );
            }
            for key in odd {
                assert!(
                    !l.try_acquire(key).await.unwrap().is_allowed(),
                    "{algorithm:?} {key:?}"
                );
            }
        }

        // Eight clients, one hot key, one frozen instant: exactly one limit admitted.
        for algorithm in Algorithm::ALL {
            let quota = Quota::per_minute(64).unwrap();
            let total = common::eight_clients_admitted(&target, algorithm, quota, 20, 1).await;
            assert_eq!(total, 64, "{algorithm:?}");
        }
    });
}
