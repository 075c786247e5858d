//! What the layer benchmark and the instruction-count example share: the inner service, the
//! requests (one forwarded client per key, cycled in order) and a poll that expects an answer
//! at once.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use axum::body::Body;
use http::{HeaderValue, Request, Response};
use tollgate_tower::PeerAddr;
use tower::Service;

/// The output of `f`, which must be ready at its first poll.
pub fn ready<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("every service here answers at once"),
    }
}

/// The inner service: an empty 200 for every request.
pub fn hello(
) -> impl Service<Request<()>, Response = Response<Body>, Error = Infallible, Future: Send> + Clone + Send
{
    tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Body::empty()))
    })
}

/// The requests: one forwarded client per key, cycled in order.
pub struct Clients {
    xff: Vec<HeaderValue>,
    next: usize,
}

impl Clients {
    /// `n` clients, 10.0.0.0 upwards.
    pub fn new(n: u32) -> Clients {
        let xff = (0..n)
            .map(|k| {
                HeaderValue::try_from(format!("10.{}.{}.{}", k >> 16 & 255, k >> 8 & 255, k & 255))
                    .unwrap()
            })
            .collect();
        Clients { xff, next: 0 }
    }

    /// The next client's request, from the trusted peer 127.0.0.1.
    pub fn request(&mut self) -> Request<()> {
        let v = self.xff[self.next].clone();
        self.next = (self.next + 1) % self.xff.len();
        let mut req = Request::builder()
            .uri("/")
            .header("x-forwarded-for", v)
            .body(())
            .unwrap();
        req.extensions_mut()
            .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 40000))));
        req
    }
}
