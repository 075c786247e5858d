//! The layer's own cost per request, in process (no sockets): a service call through
//! tollgate-tower's `RateLimitLayer`, through tower_governor 0.8's `GovernorLayer`, and
//! through no layer, around the same ready inner service. Each request carries the same
//! `X-Forwarded-For` header and peer extension in every variant; the key is the forwarded
//! client (tollgate: `TrustedProxy` trusting the peer; tower_governor: `SmartIpKeyExtractor`).
//!
//! `tollgate` sends the headers on every response (the layer's default);
//! `tollgate_deny_only_headers` only on denials, as tower_governor does by default.
//!
//! Groups: `allowed/1`, `allowed/100000`, `denied/1`, `denied/100000` (scenario / distinct
//! client keys, cycled in order; every key is used once before measuring). The difference
//! between a variant and `none` is the layer's cost.
//!
//! ```text
//! cargo bench -p tollgate-tower --bench layer -- --warm-up-time 1 --measurement-time 3
//! ```

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use http::{Request, Response};
use tollgate::{Algorithm, Quota};
use tollgate_tower::{HeaderMode, LocalBackend, RateLimitLayer, TrustedProxy};
use tower::{Layer, Service};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::SmartIpKeyExtractor;
use tower_governor::GovernorLayer;

use common::{hello, ready, Clients};

fn scenario<S>(c: &mut Criterion, group: &str, keys: u32, name: &str, mut svc: S)
where
    S: Service<Request<()>, Response = Response<Body>>,
    S::Error: std::fmt::Debug,
{
    let mut clients = Clients::new(keys);
    let mut warm = false;
    let mut g = c.benchmark_group(format!("{group}/{keys}"));
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::from_parameter(name), |b| {
        if !warm {
            // Every key once, so denials find their key used up and the map holds all keys.
            for _ in 0..keys {
                let _ = ready(svc.call(clients.request())).unwrap();
            }
            warm = true;
        }
        b.iter(|| black_box(ready(svc.call(clients.request())).unwrap().status()))
    });
    g.finish();
}

fn quota(denied: bool) -> Quota {
    if denied {
        Quota::per_hour(1).unwrap()
    } else {
        Quota::per_second(1_000_000_000).unwrap()
    }
}

fn governor(
    denied: bool,
) -> GovernorLayer<
    SmartIpKeyExtractor,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
    Body,
> {
    let mut b = GovernorConfigBuilder::default();
    if denied {
        b.period(Duration::from_secs(3600)).burst_size(1);
    } else {
        b.per_nanosecond(1).burst_size(u32::MAX);
    }
    GovernorLayer::new(Arc::new(
        b.key_extractor(SmartIpKeyExtractor).finish().unwrap(),
    ))
}

fn benches(c: &mut Criterion) {
    let trusted = || TrustedProxy::new(["127.0.0.1/32".parse().unwrap()]);
    for keys in [1, 100_000] {
        scenario(c, "allowed", keys, "none", hello());
        for (group, denied) in [("allowed", false), ("denied", true)] {
            let backend = LocalBackend::try_new(Algorithm::TokenBucket, quota(denied)).unwrap();
            let layer = RateLimitLayer::new(trusted(), backend);
            scenario(c, group, keys, "tollgate", layer.clone().layer(hello()));
            // As tower_governor does by default: headers on denials only.
            let deny_only = layer.headers(HeaderMode::DenyOnly);
            scenario(
                c,
                group,
                keys,
                "tollgate_deny_only_headers",
                deny_only.layer(hello()),
            );
            scenario(
                c,
                group,
                keys,
                "tower_governor",
                governor(denied).layer(hello()),
            );
        }
    }
}

criterion_group!(layer, benches);
criterion_main!(layer);
