//! A hello service behind a layer on a real loopback server (HTTP/1, keep-alive), and a
//! client connection to it: shared by the tests that include this file
//! (`#[path = "common/loopback.rs"] mod loopback;`).
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tollgate_tower::PeerAddr;
use tower::{Layer, ServiceBuilder};

pub type Body = Full<Bytes>;

pub const V4: &str = "127.0.0.1:0";

/// Serves `layer` around a hello service on `bind`, HTTP/1 with keep-alive; `None` when the
/// address cannot be bound. With `peer`, each request carries its connection's address as a
/// `PeerAddr` extension.
pub async fn serve_at<L>(bind: &str, layer: L, peer: bool) -> Option<SocketAddr>
where
    L: Layer<tower::util::BoxCloneSyncService<Request<Incoming>, Response<Body>, Infallible>>
        + Send
        + 'static,
    L::Service: tower::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    <L::Service as tower::Service<Request<Incoming>>>::Future: Send,
{
    let hello =
        tower::util::BoxCloneSyncService::new(tower::service_fn(|_req: Request<Incoming>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
        }));
    let svc = layer.layer(hello);
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
}

pub async fn get(client: &mut SendRequest<Empty<Bytes>>, xff: Option<&str>) -> Got {
    send(client, Method::GET, "/", xff).await
}

pub async fn send(
    client: &mut SendRequest<Empty<Bytes>>,
    method: Method,
    path: &str,
    xff: Option<&str>,
) -> Got {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "test");
    if let Some(xff) = xff {
        req = req.header("x-forwarded-for", xff);
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
