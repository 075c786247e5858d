//! What the `proxy` and `governor_proxy` examples share: flags, the upstream client, the
//! accept loop. Each example decides only how requests are limited.
#![allow(dead_code)] // each example uses its own subset

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::process::exit;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::uri::{PathAndQuery, Uri};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate_tower::IpNet;

pub const USAGE: &str =
    "usage: proxy --listen ADDR --upstream URL --limit N/s|N/m|N/h [--burst N] \
[--max-keys N] [--route PREFIX=N/s|N/m|N/h]... [--cors-preflight] [--key ip|xff|header:NAME] [--trusted-proxy CIDR]... [--headers always|deny|never] [--no-limit] \
[--metrics ADDR] [--quiet] [--workers N]";

/// Which client key the proxy limits by.
#[derive(Clone, Debug)]
pub enum KeyFlag {
    /// The connection's peer address.
    Ip,
    /// The client behind the `--trusted-proxy` networks, from `X-Forwarded-For`.
    Xff,
    /// A request header's value.
    Header(HeaderName),
}

/// The parsed command line.
#[derive(Clone, Debug)]
pub struct Args {
    pub listen: SocketAddr,
    pub upstream: Uri,
    pub limit: u64,
    pub period: Duration,
    pub burst: Option<u64>,
    pub max_keys: usize,
    pub routes: Vec<(String, u64, Duration)>,
    pub cors_preflight: bool,
    pub key: KeyFlag,
    pub trusted: Vec<IpNet>,
    pub headers: String,
    pub no_limit: bool,
    /// Where to serve the Prometheus `/metrics` page, apart from the proxied traffic.
    pub metrics: Option<SocketAddr>,
    pub quiet: bool,
    pub workers: usize,
}

/// Ends the program with `msg` and the usage line (exit status 2).
pub fn bad_flag(msg: impl std::fmt::Display) -> ! {
    eprintln!("error: {msg}\n{USAGE}");
    exit(2)
}

fn value(args: &mut impl Iterator<Item = String>, flag: &str) -> String {
    args.next()
        .unwrap_or_else(|| bad_flag(format!("{flag} needs a value")))
}

fn parse<T: FromStr>(s: &str, flag: &str) -> T
where
    T::Err: std::fmt::Display,
{
    s.parse()
        .unwrap_or_else(|e| bad_flag(format!("{flag} {s:?}: {e}")))
}

/// `N/s`, `N/m` or `N/h`.
fn parse_limit(s: &str) -> (u64, Duration) {
    let (n, unit) = s
        .split_once('/')
        .unwrap_or_else(|| bad_flag(format!("--limit {s:?}: expected N/s, N/m or N/h")));
    let period = match unit {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => bad_flag(format!("--limit {s:?}: the unit must be s, m or h")),
    };
    (parse(n, "--limit"), period)
}

impl Args {
    /// Parses `std::env::args()`, exiting with a clear message on any bad flag.
    pub fn from_env() -> Args {
        let mut args = std::env::args().skip(1);
        let (mut listen, mut upstream, mut limit) = (None, None, None);
        let mut parsed = Args {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream: Uri::from_static("http://127.0.0.1"),
            limit: 0,
            period: Duration::from_secs(1),
            burst: None,
            max_keys: 100_000,
            routes: Vec::new(),
            cors_preflight: false,
            key: KeyFlag::Ip,
            trusted: Vec::new(),
            headers: "always".into(),
            no_limit: false,
            metrics: None,
            quiet: false,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        while let Some(flag) = args.next() {
            match flag.as_str() {
                "--listen" => listen = Some(parse(&value(&mut args, &flag), &flag)),
                "--upstream" => upstream = Some(value(&mut args, &flag)),
                "--limit" => limit = Some(parse_limit(&value(&mut args, &flag))),
                "--burst" => parsed.burst = Some(parse(&value(&mut args, &flag), &flag)),
                "--max-keys" => {
                    parsed.max_keys = parse(&value(&mut args, &flag), &flag);
                    if parsed.max_keys == 0 {
                        bad_flag("--max-keys must be at least 1");
                    }
                }
                "--route" => {
                    let v = value(&mut args, &flag);
                    let (prefix, limit) = v.split_once('=').unwrap_or_else(|| {
                        bad_flag(format!("--route {v:?}: expected PREFIX=N/s|N/m|N/h"))
                    });
                    let (n, period) = parse_limit(limit);
                    parsed.routes.push((prefix.to_owned(), n, period));
                }
                "--cors-preflight" => parsed.cors_preflight = true,
                "--key" => {
                    let v = value(&mut args, &flag);
                    parsed.key = match v.as_str() {
                        "ip" => KeyFlag::Ip,
                        "xff" => KeyFlag::Xff,
                        other => match other.strip_prefix("header:") {
                            Some(name) => KeyFlag::Header(parse(name, "--key header:")),
                            None => {
                                bad_flag(format!("--key {v:?}: expected ip, xff or header:NAME"))
                            }
                        },
                    }
                }
                "--trusted-proxy" => parsed.trusted.push(parse(&value(&mut args, &flag), &flag)),
                "--headers" => {
                    parsed.headers = value(&mut args, &flag);
                    if !["always", "deny", "never"].contains(&parsed.headers.as_str()) {
                        bad_flag(format!(
                            "--headers {:?}: expected always, deny or never",
                            parsed.headers
                        ));
                    }
                }
                "--no-limit" => parsed.no_limit = true,
                "--metrics" => parsed.metrics = Some(parse(&value(&mut args, &flag), &flag)),
                "--quiet" => parsed.quiet = true,
                "--workers" => {
                    parsed.workers = parse(&value(&mut args, &flag), &flag);
                    if parsed.workers == 0 {
                        bad_flag("--workers must be at least 1");
                    }
                }
                "-h" | "--help" => {
                    println!("{USAGE}");
                    exit(0)
                }
                other => bad_flag(format!("unknown flag {other:?}")),
            }
        }
        parsed.listen = listen.unwrap_or_else(|| bad_flag("--listen is required"));
        let upstream = upstream.unwrap_or_else(|| bad_flag("--upstream is required"));
        parsed.upstream = parse(&upstream, "--upstream");
        if parsed.upstream.scheme_str() != Some("http") || parsed.upstream.authority().is_none() {
            bad_flag(format!(
                "--upstream {upstream:?}: expected http://HOST[:PORT]"
            ));
        }
        if parsed.no_limit {
            (parsed.limit, parsed.period) = limit.unwrap_or((1, Duration::from_secs(1)));
        } else {
            (parsed.limit, parsed.period) =
                limit.unwrap_or_else(|| bad_flag("--limit is required"));
        }
        if matches!(parsed.key, KeyFlag::Xff) && parsed.trusted.is_empty() {
            eprintln!(
                "warning: --key xff without --trusted-proxy keys every client by its peer address"
            );
        }
        parsed
    }
}

/// The headers a proxy does not pass on (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// A pooled HTTP/1 client for the upstream.
#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpConnector, Incoming>,
    base: Arc<Uri>,
}

