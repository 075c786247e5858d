//! The fixed-memory keyed limiters behind the layer on a real loopback server (a
//! `SketchLimiter`, a `HybridSketchLimiter`, a `KeyedTable`): each admits exactly its quota
//! per client, denies with 429 and the RateLimit headers, and keeps every client's count
//! apart. Time from a `ManualClock`.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tollgate::{
    Algorithm, HybridSketchLimiter, KeyedTable, ManualClock, Quota, SketchLimiter, SketchSize,
};
use tollgate_tower::{KeyedBackend, RateLimitLayer, TrustedProxy};

#[path = "common/loopback.rs"]
mod loopback;

use loopback::{connect, get, serve_at, status, V4};

/// The forwarded client as the key, from the loopback peer only.
fn forwarded() -> TrustedProxy {
    TrustedProxy::new(["127.0.0.0/8".parse().unwrap()])
}

/// A hasher of fixed seed, so that where the two clients land does not change between runs.
type Seeded = BuildHasherDefault<DefaultHasher>;

/// Three per 2 s, fixed windows, in 4096 columns, where the two clients do not share their
/// lanes: the sketch answers as the exact map would.
fn sketch(clock: &ManualClock) -> SketchLimiter<IpAddr, ManualClock, Seeded> {
    let quota = Quota::try_new(3, Duration::from_secs(2)).unwrap();
    SketchLimiter::with_clock(quota, SketchSize::columns(4096).unwrap(), clock.clone())
        .with_hasher(Seeded::default())
}

const ALICE: &str = "192.0.2.1";
const BOB: &str = "198.51.100.7";

#[tokio::test]
async fn a_sketch_admits_its_quota_per_client_and_denies_with_headers() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(forwarded(), sketch(&clock));
    let mut c = connect(serve_at(V4, layer, true).await.unwrap()).await;

    for left in [2, 1, 0] {
        let ok = get(&mut c, Some(ALICE)).await;
        assert_eq!(ok.status, StatusCode::OK);
        assert_eq!(ok.header("ratelimit-policy"), Some("\"default\";q=3;w=2"));
        let expected = format!("\"default\";r={left};t=2");
        assert_eq!(ok.header("ratelimit"), Some(expected.as_str()));
        assert_eq!(ok.header("retry-after"), None);
    }
    let denied = get(&mut c, Some(ALICE)).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("2")); // the window's end
    assert_eq!(denied.header("ratelimit"), Some("\"default\";r=0;t=2"));
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some("\"default\";q=3;w=2")
    );

    // Bob's count is his own: his full quota, while Alice is still denied.
    for left in [2, 1, 0] {
        let ok = get(&mut c, Some(BOB)).await;
        assert_eq!(ok.status, StatusCode::OK, "bob, {left} left");
        let expected = format!("\"default\";r={left};t=2");
        assert_eq!(ok.header("ratelimit"), Some(expected.as_str()));
    }
    assert_eq!(
        status(&mut c, Some(BOB)).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(&mut c, Some(ALICE)).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Half a window on, Alice waits for the rest of it.
    clock.advance(Duration::from_millis(1_500));
    let denied = get(&mut c, Some(ALICE)).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("1")); // 0.5 s, rounded up

    // The next window: both clients have their quota again, exactly.
    clock.advance(Duration::from_millis(500));
    for client in [ALICE, BOB] {
        let passed = {
            let mut n = 0;
            for _ in 0..5 {
                if status(&mut c, Some(client)).await == StatusCode::OK {
                    n += 1;
                }
            }
            n
        };
        assert_eq!(passed, 3, "{client}");
    }
}

