//! A reverse proxy with per-client rate limits in front of any HTTP upstream.
//!
//! ```text
//! cargo run --release -p tollgate-tower --example proxy -- \
//!     --listen 127.0.0.1:8080 --upstream http://127.0.0.1:9000 --limit 100/s \
//!     [--burst N] [--max-keys N] [--route PREFIX=N/s]... [--cors-preflight] \
//!     [--key ip|xff|header:NAME] [--trusted-proxy CIDR]... \
//!     [--headers always|deny|never] [--metrics ADDR] [--no-limit] [--quiet] [--workers N]
//! ```
//!
//! - `--limit N/s|N/m|N/h`: each client's quota (a GCRA token bucket); `--burst N` its burst
//!   (default N).
//! - `--max-keys N` (default 100,000): the most client keys held per policy; when the map is
//!   full a new client sweeps the idle ones out (keys whose bucket is full again), and is
//!   denied if none is idle. Memory stays bounded whatever the number of clients.
//! - `--route PREFIX=N/s`: requests at or below `PREFIX` (matched on the normalized path:
//!   `//login`, `/%6Cogin` and `/LOGIN` are `/login`) get their own quota per client.
//! - `--cors-preflight`: CORS preflights (`OPTIONS` with `Origin` and
//!   `Access-Control-Request-Method`) pass uncounted. Off by default: every method counts.
//! - `--key ip` (default): the connection's peer address, IPv6 grouped per /64. `--key xff`:
//!   the client behind the `--trusted-proxy` networks (the rightmost `X-Forwarded-For` hop
//!   outside them; a peer outside them is keyed by its own address). `--key header:NAME`: the
//!   value of a header (an API key); a request without it gets `500`.
//! - `--metrics ADDR` (build with `--features metrics`): the layer's counters in the Prometheus
//!   text format at `http://ADDR/metrics`, through `metrics-exporter-prometheus`, on a listener
//!   of its own so that the proxied clients cannot read it (bind it to a private or loopback
//!   address). Without the flag nothing is recorded.
//! - One line on stderr per denial (`--quiet` turns it off); `--no-limit` proxies without
//!   the layer, for comparison.
//! - Exits with status 2 and the usage line on a bad flag, status 1 when the listen address
//!   cannot be bound.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::Arc;

use common::{Args, KeyFlag, Upstream};
use http::{Request, StatusCode};
use hyper::body::Incoming;
use tollgate::{Algorithm, KeyedLimiter, Quota, WhenFull};
use tollgate_tower::{
    HeaderKey, HeaderMode, KeyError, KeyExtractor, LocalBackend, PeerIp, RateLimitLayer,
    TrustedProxy,
};
use tower::{Layer, Service, ServiceExt};

/// The proxy's key: an address or a header value, whichever `--key` picked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Ip(IpAddr),
    Header(Box<[u8]>),
}

#[derive(Clone)]
enum ByFlag {
    Ip(PeerIp),
    Xff(TrustedProxy),
    Header(HeaderKey),
}

impl<B> KeyExtractor<B> for ByFlag {
    type Key = Key;
    fn extract(&self, req: &Request<B>) -> Option<Key> {
        match self {
            ByFlag::Ip(x) => x.extract(req).map(Key::Ip),
            ByFlag::Xff(x) => x.extract(req).map(Key::Ip),
            ByFlag::Header(x) => x.extract(req).map(Key::Header),
        }
    }
    fn extract_key(&self, req: &Request<B>) -> Result<Key, KeyError> {
        match self {
            ByFlag::Ip(x) => x.extract_key(req).map(Key::Ip),
            ByFlag::Xff(x) => x.extract_key(req).map(Key::Ip),
            ByFlag::Header(x) => x.extract_key(req).map(Key::Header),
        }
    }
}

