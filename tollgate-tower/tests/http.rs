//! The layer on real loopback servers (hyper, axum, tonic) with real clients, time from a
//! `ManualClock`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::{Method, StatusCode};
use tokio::net::{TcpListener, TcpStream};
use tollgate::{ManualClock, Quota};
use tollgate_tower::{
    GlobalKey, HeaderMode, LocalBackend, MissingKey, PeerIp, RateLimitLayer, RouteKey, TrustedProxy,
};

#[path = "common/loopback.rs"]
mod loopback;

use loopback::{connect, get, local, send, serve_at, status, status_of, V4};

/// `n` per minute in a token bucket keyed by `K`, on `clock`.
fn per_minute<K: std::hash::Hash + Eq>(
    n: u64,
    clock: &ManualClock,
) -> LocalBackend<K, ManualClock> {
    local(Quota::per_minute(n).unwrap(), clock)
}

#[tokio::test]
async fn exact_headers_429_after_burst_and_retry_after_honoured() {
    let clock = ManualClock::new();
    // 2 per 3 s: one token every 1.5 s, so waits are not whole seconds.
    let quota = Quota::try_new(2, Duration::from_secs(3)).unwrap();
    let addr = serve_at(
        V4,
        RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(quota, &clock)),
        true,
    )
    .await
    .unwrap();
    let mut c = connect(addr).await;

    let first = get(&mut c, None).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"default\";q=2;w=3")
    );
    assert_eq!(first.header("ratelimit"), Some("\"default\";r=1;t=2")); // full in 1.5 s
    assert_eq!(first.header("retry-after"), None);
    let second = get(&mut c, None).await;
    assert_eq!(second.header("ratelimit"), Some("\"default\";r=0;t=3"));

    let denied = get(&mut c, None).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("2")); // 1.5 s, rounded up
    assert_eq!(denied.header("ratelimit"), Some("\"default\";r=0;t=2"));
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some("\"default\";q=2;w=3")
    );

    // Waiting the floor (1 s) is too early; waiting Retry-After passes, on the same connection.
    clock.advance(Duration::from_secs(1));
    assert_eq!(status(&mut c, None).await, StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_secs(1));
    let passed = get(&mut c, None).await;
    assert_eq!(passed.status, StatusCode::OK);
    assert_eq!(passed.header("ratelimit"), Some("\"default\";r=0;t=3"));
}