#[tokio::test]
async fn a_shared_sketch_counts_the_layer_and_its_other_users_as_one() {
    let clock = ManualClock::new();
    let shared = Arc::new(sketch(&clock));
    let layer = RateLimitLayer::new(forwarded(), Arc::clone(&shared));
    let mut c = connect(serve_at(V4, layer, true).await.unwrap()).await;
    // Two units spent outside the layer: one request left for Alice.
    assert!(shared
        .try_acquire_n(&ALICE.parse().unwrap(), 2)
        .is_allowed());
    let ok = get(&mut c, Some(ALICE)).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.header("ratelimit"), Some("\"default\";r=0;t=2"));
    assert_eq!(
        status(&mut c, Some(ALICE)).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(&mut c, Some(BOB)).await, StatusCode::OK);
}

#[tokio::test]
async fn a_keyed_backend_takes_a_metered_sketch() {
    let clock = ManualClock::new();
    let backend = KeyedBackend::<IpAddr, _>::new(tollgate::Metered::new(sketch(&clock)));
    let layer = RateLimitLayer::new(forwarded(), backend);
    let mut c = connect(serve_at(V4, layer, true).await.unwrap()).await;
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(status(&mut c, Some(ALICE)).await.as_u16());
        }
        v
    };
    assert_eq!(statuses, [200, 200, 200, 429]);
}

/// The hybrid sketch behind the layer: a client promoted to an exact entry keeps the count
/// the sketch had for it, so it is still denied at its quota; the other client is untouched.
#[tokio::test]
async fn a_hybrid_sketch_admits_its_quota_per_client_across_a_promotion() {
    let clock = ManualClock::new();
    let quota = Quota::try_new(3, Duration::from_secs(2)).unwrap();
    let hybrid = HybridSketchLimiter::with_clock(
        quota,
        SketchSize::columns(4096).unwrap(),
        64,
        clock.clone(),
    )
    .with_hasher(Seeded::default())
    .promote_at(2);
    let layer = RateLimitLayer::new(forwarded(), Arc::new(hybrid));
    let mut c = connect(serve_at(V4, layer, true).await.unwrap()).await;
    for client in [ALICE, BOB] {
        for left in [2, 1, 0] {
            let ok = get(&mut c, Some(client)).await;
            assert_eq!(ok.status, StatusCode::OK, "{client}");
            let expected = format!("\"default\";r={left};t=2");
            assert_eq!(ok.header("ratelimit"), Some(expected.as_str()), "{client}");
        }
        let denied = get(&mut c, Some(client)).await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS, "{client}");
    }
    clock.advance(Duration::from_secs(2));
    assert_eq!(status(&mut c, Some(ALICE)).await, StatusCode::OK);
}

/// A `KeyedTable` behind the layer: a token bucket per client in one fixed table, with the
/// bucket's headers (the time to full in `t`, the time to the next token in `Retry-After`).
#[tokio::test]
async fn a_keyed_table_admits_its_quota_per_client_and_denies_with_headers() {
    let clock = ManualClock::new();
    let quota = Quota::try_new(3, Duration::from_secs(3)).unwrap();
    let keys = std::num::NonZeroUsize::new(1024).unwrap();
    let table =
        KeyedTable::<IpAddr, _>::try_with_clock(Algorithm::TokenBucket, quota, keys, clock.clone())
            .unwrap()
            .with_hasher(Seeded::default());
    let layer = RateLimitLayer::new(forwarded(), Arc::new(table));
    let mut c = connect(serve_at(V4, layer, true).await.unwrap()).await;
    for client in [ALICE, BOB] {
        for left in [2, 1, 0] {
            let ok = get(&mut c, Some(client)).await;
            assert_eq!(ok.status, StatusCode::OK, "{client}");
            assert_eq!(ok.header("ratelimit-policy"), Some("\"default\";q=3;w=3"));
            let expected = format!("\"default\";r={left};t={}", 3 - left);
            assert_eq!(ok.header("ratelimit"), Some(expected.as_str()), "{client}");
        }
        let denied = get(&mut c, Some(client)).await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS, "{client}");
        assert_eq!(denied.header("retry-after"), Some("1"), "{client}");
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(status(&mut c, Some(ALICE)).await, StatusCode::OK);
    assert_eq!(
        status(&mut c, Some(ALICE)).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}
