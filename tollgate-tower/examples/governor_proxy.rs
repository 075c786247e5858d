//! The `proxy` example with tower_governor 0.8 in place of tollgate-tower, for the load test's
//! side-by-side comparison. Same flags (`--key ip|xff|header:NAME`; `xff` is tower_governor's
//! `SmartIpKeyExtractor`, which trusts the leftmost `X-Forwarded-For` hop from any peer and
//! has no trusted-proxy setting; `--trusted-proxy` and `--headers` are ignored). Denials use
//! tower_governor's default response (a formatted body and its header map).
//!
//! ```text
//! cargo run --release -p tollgate-tower --example governor_proxy -- \
//!     --listen 127.0.0.1:8081 --upstream http://127.0.0.1:9000 --limit 100/s
//! ```

mod common;

use std::hash::Hash;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use common::{Args, KeyFlag, Upstream};
use http::{HeaderName, Request};
use hyper::body::Incoming;
use tower::{Layer, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::{KeyExtractor, PeerIpKeyExtractor, SmartIpKeyExtractor};
use tower_governor::{GovernorError, GovernorLayer};

/// A request header's value as the key (tower_governor has no such extractor built in).
#[derive(Clone)]
struct HeaderValueKey(HeaderName);

impl KeyExtractor for HeaderValueKey {
    type Key = Box<[u8]>;
    fn extract<T>(&self, req: &Request<T>) -> Result<Box<[u8]>, GovernorError> {
        req.headers()
            .get(&self.0)
            .map(|v| v.as_bytes().into())
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

fn run<K>(args: Args, key: K)
where
    K: KeyExtractor + Send + Sync + 'static,
    K::Key: Hash + Eq + Clone + Send + Sync,
{
    let upstream = Upstream::new(args.upstream.clone());
    let forward = tower::service_fn(move |req: Request<Incoming>| {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        let sent = upstream.forward(req, peer.unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))));
        async move { sent.await.map(|res| res.map(axum::body::Body::new)) }
    });
    // The same token bucket as `proxy`: one token every period/limit, bursts of `burst`.
    let interval = args.period / u32::try_from(args.limit).unwrap_or(u32::MAX);
    let burst = u32::try_from(args.burst.unwrap_or(args.limit)).unwrap_or(u32::MAX);
    let config = GovernorConfigBuilder::default()
        .period(interval.max(Duration::from_nanos(1)))
        .burst_size(burst)
        .key_extractor(key)
        .finish()
        .unwrap_or_else(|| {
            common::bad_flag("--limit/--burst: tower_governor refuses a zero period or burst")
        });
    let limited = GovernorLayer::new(Arc::new(config)).layer(forward);
    eprintln!("tower_governor: one token every {interval:?}, burst {burst}");
    common::serve(args.listen, args.workers, move |peer| {
        let limited = limited.clone();
        tower::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            limited.clone().oneshot(req)
        })
    });
}

fn main() {
    let args = Args::from_env();
    if args.metrics.is_some() {
        common::bad_flag(
            "--metrics: the tollgate proxy (examples/proxy.rs) serves metrics, this one does not",
        );
    }
    match args.key.clone() {
        KeyFlag::Ip => run(args, PeerIpKeyExtractor),
        KeyFlag::Xff => run(args, SmartIpKeyExtractor),
        KeyFlag::Header(name) => run(args, HeaderValueKey(name)),
    }
}
