//! A hello service behind a layer on a real loopback server (HTTP/1, keep-alive), a client
//! connection to it, and a backend whose store is always down: shared by the tests that
//! include this file (`#[path = "common/loopback.rs"] mod loopback;`).
#![allow(dead_code)]

use std::convert::Infallible;
use std::marker::PhantomData;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tollgate::{Algorithm, Decision, ManualClock, Quota};
use tollgate_tower::{Backend, LocalBackend, PeerAddr};
use tower::{Layer, Service, ServiceBuilder};

pub type Body = Full<Bytes>;

/// The inner service a layer wraps in these tests.
pub type Inner = tower::util::BoxCloneSyncService<Request<Incoming>, Response<Body>, Infallible>;

pub const V4: &str = "127.0.0.1:0";

/// What the server runs: a service of a request (hyper's body) to a response (a full body).
pub trait Served:
    Service<Request<Incoming>, Response = Response<Body>, Error = Infallible, Future: Send>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> Served for S where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible, Future: Send>
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// Answers every request `200 hello`.
pub fn hello() -> Inner {
    Inner::new(tower::service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
    }))
}

/// Serves `layer` around [`hello`] on `bind`, HTTP/1 with keep-alive; `None` when the
/// address cannot be bound. With `peer`, each request carries its connection's address as a
/// `PeerAddr` extension.
pub async fn serve_at<L>(bind: &str, layer: L, peer: bool) -> Option<SocketAddr>
where
    L: Layer<Inner>,
    L::Service: Served,
{
    serve_service(bind, layer.layer(hello()), peer).await
}

/// Serves `svc` on an IPv4 loopback port, each request carrying its connection's `PeerAddr`.
pub async fn serve(svc: impl Served) -> SocketAddr {
    serve_service(V4, svc, true)
        .await
        .expect("a free loopback port")
}

/// Serves `svc` on `bind` as [`serve_at`] does.
pub async fn serve_service(bind: &str, svc: impl Served, peer: bool) -> Option<SocketAddr> {
    let listener = TcpListener::bind(bind).await.ok()?;
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, from) = listener.accept().await.unwrap();
            let svc = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    if peer {
                        req.extensions_mut().insert(PeerAddr(from));
                    }
                    req
                })
                .service(svc.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(svc))
                    .await;
            });
        }
    });
    Some(addr)
}

/// One client connection: every request of a test goes over it (keep-alive).
pub async fn connect(addr: SocketAddr) -> SendRequest<Empty<Bytes>> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

pub struct Got {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }
}

pub async fn get(client: &mut SendRequest<Empty<Bytes>>, xff: Option<&str>) -> Got {
    send(client, Method::GET, "/", xff).await
}

/// The status of [`get`]'s answer.
pub async fn status(client: &mut SendRequest<Empty<Bytes>>, xff: Option<&str>) -> StatusCode {
    get(client, xff).await.status
}

/// The status of the answer to a `method` request of `path` (no `X-Forwarded-For`).
pub async fn status_of(
    client: &mut SendRequest<Empty<Bytes>>,
    method: Method,
    path: &str,
) -> StatusCode {
    send(client, method, path, None).await.status
}

/// The status of the answer to a GET of `/` with these headers.
pub async fn status_with(
    client: &mut SendRequest<Empty<Bytes>>,
    headers: &[(&str, &str)],
) -> StatusCode {
    send_with(client, Method::GET, "/", headers).await.status
}

/// One request, with `X-Forwarded-For: xff` when given.
pub async fn send(
    client: &mut SendRequest<Empty<Bytes>>,
    method: Method,
    path: &str,
    xff: Option<&str>,
) -> Got {
    let xff: Vec<(&str, &str)> = xff.map(|v| ("x-forwarded-for", v)).into_iter().collect();
    send_with(client, method, path, &xff).await
}

/// One request with `headers` (a name given twice is sent twice), over `client`.
pub async fn send_with(
    client: &mut SendRequest<Empty<Bytes>>,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> Got {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "test");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    client.ready().await.expect("the connection stays open");
    let res = client
        .send_request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    body.collect().await.unwrap();
    Got {
        status: parts.status,
        headers: parts.headers,
    }
}

/// A token-bucket backend on `clock`.
pub fn local<K: std::hash::Hash + Eq>(
    quota: Quota,
    clock: &ManualClock,
) -> LocalBackend<K, ManualClock> {
    LocalBackend::try_with_clock(Algorithm::TokenBucket, quota, clock.clone()).unwrap()
}

/// A backend keyed by `K` whose store is always unreachable.
pub struct Down<K>(Quota, PhantomData<fn(&K)>);

impl<K> Down<K> {
    pub fn new(quota: Quota) -> Down<K> {
        Down(quota, PhantomData)
    }
}

#[derive(Debug)]
pub struct Outage;
impl std::fmt::Display for Outage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("store unreachable")
    }
}
impl std::error::Error for Outage {}

impl<K: std::hash::Hash + Eq + Clone + Send + Sync + 'static> Backend for Down<K> {
    type Key = K;
    type Error = Outage;
    type Future = std::future::Ready<Result<Decision, Outage>>;
    fn try_acquire(&self, _: &K, _: u64) -> Self::Future {
        std::future::ready(Err(Outage))
    }
    fn quota(&self) -> Quota {
        self.0
    }
}