impl Upstream {
    pub fn new(base: Uri) -> Upstream {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Upstream {
            client,
            base: Arc::new(base),
        }
    }

    /// Sends `req` from `peer` upstream; its answer, or `502` when the upstream fails.
    pub fn forward(
        &self,
        mut req: Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + use<> {
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut parts = (*self.base).clone().into_parts();
        parts.path_and_query = Some(path);
        *req.uri_mut() = Uri::from_parts(parts).expect("an http base and a path make a URI");
        let headers = req.headers_mut();
        for name in HOP_BY_HOP {
            headers.remove(name);
        }
        append_forwarded_for(headers, peer);
        let sent = self.client.request(req);
        async move {
            Ok(match sent.await {
                Ok(res) => {
                    let mut res = res.map(|b| ProxyBody(Some(b)));
                    for name in HOP_BY_HOP {
                        res.headers_mut().remove(name);
                    }
                    res
                }
                Err(_) => {
                    let mut res = Response::new(ProxyBody(None));
                    *res.status_mut() = http::StatusCode::BAD_GATEWAY;
                    res
                }
            })
        }
    }
}

/// The upstream's body, or none (a local answer: a denial, a `502`). `Default` is the empty
/// body, as the rate-limit layer needs for its own answers.
#[derive(Debug, Default)]
pub struct ProxyBody(Option<Incoming>);

impl http_body::Body for ProxyBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, hyper::Error>>> {
        match &mut self.get_mut().0 {
            Some(body) => std::pin::Pin::new(body).poll_frame(cx),
            None => std::task::Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.as_ref().is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.as_ref().map_or_else(
            || http_body::SizeHint::with_exact(0),
            http_body::Body::size_hint,
        )
    }
}

/// Appends `peer` to `X-Forwarded-For`, as a proxy in a chain does.
fn append_forwarded_for(headers: &mut http::HeaderMap, peer: SocketAddr) {
    let name = HeaderName::from_static("x-forwarded-for");
    let value = match headers.get(&name).and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.insert(name, v);
    }
}

/// Binds `listen` (exiting with a clear message if it cannot) and serves each connection
/// with `make(peer)`, HTTP/1 and HTTP/2, on a runtime of `workers` threads.
pub fn serve<S, B, F>(listen: SocketAddr, workers: usize, make: F) -> !
where
    F: Fn(SocketAddr) -> S + Send + 'static,
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("error: cannot start the runtime: {e}");
            exit(1)
        });
    runtime.block_on(async move {
        let listener = TcpListener::bind(listen).await.unwrap_or_else(|e| {
            eprintln!("error: cannot listen on {listen}: {e}");
            exit(1)
        });
        eprintln!(
            "listening on {}",
            listener.local_addr().map_or(listen, |a| a)
        );
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    eprintln!("accept failed: {e}");
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let svc = TowerToHyperService::new(make(peer));
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    })
}