fn main() {
    let args = Args::from_env();
    if let Some(addr) = args.metrics {
        serve_metrics(addr);
    }
    let upstream = Upstream::new(args.upstream.clone());
    let forward = tower::service_fn({
        let upstream = upstream.clone();
        move |req: Request<Incoming>| {
            let peer = req
                .extensions()
                .get::<tollgate_tower::PeerAddr>()
                .map(|p| p.0);
            upstream.forward(req, peer.unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))))
        }
    });
    if args.no_limit {
        eprintln!("limiting off");
        common::serve(args.listen, args.workers, move |peer| {
            let forward = forward.clone();
            tower::service_fn(move |req: Request<Incoming>| {
                forward.clone().oneshot(with_peer(req, peer))
            })
        });
    }

    let quota = Quota::try_new(args.limit, args.period)
        .and_then(|q| match args.burst {
            Some(b) => q.with_burst(b),
            None => Ok(q),
        })
        .unwrap_or_else(|e| common::bad_flag(format!("--limit/--burst: {e}")));
    let max_keys = NonZeroUsize::new(args.max_keys).expect("checked by the flag parser");
    let bounded = |quota: Quota| {
        KeyedLimiter::<Key>::builder(Algorithm::TokenBucket, quota)
            .max_keys(max_keys, WhenFull::Deny)
            .build()
            .map(LocalBackend::new)
            .unwrap_or_else(|e| common::bad_flag(format!("--limit/--burst/--route: {e}")))
    };
    let backend = bounded(quota);
    let extractor = match &args.key {
        KeyFlag::Ip => ByFlag::Ip(PeerIp::default()),
        KeyFlag::Xff => ByFlag::Xff(TrustedProxy::new(args.trusted.iter().copied())),
        KeyFlag::Header(name) => ByFlag::Header(HeaderKey::new(name.clone())),
    };
    let mode = match args.headers.as_str() {
        "deny" => HeaderMode::DenyOnly,
        "never" => HeaderMode::Never,
        _ => HeaderMode::Always,
    };
    let mut layer = RateLimitLayer::new(extractor, backend)
        .headers(mode)
        .exempt_cors_preflight(args.cors_preflight);
    for (prefix, n, period) in &args.routes {
        let quota = Quota::try_new(*n, *period)
            .unwrap_or_else(|e| common::bad_flag(format!("--route {prefix}: {e}")));
        layer = layer
            .try_route(prefix, prefix, bounded(quota))
            .unwrap_or_else(|e| common::bad_flag(format!("--route {prefix}: {e}")));
    }
    let limited = layer.layer(forward);
    eprintln!(
        "limiting each client to {} per {:?} (burst {}), at most {} clients held",
        quota.limit(),
        quota.period(),
        quota.burst(),
        args.max_keys
    );
    let quiet = args.quiet;
    let log = Arc::new(std::io::stderr());
    common::serve(args.listen, args.workers, move |peer| {
        let limited = limited.clone();
        let log = Arc::clone(&log);
        tower::service_fn(move |req: Request<Incoming>| {
            let req = with_peer(req, peer);
            // Method and URI clones share their bytes: no allocation per request.
            let line = (!quiet).then(|| (req.method().clone(), req.uri().clone()));
            let mut svc = limited.clone();
            let log = Arc::clone(&log);
            async move {
                let res = svc.ready().await?.call(req).await?;
                if let Some((method, uri)) = line
                    && res.status() == StatusCode::TOO_MANY_REQUESTS
                {
                    use std::io::Write;
                    let retry = res
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-");
                    let _ = writeln!(
                        log.lock(),
                        "denied {peer} {method} {} retry-after={retry}",
                        uri.path()
                    );
                }
                Ok(res)
            }
        })
    });
}

/// Installs the Prometheus recorder, its page served on `addr` (any path; scrape `/metrics`).
#[cfg(feature = "metrics")]
fn serve_metrics(addr: SocketAddr) {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .unwrap_or_else(|e| {
            eprintln!("error: cannot serve metrics on {addr}: {e}");
            std::process::exit(1)
        });
    eprintln!("metrics on http://{addr}/metrics");
}

#[cfg(not(feature = "metrics"))]
fn serve_metrics(_: SocketAddr) {
    common::bad_flag("--metrics needs the example built with `--features metrics`")
}

fn with_peer(mut req: Request<Incoming>, peer: SocketAddr) -> Request<Incoming> {
    req.extensions_mut().insert(tollgate_tower::PeerAddr(peer));
    req
}
