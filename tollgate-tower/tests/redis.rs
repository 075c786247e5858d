//! The layer over `RedisBackend` on a real `redis-server` started by the test: the headers'
//! exact values with the limiter's test clock, and a frozen server (SIGSTOP) answered as
//! configured within the limiter's deadline, never a hang.

mod common;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use tollgate::{Algorithm, ManualClock, Quota};
use tollgate_redis::{FailurePolicy, RedisLimiter, RedisLimiterBuilder};
use tollgate_tower::{OnError, PeerAddr, PeerIp, RateLimitLayer, RedisBackend};
use tower::{Layer, Service, ServiceExt};

use common::RedisServer;

fn hello(
) -> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send> + Clone
{
    tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new("hello".to_owned()))
    })
}

/// A request from `peer`, as a server that knows the connection's address makes it.
fn from(peer: &str) -> Request<()> {
    let mut req = Request::new(());
    let ip: IpAddr = peer.parse().unwrap();
    req.extensions_mut()
        .insert(PeerAddr(SocketAddr::new(ip, 40_000)));
    req
}

/// One request through `svc`, bounded so that a hang fails the test instead of stalling it.
async fn call<S>(svc: &S, req: Request<()>) -> Response<String>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone,
{
    tokio::time::timeout(Duration::from_secs(5), svc.clone().oneshot(req))
        .await
        .expect("the layer answered within 5 s")
        .unwrap()
}

fn header<'a>(res: &'a Response<String>, name: &str) -> Option<&'a str> {
    res.headers().get(name).map(|v| v.to_str().unwrap())
}

fn builder(server: &RedisServer, quota: Quota, clock: &ManualClock) -> RedisLimiterBuilder {
    RedisLimiter::builder(server.url(), Algorithm::TokenBucket, quota)
        .test_clock(clock.clone())
        .deny_cache(0)
}

#[tokio::test]
async fn exact_headers_and_429_after_the_burst_per_client() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    // 2 per 3 s: one token every 1.5 s, so waits are not whole seconds.
    let quota = Quota::try_new(2, Duration::from_secs(3)).unwrap();
    let limiter = builder(&server, quota, &clock)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the limiter connects to the test server");
    let backend = RedisBackend::<IpAddr>::new(limiter.clone(), quota);
    let layer = RateLimitLayer::new(PeerIp::default(), backend);
    let stats = layer.stats();
    let svc = layer.layer(hello());

    let first = call(&svc, from("203.0.113.7")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.body(), "hello");
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some("\"default\";q=2;w=3")
    );
    assert_eq!(header(&first, "ratelimit"), Some("\"default\";r=1;t=2"));
    let second = call(&svc, from("203.0.113.7")).await;
    assert_eq!(header(&second, "ratelimit"), Some("\"default\";r=0;t=3"));

    let denied = call(&svc, from("203.0.113.7")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), Some("2")); // 1.5 s, rounded up
    assert_eq!(header(&denied, "ratelimit"), Some("\"default\";r=0;t=2"));
    assert_eq!(stats.denied(), 1);

    // Another client has its own bucket on the server.
    let other = call(&svc, from("198.51.100.1")).await;
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(header(&other, "ratelimit"), Some("\"default\";r=1;t=2"));

    // The state is Redis's: a second layer (another instance) on the same keys sees it.
    let twin =
        RateLimitLayer::new(PeerIp::default(), RedisBackend::new(limiter, quota)).layer(hello());
    assert_eq!(
        call(&twin, from("203.0.113.7")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );

    // Waiting Retry-After on the limiter's clock, the request passes.
    clock.advance(Duration::from_secs(2));
    let passed = call(&svc, from("203.0.113.7")).await;
    assert_eq!(passed.status(), StatusCode::OK);
    assert_eq!(header(&passed, "ratelimit"), Some("\"default\";r=0;t=3"));
    assert_eq!(stats.errors(), 0);
}

#[tokio::test]
async fn a_frozen_server_gets_the_configured_answer_within_the_deadline() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let quota = Quota::per_minute(10).unwrap();
    let deadline = Duration::from_millis(100);
    // Each layer its own keys (a prefix per limiter), so their counts stay apart.
    let build = |prefix: &str, policy: FailurePolicy| {
        builder(&server, quota, &clock)
            .key_prefix(prefix)
            .timeout(deadline)
            .circuit_breaker(0, Duration::ZERO)
            .failure_policy(policy)
            .build()
    };
    let closed = FailurePolicy::FailClosed {
        retry_after: Duration::from_secs(7),
    };
    let to_layer = RateLimitLayer::new(
        PeerIp::default(),
        RedisBackend::<IpAddr>::new(build("rejecting", closed.clone()).await.unwrap(), quota),
    );
    let layer_stats = to_layer.stats();
    let rejecting = to_layer.layer(hello());
    let allowing = RateLimitLayer::new(
        PeerIp::default(),
        RedisBackend::<IpAddr>::new(build("allowing", closed.clone()).await.unwrap(), quota),
    )
    .on_error(OnError::Allow)
    .layer(hello());
    let by_policy = RateLimitLayer::new(
        PeerIp::default(),
        RedisBackend::<IpAddr>::new(build("by-policy", closed).await.unwrap(), quota)
            .limiter_policy(),
    )
    .layer(hello());
    let open_policy = RateLimitLayer::new(
        PeerIp::default(),
        RedisBackend::<IpAddr>::new(
            build("open-policy", FailurePolicy::FailOpen).await.unwrap(),
            quota,
        )
        .limiter_policy(),
    )
    .layer(hello());
    // Every limiter has answered once before the server freezes.
    for svc in [&rejecting, &allowing, &by_policy, &open_policy] {
        assert_eq!(call(svc, from("192.0.2.1")).await.status(), StatusCode::OK);
    }

    server.pause();
    // Well above the deadline, well below a hang: the answer comes from the deadline.
    let bound = deadline + Duration::from_millis(900);
    let timed = |svc| async move {
        let start = Instant::now();
        let res = call(svc, from("192.0.2.1")).await;
        let took = start.elapsed();
        assert!(
            took >= deadline && took < bound,
            "answered after {took:?}: the deadline is {deadline:?}"
        );
        res
    };

    // The error reaches the layer: its OnError answers (503 by default, or let through).
    let res = timed(&rejecting).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&res, "ratelimit"), None);
    assert_eq!(layer_stats.errors(), 1);
    let res = timed(&allowing).await;
    assert_eq!(
        (res.status(), res.body().as_str()),
        (StatusCode::OK, "hello")
    );

    // The limiter's failure policy answers: a denial with its Retry-After, or an admission.
    let res = timed(&by_policy).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), Some("7"));
    let res = timed(&open_policy).await;
    assert_eq!(res.status(), StatusCode::OK);

    server.resume();
    // Thawed, Redis decides again. The call that timed out was still in the connection and
    // the server ran it on waking: it took a unit (the request was refused all the same), so
    // this is the third unit of ten, and the bucket is full again in 3 × 6 s.
    let res = call(&rejecting, from("192.0.2.1")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(header(&res, "ratelimit"), Some("\"default\";r=7;t=18"));
}
