//! A backend whose answers are not ready at once (as a remote store's are), and one that
//! fails: the layer waits for the first inside the response future and applies `OnError` to
//! the second, never admitting what the backend did not.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use tollgate::{Algorithm, Decision, ManualClock, Quota};
use tollgate_tower::{Backend, GlobalKey, LocalBackend, OnError, RateLimitLayer};
use tower::{Layer, ServiceExt};

/// Answers from an in-process limiter, but only on the second poll.
struct Slow(LocalBackend<(), ManualClock>);

struct Later(Option<Decision>, bool);

impl Future for Later {
    type Output = Result<Decision, std::io::Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !self.1 {
            self.1 = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(
            self.0
                .take()
                .ok_or_else(|| std::io::Error::other("store unreachable")),
        )
    }
}

impl Backend for Slow {
    type Key = ();
    type Error = std::io::Error;
    type Future = Later;
    fn try_acquire(&self, key: &(), cost: u64) -> Later {
        Later(Some(self.0.limiter().try_acquire_n(key, cost)), false)
    }
    fn quota(&self) -> Quota {
        self.0.quota()
    }
}

/// Never reaches its store.
struct Down(Quota);

impl Backend for Down {
    type Key = ();
    type Error = std::io::Error;
    type Future = Later;
    fn try_acquire(&self, _: &(), _: u64) -> Later {
        Later(None, false)
    }
    fn quota(&self) -> Quota {
        self.0
    }
}

fn hello(
) -> impl tower::Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send>
       + Clone {
    tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new("hello".to_owned()))
    })
}

#[tokio::test]
async fn pending_decisions_are_awaited() {
    let quota = Quota::per_minute(1).unwrap();
    let local =
        LocalBackend::try_with_clock(Algorithm::FixedWindow, quota, ManualClock::new()).unwrap();
    let svc = RateLimitLayer::new(GlobalKey, Slow(local))
        .expose_shared_state(true)
        .layer(hello());
    let ok = svc.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.headers()["ratelimit"], "\"default\";r=0;t=60");
    assert_eq!(ok.body(), "hello");
    let no = svc.oneshot(Request::new(())).await.unwrap();
    assert_eq!(no.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(no.headers()["retry-after"], "60");
}

#[tokio::test]
async fn failures_follow_on_error() {
    let quota = Quota::per_minute(1).unwrap();
    let closed = RateLimitLayer::new(GlobalKey, Down(quota));
    let stats = closed.stats();
    let res = closed
        .layer(hello())
        .oneshot(Request::new(()))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()["retry-after"], "1"); // an outage is worth a retry soon
    assert!(res.body().is_empty());
    assert_eq!(stats.errors(), 1);

    let open = RateLimitLayer::new(GlobalKey, Down(quota)).on_error(OnError::Allow);
    let res = open.layer(hello()).oneshot(Request::new(())).await.unwrap();
    assert_eq!(
        (res.status(), res.body().as_str()),
        (StatusCode::OK, "hello")
    );
    assert!(res.headers().get("ratelimit").is_none());
}

#[tokio::test]
async fn cost_and_exceeds_capacity() {
    let quota = Quota::per_minute(10).unwrap();
    let local =
        LocalBackend::<(), _>::try_with_clock(Algorithm::TokenBucket, quota, ManualClock::new())
            .unwrap();
    let svc = RateLimitLayer::new(GlobalKey, local)
        .expose_shared_state(true)
        .cost(tollgate_tower::content_length_cost)
        .exceeds_capacity_status(StatusCode::PAYLOAD_TOO_LARGE)
        .layer(hello());
    let sized = |n: u64| {
        Request::builder()
            .header("content-length", n)
            .body(())
            .unwrap()
    };
    let ok = svc.clone().oneshot(sized(7)).await.unwrap();
    assert_eq!(ok.headers()["ratelimit"], "\"default\";r=3;t=42");
    let no = svc.clone().oneshot(sized(4)).await.unwrap();
    assert_eq!(no.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(no.headers()["retry-after"], "6");
    assert_eq!(no.headers()["ratelimit"], "\"default\";r=3;t=6");
    let huge = svc.oneshot(sized(11)).await.unwrap();
    assert_eq!(huge.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(huge.headers().get("retry-after").is_none());
}
