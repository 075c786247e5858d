//! The `metrics` counters (and, with the `tracing` feature, the events) of layers on real
//! loopback servers with a real client: every counter's value after a known sequence of
//! requests, read from a real recorder. Time from a `ManualClock`.
//!
//! One test: the recorder (and the `tracing` subscriber) are process-wide.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::Empty;
use hyper::client::conn::http1::SendRequest;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tollgate::{ManualClock, Quota};
use tollgate_tower::{HeaderKey, OnError, RateLimitLayer};
use tower::Layer;

#[path = "common/loopback.rs"]
mod loopback;

use loopback::{connect, local, send_with, serve, Down};

/// One request over `c` with an `x-client` header per entry of `clients`: its status.
async fn get(c: &mut SendRequest<Empty<Bytes>>, path: &str, clients: &[&str]) -> u16 {
    let headers: Vec<(&str, &str)> = clients.iter().map(|v| ("x-client", *v)).collect();
    send_with(c, Method::GET, path, &headers)
        .await
        .status
        .as_u16()
}

/// Every counter the recorder holds: (name, `policy` label, `outcome` label) → value.
fn counters(snapshotter: &metrics_util::debugging::Snapshotter) -> BTreeMap<String, u64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let DebugValue::Counter(n) = value else {
                return None;
            };
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            Some((format!("{}{{{}}}", key.name(), labels.join(",")), n))
        })
        .collect()
}

#[tokio::test]
async fn every_counter_counts_what_the_layer_did() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");
    #[cfg(feature = "tracing")]
    let lines = {
        let lines = tollgate_test_support::events::Recorder::default();
        tracing::subscriber::set_global_default(lines.clone()).unwrap();
        lines
    };

    let clock = ManualClock::new();
    let per_minute = |n| Quota::per_minute(n).unwrap();

    // Client keys from a header; 2 per minute by default, 1 per minute under /login.
    let limited = RateLimitLayer::new(
        HeaderKey::new(http::HeaderName::from_static("x-client")),
        local::<Box<[u8]>>(per_minute(2), &clock),
    )
    .try_route("/login", "login", local(per_minute(1), &clock))
    .unwrap();
    let stats = limited.stats();
    let mut c = connect(serve(limited.layer(loopback::hello())).await).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(get(&mut c, "/", &["a"]).await);
    }
    for _ in 0..2 {
        got.push(get(&mut c, "//LOGIN", &["a"]).await);
    }
    got.push(get(&mut c, "/login", &[]).await); // no key
    got.push(get(&mut c, "/", &["a", "b"]).await); // the key twice
    assert_eq!(got, [200, 200, 429, 200, 429, 500, 400]);
    assert_eq!(
        (stats.denied(), stats.missing_key(), stats.invalid_key()),
        (2, 1, 1)
    );

    // Shadow mode: 1 per minute, three requests pass, two would have been denied.
    let shadow = RateLimitLayer::new(
        HeaderKey::new(http::HeaderName::from_static("x-client")),
        local::<Box<[u8]>>(per_minute(1), &clock),
    )
    .try_policy_name("shadowed")
    .unwrap()
    .shadow(true);
    let mut c = connect(serve(shadow.layer(loopback::hello())).await).await;
    for _ in 0..3 {
        assert_eq!(get(&mut c, "/", &["b"]).await, 200);
    }

    // An unreachable store, failing open: two backend errors, both passed.
    let down = RateLimitLayer::new(
        HeaderKey::new(http::HeaderName::from_static("x-client")),
        Down::new(per_minute(1)),
    )
    .try_policy_name("down")
    .unwrap()
    .on_error(OnError::Allow);
    let mut c = connect(serve(down.layer(loopback::hello())).await).await;
    for _ in 0..2 {
        assert_eq!(get(&mut c, "/", &["c"]).await, 200);
    }

    // A minute later client a's default quota is back: one more admission.
    clock.advance(Duration::from_secs(60));
    let mut c = connect(serve(limited.layer(loopback::hello())).await).await;
    assert_eq!(get(&mut c, "/", &["a"]).await, 200);

    let mut want = BTreeMap::new();
    for (policy, allowed, denied, shadow_denied, missing, invalid, errors) in [
        ("default", 3, 1, 0, 0, 1, 0),
        ("login", 1, 1, 0, 1, 0, 0),
        ("shadowed", 1, 0, 2, 0, 0, 0),
        ("down", 0, 0, 0, 0, 0, 2),
    ] {
        for (outcome, n) in [
            ("allowed", allowed),
            ("denied", denied),
            ("shadow_denied", shadow_denied),
        ] {
            want.insert(
                format!("tollgate_tower_decisions_total{{policy={policy},outcome={outcome}}}"),
                n,
            );
        }
        for (name, n) in [
            ("missing_key", missing),
            ("invalid_key", invalid),
            ("backend_errors", errors),
        ] {
            want.insert(format!("tollgate_tower_{name}_total{{policy={policy}}}"), n);
        }
    }
    assert_eq!(counters(&snapshotter), want);

    #[cfg(feature = "tracing")]
    {
        let lines = lines.lines();
        let ours: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("tollgate_tower "))
            .collect();
        let count = |needle: &str| ours.iter().filter(|l| l.contains(needle)).count();
        assert_eq!(ours.len(), 8, "{ours:#?}");
        assert_eq!(count("message=rate limit denial"), 4, "{ours:#?}");
        assert_eq!(count("shadow=true"), 2, "{ours:#?}");
        assert_eq!(
            count("policy=\"login\" status=429 remaining=0 retry_after_ms=60000"),
            1,
            "{ours:#?}"
        );
        assert_eq!(count("reason=\"missing\""), 1, "{ours:#?}");
        assert_eq!(count("reason=\"ambiguous\""), 1, "{ours:#?}");
        assert_eq!(
            count("WARN message=rate limit backend error policy=\"down\" error=store unreachable"),
            2,
            "{ours:#?}"
        );
    }
}
