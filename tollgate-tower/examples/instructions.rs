//! Instructions per allowed request through each layer, counted by callgrind: the exact
//! counterpart of `benches/layer.rs`'s allowed groups, whose wall times move by a quarter
//! between runs on a shared machine.
//!
//! ```text
//! cargo run --profile bench -p tollgate-tower --example instructions
//! ```
//!
//! Run without arguments, the example runs itself under `valgrind --tool=callgrind` (valgrind
//! must be on `PATH`) once per variant and key count, and prints the instructions per request
//! and what each layer adds to `none`. Each run builds its service as `benches/layer.rs` does:
//! the same inner service, the same `X-Forwarded-For` header and peer extension on every
//! request, the forwarded client as the key (tollgate-tower: `TrustedProxy` trusting the
//! peer; tower_governor: `SmartIpKeyExtractor`), a quota of 10^9 per second, every key used
//! once before counting. Each request is built outside the counted region; counted are the
//! service call, polling its future to the response, and dropping the response and (inside
//! the inner service) the request. `none` is the inner service alone.
//!
//! The profile of one run, for `callgrind_annotate` (arguments: variant, keys, requests):
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*instructions::counted*' \
//!     target/release/examples/instructions tollgate_deny_only_headers 100000 100000
//! ```
//!
//! Built with `--features metrics`, each run installs `metrics-exporter-prometheus`'s recorder
//! first, so tollgate-tower's counts include its counter increments.
//!
//! The 1-key counts repeat exactly from run to run; the 100,000-key counts move by a few
//! instructions per request, because both maps seed their hashers per process. Only
//! instructions are counted, not the cache misses of a large map (add `--cache-sim=yes` for
//! those), nor the cost of an atomic instruction over a plain one.

// The requests and the inner service of `benches/layer.rs`, shared with it.
#[path = "../benches/common/mod.rs"]
mod requests;

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;

use axum::body::Body;
use http::{Request, Response};
use tollgate::{Algorithm, Quota};
use tollgate_tower::{HeaderMode, LocalBackend, RateLimitLayer, TrustedProxy};
use tower::{Layer, Service};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::SmartIpKeyExtractor;
use tower_governor::GovernorLayer;

use requests::{hello, ready, Clients};

const VARIANTS: [&str; 4] = [
    "none",
    "tollgate",
    "tollgate_deny_only_headers",
    "tower_governor",
];

/// The counted region (callgrind's `--toggle-collect`): one request through `svc`, its
/// response dropped. Whether it was admitted.
#[inline(never)]
fn counted<S>(svc: &mut S, req: Request<()>) -> bool
where
    S: Service<Request<()>, Response = Response<Body>>,
    S::Error: std::fmt::Debug,
{
    let res = ready(svc.call(req)).unwrap();
    black_box(res.status()).is_success()
}

fn drive<S>(mut svc: S, keys: u32, n: usize)
where
    S: Service<Request<()>, Response = Response<Body>>,
    S::Error: std::fmt::Debug,
{
    let mut clients = Clients::new(keys);
    // Every key once, uncounted, so the map holds all keys before counting starts.
    for _ in 0..keys {
        assert!(ready(svc.call(clients.request()))
            .unwrap()
            .status()
            .is_success());
    }
    for _ in 0..n {
        // Built one at a time, as in the bench, so the allocator sees the same pattern.
        let req = clients.request();
        assert!(counted(&mut svc, req), "every request must be admitted");
    }
}

fn governor() -> GovernorLayer<
    SmartIpKeyExtractor,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
    Body,
> {
    let config = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .key_extractor(SmartIpKeyExtractor)
        .finish()
        .unwrap();
    GovernorLayer::new(Arc::new(config))
}

fn child(variant: &str, keys: u32, n: usize) {
    // With `--features metrics`, the layer counts into a real exporter's recorder.
    #[cfg(feature = "metrics")]
    let _handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder");
    let layer = || {
        let backend = LocalBackend::try_new(
            Algorithm::TokenBucket,
            Quota::per_second(1_000_000_000).unwrap(),
        )
        .unwrap();
        RateLimitLayer::new(
            TrustedProxy::new(["127.0.0.1/32".parse().unwrap()]),
            backend,
        )
    };
    match variant {
        "none" => drive(hello(), keys, n),
        "tollgate" => drive(layer().layer(hello()), keys, n),
        "tollgate_deny_only_headers" => drive(
            layer().headers(HeaderMode::DenyOnly).layer(hello()),
            keys,
            n,
        ),
        "tower_governor" => drive(governor().layer(hello()), keys, n),
        other => panic!("unknown variant {other:?}; one of {VARIANTS:?}"),
    }
}

/// Instructions callgrind counted in `counted` for one run of `variant`.
fn count(variant: &str, keys: u32, n: usize) -> u64 {
    let exe = std::env::current_exe().expect("the example's own path");
    let out = std::env::temp_dir().join(format!(
        "tollgate-tower-instructions.{}.{variant}.{keys}.out",
        std::process::id()
    ));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--toggle-collect=*instructions::counted*")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--quiet")
        .arg(&exe)
        .args([variant, &keys.to_string(), &n.to_string()])
        .status()
        .expect("valgrind on PATH");
    assert!(status.success(), "{variant} under callgrind: {status}");
    let text = std::fs::read_to_string(&out).expect("callgrind's output file");
    let _ = std::fs::remove_file(&out);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals: ")
                .or_else(|| l.strip_prefix("summary: "))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("a totals line in callgrind's output")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [variant, keys, n] = &args[..] {
        child(variant, keys.parse().unwrap(), n.parse().unwrap());
        return;
    }
    assert!(
        args.is_empty(),
        "usage: instructions [VARIANT KEYS REQUESTS]"
    );
    println!("instructions per allowed request (callgrind), requests built outside the count");
    println!(
        "{:<28} {:>12} {:>12} {:>14} {:>14}",
        "variant", "1 key", "+ over none", "100000 keys", "+ over none"
    );
    let runs = [(1, 20_000), (100_000, 100_000)];
    let counts: Vec<Vec<f64>> = VARIANTS
        .iter()
        .map(|v| {
            runs.iter()
                .map(|&(keys, n)| count(v, keys, n) as f64 / n as f64)
                .collect()
        })
        .collect();
    for (v, c) in VARIANTS.iter().zip(&counts) {
        println!(
            "{v:<28} {:>12.1} {:>12.1} {:>14.1} {:>14.1}",
            c[0],
            c[0] - counts[0][0],
            c[1],
            c[1] - counts[0][1]
        );
    }
}