#[tokio::test]
async fn many_denials_keep_the_connection_and_count() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(GlobalKey, per_minute::<()>(1, &clock));
    let stats = layer.stats();
    let addr = serve_at(V4, layer, false).await.unwrap();
    let mut c = connect(addr).await;
    assert_eq!(status(&mut c, None).await, StatusCode::OK);
    for _ in 0..50 {
        assert_eq!(status(&mut c, None).await, StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(stats.denied(), 50);
}

fn trusting(nets: &[&str]) -> TrustedProxy {
    TrustedProxy::new(nets.iter().map(|n| n.parse().unwrap()))
}

/// Requests from behind proxies: a layer trusting the proxies in `nets`, one request a
/// minute per client, and on one connection from loopback each request's
/// `X-Forwarded-For` (none for `None`) with the status it must get, in order.
async fn behind_proxies(nets: &[&str], requests: &[(Option<&str>, StatusCode)]) {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(trusting(nets), per_minute::<IpAddr>(1, &clock));
    let mut c = connect(serve_at(V4, layer, true).await.unwrap()).await;
    for (i, &(xff, want)) in requests.iter().enumerate() {
        assert_eq!(
            status(&mut c, xff).await,
            want,
            "request {i}, X-Forwarded-For {xff:?}"
        );
    }
}

#[tokio::test]
async fn forged_xff_from_untrusted_peer_does_not_change_the_key() {
    let requests = [
        (Some("1.1.1.1"), StatusCode::OK),
        (Some("2.2.2.2"), StatusCode::TOO_MANY_REQUESTS),
        (None, StatusCode::TOO_MANY_REQUESTS),
    ];
    behind_proxies(&["10.0.0.0/8"], &requests).await;
}

#[tokio::test]
async fn trusted_proxy_header_sets_the_key_rightmost_untrusted_hop() {
    let requests = [
        (Some("1.1.1.1"), StatusCode::OK),
        (Some("2.2.2.2, 10.0.0.5"), StatusCode::OK),
        // A client prepending a fresh address to its own hop is still 1.1.1.1.
        (Some("9.9.9.9, 1.1.1.1"), StatusCode::TOO_MANY_REQUESTS),
        (Some("8.8.8.8, 2.2.2.2"), StatusCode::TOO_MANY_REQUESTS),
        // No header: the proxy itself is the client.
        (None, StatusCode::OK),
    ];
    behind_proxies(&["127.0.0.0/8", "10.0.0.0/8"], &requests).await;
}

#[tokio::test]
async fn ipv6_clients_in_one_64_share_a_bucket() {
    let requests = [
        (Some("2001:db8:1:2::1"), StatusCode::OK),
        (
            Some("[2001:db8:1:2:ffff:1:2:3]:443"),
            StatusCode::TOO_MANY_REQUESTS,
        ),
        (Some("2001:db8:1:3::1"), StatusCode::OK),
    ];
    behind_proxies(&["127.0.0.0/8"], &requests).await;
}

#[tokio::test]
async fn ipv6_peer_on_loopback_is_keyed_by_its_64() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(PeerIp::default(), per_minute::<IpAddr>(1, &clock));
    let Some(addr) = serve_at("[::1]:0", layer, true).await else {
        return; // no IPv6 loopback on this machine: the XFF test above covers the grouping
    };
    let mut c = connect(addr).await;
    assert_eq!(status(&mut c, None).await, StatusCode::OK);
    assert_eq!(status(&mut c, None).await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn shadow_mode_never_rejects_but_reports() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(GlobalKey, per_minute::<()>(2, &clock))
        .expose_shared_state(true)
        .shadow(true);
    let stats = layer.stats();
    let addr = serve_at(V4, layer, false).await.unwrap();
    let mut c = connect(addr).await;
    let mut last = None;
    for _ in 0..10 {
        let got = get(&mut c, None).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(got.header("retry-after"), None);
        last = got.header("ratelimit").map(str::to_owned);
    }
    assert_eq!(last.as_deref(), Some("\"default\";r=0;t=30"));
    assert_eq!((stats.shadow_denied(), stats.denied()), (8, 0));
}

#[tokio::test]
async fn keyless_requests_get_the_configured_answer() {
    let clock = ManualClock::new();
    // No PeerAddr on the requests: PeerIp has no key.
    let strict = RateLimitLayer::new(PeerIp::default(), per_minute::<IpAddr>(1, &clock));
    let stats = strict.stats();
    let mut c = connect(serve_at(V4, strict, false).await.unwrap()).await;
    assert_eq!(
        status(&mut c, None).await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(stats.missing_key(), 1);

    let shared = RateLimitLayer::new(PeerIp::default(), per_minute::<IpAddr>(1, &clock))
        .on_missing_key(MissingKey::Shared(IpAddr::from([0, 0, 0, 0])));
    let mut c = connect(serve_at(V4, shared, false).await.unwrap()).await;
    assert_eq!(status(&mut c, None).await, StatusCode::OK);
    assert_eq!(status(&mut c, None).await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn routes_plans_and_header_modes() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(GlobalKey, per_minute::<()>(100, &clock))
        .try_route("/login", "login", per_minute::<()>(1, &clock))
        .unwrap()
        .expose_shared_state(true)
        .headers(HeaderMode::DenyOnly);
    let mut c = connect(serve_at(V4, layer, false).await.unwrap()).await;
    let ok = send(&mut c, Method::POST, "/login", None).await;
    assert_eq!((ok.status, ok.header("ratelimit")), (StatusCode::OK, None));
    let no = send(&mut c, Method::POST, "/login/", None).await;
    assert_eq!(no.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(no.header("ratelimit-policy"), Some("\"login\";q=1;w=60"));
    assert_eq!(no.header("retry-after"), Some("60"));
    // Every method is counted by default; other paths have their own policy.
    assert_eq!(
        status_of(&mut c, Method::OPTIONS, "/login").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status_of(&mut c, Method::GET, "/loginx").await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn axum_route_layer_with_connect_info_and_matched_path() {
    use axum::routing::get as route;
    let clock = ManualClock::new();
    // One bucket per (client, route): `/items/{id}` is one route whatever the id.
    let layer = RateLimitLayer::new(
        (PeerIp::default(), RouteKey),
        per_minute::<(IpAddr, Box<str>)>(2, &clock),
    );
    let app = axum::Router::new()
        .route("/items/{id}", route(|| async { "item" }))
        .route_layer(layer)
        .route("/free", route(|| async { "free" }));
    let addr = spawn_server(|listener| async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    })
    .await;
    let mut c = connect(addr).await;
    assert_eq!(
        status_of(&mut c, Method::GET, "/items/1").await,
        StatusCode::OK
    );
    assert_eq!(
        status_of(&mut c, Method::GET, "/items/2").await,
        StatusCode::OK
    );
    let no = send(&mut c, Method::GET, "/items/3", None).await;
    assert_eq!(no.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(no.header("retry-after"), Some("30"));
    for _ in 0..5 {
        assert_eq!(
            status_of(&mut c, Method::GET, "/free").await,
            StatusCode::OK
        );
    }
}

#[tokio::test]
async fn grpc_requests_get_resource_exhausted() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let clock = ManualClock::new();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let layer = RateLimitLayer::new(GlobalKey, per_minute::<()>(1, &clock));
    let addr = spawn_server(|listener| async move {
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(tokio_stream_incoming(listener))
            .await
            .unwrap();
    })
    .await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let check = || HealthCheckRequest {
        service: String::new(),
    };
    assert!(client.check(check()).await.is_ok());
    let err = client.check(check()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert_eq!(err.metadata().get("retry-after").unwrap(), "60");
    // The channel is still usable once the wait is over.
    clock.advance(Duration::from_secs(60));
    assert!(client.check(check()).await.is_ok());
}

/// A listener on a free IPv4 loopback port, served by `serve` in a task of its own: its
/// address.
async fn spawn_server<F>(serve: impl FnOnce(TcpListener) -> F) -> SocketAddr
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener));
    addr
}

/// The accepted connections of `listener` as the stream tonic's server takes.
fn tokio_stream_incoming(
    listener: TcpListener,
) -> impl futures_core::Stream<Item = Result<TcpStream, std::io::Error>> {
    futures_util::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(tcp, _)| tcp);
        Some((conn, l))
    })
}
