//! The layer facing hostile clients and real deployments, over real HTTP/1 on loopback: no
//! method or path spelling around a limit, a key header sent twice refused, headers that
//! compose with the upstream's, denials that never wait for a busy inner service, shadow
//! mode that never answers, and RFC 7239 / `X-Real-IP` clients behind trusted proxies. Time
//! comes from a `ManualClock`.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tollgate::{Algorithm, Decision, ManualClock, Quota};
use tollgate_tower::{
    ForwardedHeader, GlobalKey, HeaderKey, MissingKey, PeerIp, QuotaUnit, RateLimitLayer, RealIp,
    TrustedProxy,
};
use tower::{Layer, Service};

#[path = "common/loopback.rs"]
mod loopback;

use loopback::{connect, hello, local, send_with as send, serve, status_with, Body, Down, Inner};

/// One request written byte for byte (no client library rewriting its target), the status
/// and the `RateLimit-Policy` of the answer.
async fn raw(addr: SocketAddr, target: &str) -> (u16, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {target} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tcp.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let policy = out
        .lines()
        .find_map(|l| l.strip_prefix("ratelimit-policy: "))
        .unwrap_or("")
        .to_owned();
    (status, policy)
}

fn per_minute(n: u64) -> Quota {
    Quota::per_minute(n).unwrap()
}

#[tokio::test]
async fn past_its_quota_a_client_gets_429_for_every_method() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(per_minute(1), &clock));
    let mut c = connect(serve(layer.layer(hello())).await).await;
    assert_eq!(status_with(&mut c, &[]).await, StatusCode::OK);
    for m in [
        Method::OPTIONS,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::TRACE,
        Method::GET,
    ] {
        let got = send(&mut c, m.clone(), "/", &[]).await;
        assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{m}");
    }
    // A preflight too, unless asked.
    let preflight = [
        ("origin", "https://app.example"),
        ("access-control-request-method", "POST"),
    ];
    let got = send(&mut c, Method::OPTIONS, "/", &preflight).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn cors_preflights_pass_only_when_asked_and_only_real_ones() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(per_minute(1), &clock))
        .exempt_cors_preflight(true);
    let stats = layer.stats();
    let mut c = connect(serve(layer.layer(hello())).await).await;
    assert_eq!(status_with(&mut c, &[]).await, StatusCode::OK);
    let preflight = [
        ("origin", "https://app.example"),
        ("access-control-request-method", "POST"),
    ];
    for _ in 0..5 {
        let got = send(&mut c, Method::OPTIONS, "/", &preflight).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(got.header("ratelimit"), None);
    }
    // Half a preflight is an ordinary OPTIONS: counted.
    let half = send(&mut c, Method::OPTIONS, "/", &preflight[..1]).await;
    assert_eq!(half.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(stats.denied(), 1);
}

#[tokio::test]
async fn every_spelling_of_a_route_gets_its_policy() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(per_minute(100), &clock))
        .try_route("/login", "login", local::<IpAddr>(per_minute(1), &clock))
        .unwrap();
    let addr = serve(layer.layer(hello())).await;
    assert_eq!(
        raw(addr, "/login").await,
        (200, "\"login\";q=1;w=60".into())
    );
    for target in [
        "/login",
        "//login",
        "/%6Cogin",
        "/%256Cogin",
        "/LOGIN",
        "/Login/",
        "/./login",
        "/x/../login",
        "/login;jsessionid=1",
        "/%2Flogin",
        "/login/../login/x",
        "/login?next=/",
    ] {
        assert_eq!(
            raw(addr, target).await,
            (429, "\"login\";q=1;w=60".into()),
            "{target}"
        );
    }
    // Neighbours keep the default policy.
    for target in ["/logins", "/", "/api/login"] {
        assert_eq!(
            raw(addr, target).await,
            (200, "\"default\";q=100;w=60".into()),
            "{target}"
        );
    }
}

#[tokio::test]
async fn a_key_header_sent_twice_is_refused_even_when_keyless_requests_pass() {
    let clock = ManualClock::new();
    let api_key = HeaderName::from_static("x-api-key");
    let layer = RateLimitLayer::new(
        HeaderKey::new(api_key),
        local::<Box<[u8]>>(per_minute(1), &clock),
    )
    .on_missing_key(MissingKey::Allow);
    let stats = layer.stats();
    let mut c = connect(serve(layer.layer(hello())).await).await;
    let one = [("x-api-key", "k1")];
    assert_eq!(status_with(&mut c, &one).await, StatusCode::OK);
    assert_eq!(
        status_with(&mut c, &one).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The upstream may read the first value; a rotating second one never buys a fresh limit.
    for i in 0..5 {
        let rotating = format!("junk{i}");
        let twice = [("x-api-key", "k1"), ("x-api-key", rotating.as_str())];
        let got = send(&mut c, Method::GET, "/", &twice).await;
        assert_eq!(got.status, StatusCode::BAD_REQUEST);
    }
    assert_eq!(stats.invalid_key(), 5);
    assert_eq!(status_with(&mut c, &[]).await, StatusCode::OK);
    assert_eq!(stats.missing_key(), 1);
}

/// An upstream that sets its own rate-limit fields.
fn limited_upstream() -> Inner {
    Inner::new(tower::service_fn(|_req: Request<Incoming>| async {
        let mut res = Response::new(Full::new(Bytes::from_static(b"up")));
        let h = res.headers_mut();
        h.insert("ratelimit", "\"up\";r=3;t=9".parse().unwrap());
        h.insert("ratelimit-policy", "\"up\";q=5;w=10".parse().unwrap());
        Ok::<_, Infallible>(res)
    }))
}

#[tokio::test]
async fn our_items_are_appended_to_the_upstreams_lists() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(per_minute(10), &clock));
    let mut c = connect(serve(layer.layer(limited_upstream())).await).await;
    let got = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(
        got.all("ratelimit"),
        ["\"up\";r=3;t=9", "\"default\";r=9;t=6"]
    );
    assert_eq!(
        got.all("ratelimit-policy"),
        ["\"up\";q=5;w=10", "\"default\";q=10;w=60"]
    );
}

#[tokio::test]
async fn a_burst_above_the_limit_is_stated_as_the_bucket_enforces_it() {
    let clock = ManualClock::new();
    // `--limit 10/s --burst 20`.
    let quota = Quota::per_second(10).unwrap().with_burst(20).unwrap();
    let layer = RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(quota, &clock));
    let mut c = connect(serve(layer.layer(hello())).await).await;
    let first = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"default\";q=20;w=2")
    );
    assert_eq!(first.header("ratelimit"), Some("\"default\";r=19;t=1"));
    let mut passed = 1;
    while status_with(&mut c, &[]).await == StatusCode::OK {
        passed += 1;
    }
    assert_eq!(passed, 20, "q is what a full bucket admits at once");
}

#[tokio::test]
async fn a_byte_quota_says_so() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(per_minute(4096), &clock))
        .cost(|p| tollgate_tower::content_length_cost(p).max(1))
        .quota_unit(QuotaUnit::ContentBytes);
    let mut c = connect(serve(layer.layer(hello())).await).await;
    let got = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(
        got.header("ratelimit-policy"),
        Some("\"default\";q=4096;w=60;qu=\"content-bytes\"")
    );
}

#[tokio::test]
async fn a_global_limit_keeps_its_state_to_itself_unless_asked() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(GlobalKey, local::<()>(per_minute(1), &clock));
    let mut c = connect(serve(layer.layer(hello())).await).await;
    let ok = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!((ok.status, ok.header("ratelimit")), (StatusCode::OK, None));
    let no = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(no.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(no.header("retry-after"), Some("60"));
    assert_eq!(
        (no.header("ratelimit"), no.header("ratelimit-policy")),
        (None, None)
    );

    let asked = RateLimitLayer::new(GlobalKey, local::<()>(per_minute(1), &clock))
        .expose_shared_state(true);
    let mut c = connect(serve(asked.layer(hello())).await).await;
    let ok = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(ok.header("ratelimit"), Some("\"default\";r=0;t=60"));
}

/// An inner service that holds every request until `release` is notified.
fn held(
    release: Arc<Notify>,
) -> impl Service<Request<Incoming>, Response = Response<Body>, Error = Infallible, Future: Send>
       + Clone
       + Send
       + Sync {
    tower::service_fn(move |_req: Request<Incoming>| {
        let release = Arc::clone(&release);
        async move {
            release.notified().await;
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"late"))))
        }
    })
}

#[tokio::test]
async fn a_denial_never_waits_for_a_busy_inner_service() {
    let clock = ManualClock::new();
    let release = Arc::new(Notify::new());
    let busy = tower::limit::ConcurrencyLimitLayer::new(1).layer(held(Arc::clone(&release)));
    let layer = RateLimitLayer::new(
        HeaderKey::new(HeaderName::from_static("x-user")),
        local::<Box<[u8]>>(per_minute(1), &clock),
    );
    let addr = serve(Inner::new(layer.layer(busy))).await;

    // Alice's first request takes the only slot and is held there.
    let mut alice = connect(addr).await;
    let first = tokio::spawn(async move {
        send(&mut alice, Method::GET, "/", &[("x-user", "alice")])
            .await
            .status
    });
    // Bob is admitted too, and waits for the slot.
    let mut bob = connect(addr).await;
    let second = tokio::spawn(async move {
        send(&mut bob, Method::GET, "/", &[("x-user", "bob")])
            .await
            .status
    });
    // Alice again, past her quota: answered now, while both admitted requests are held. A
    // layer that waited for the inner service would never answer before the release.
    let mut again = connect(addr).await;
    let denied = tokio::time::timeout(
        Duration::from_secs(30),
        send(&mut again, Method::GET, "/", &[("x-user", "alice")]),
    )
    .await
    .expect("the denial is answered without the inner service");
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(!first.is_finished() && !second.is_finished());
    release.notify_one();
    assert_eq!(first.await.unwrap(), StatusCode::OK);
    release.notify_one();
    assert_eq!(second.await.unwrap(), StatusCode::OK);
}

#[tokio::test]
async fn shadow_mode_passes_keyless_requests_and_backend_errors() {
    let clock = ManualClock::new();
    // No peer address reaches the extractor: every request is keyless.
    let keyless = RateLimitLayer::new(
        tollgate_tower::key_fn(|_: &Request<Incoming>| None::<IpAddr>),
        local::<IpAddr>(per_minute(1), &clock),
    )
    .shadow(true);
    let stats = keyless.stats();
    let mut c = connect(serve(keyless.layer(hello())).await).await;
    for _ in 0..3 {
        assert_eq!(status_with(&mut c, &[]).await, StatusCode::OK);
    }
    assert_eq!((stats.missing_key(), stats.denied()), (3, 0));

    let down = RateLimitLayer::new(PeerIp::default(), Down::new(per_minute(1))).shadow(true);
    let stats = down.stats();
    let mut c = connect(serve(down.layer(hello())).await).await;
    for _ in 0..3 {
        assert_eq!(status_with(&mut c, &[]).await, StatusCode::OK);
    }
    assert_eq!(stats.errors(), 3);

    // Out of shadow mode the same outage is a 503 that says when to come back.
    let closed = RateLimitLayer::new(PeerIp::default(), Down::new(per_minute(1)))
        .outage_retry_after(Duration::from_millis(2500));
    let mut c = connect(serve(closed.layer(hello())).await).await;
    let got = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(got.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(got.header("retry-after"), Some("3"));
}

/// Every request from loopback: the trusted proxy in these tests.
fn loopback() -> [tollgate_tower::IpNet; 1] {
    ["127.0.0.1/32".parse().unwrap()]
}

#[tokio::test]
async fn forwarded_obfuscated_ports_and_all_trusted_chains() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(
        TrustedProxy::new([
            "127.0.0.1/32".parse().unwrap(),
            "10.0.0.7/32".parse().unwrap(),
        ])
        .header(ForwardedHeader::Forwarded),
        local::<IpAddr>(per_minute(1), &clock),
    );
    let mut c = connect(serve(layer.layer(hello())).await).await;
    // The client's port is obfuscated: its address is still the key.
    let obf = [("forwarded", "for=\"192.0.2.43:_p1\", for=10.0.0.7")];
    assert_eq!(status_with(&mut c, &obf).await, StatusCode::OK);
    let obf2 = [(
        "forwarded",
        "for=\"192.0.2.43:_other\";proto=https, for=10.0.0.7",
    )];
    assert_eq!(
        status_with(&mut c, &obf2).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another client behind the same proxy has its own limit.
    let other = [("forwarded", "for=\"192.0.2.44:_p1\", for=10.0.0.7")];
    assert_eq!(status_with(&mut c, &other).await, StatusCode::OK);
    // Every hop trusted (a request made by the proxy itself): keyed by the leftmost hop, the
    // proxy 10.0.0.7, not by the loopback peer and not by whatever comes after.
    let inside = [("forwarded", "for=10.0.0.7")];
    assert_eq!(status_with(&mut c, &inside).await, StatusCode::OK);
    assert_eq!(
        status_with(&mut c, &inside).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The loopback peer with no header is its own key.
    assert_eq!(status_with(&mut c, &[]).await, StatusCode::OK);
}

#[tokio::test]
async fn x_real_ip_from_a_trusted_peer_only_once() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(
        RealIp::new(loopback()),
        local::<IpAddr>(per_minute(1), &clock),
    );
    let mut c = connect(serve(layer.layer(hello())).await).await;
    let a = [("x-real-ip", "203.0.113.9")];
    assert_eq!(status_with(&mut c, &a).await, StatusCode::OK);
    assert_eq!(status_with(&mut c, &a).await, StatusCode::TOO_MANY_REQUESTS);
    let b = [("x-real-ip", "203.0.113.10")];
    assert_eq!(status_with(&mut c, &b).await, StatusCode::OK);
    let twice = [("x-real-ip", "203.0.113.9"), ("x-real-ip", "198.51.100.1")];
    assert_eq!(status_with(&mut c, &twice).await, StatusCode::BAD_REQUEST);

    // From a peer that is not trusted the header is ignored: the peer is the key.
    let untrusted = RateLimitLayer::new(
        RealIp::new(["10.0.0.7/32".parse().unwrap()]),
        local::<IpAddr>(per_minute(1), &clock),
    );
    let mut c = connect(serve(untrusted.layer(hello())).await).await;
    assert_eq!(status_with(&mut c, &a).await, StatusCode::OK);
    assert_eq!(status_with(&mut c, &b).await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn legacy_headers_and_the_decision_for_the_handler() {
    let clock = ManualClock::new();
    let app = Inner::new(tower::service_fn(|req: Request<Incoming>| async move {
        let left = req
            .extensions()
            .get::<Decision>()
            .map_or("none".to_owned(), |d| d.remaining().to_string());
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(left))))
    }));
    let layer = RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(per_minute(2), &clock))
        .legacy_headers(true)
        .decision_extension(true);
    let addr = serve(layer.layer(app)).await;
    let mut c = connect(addr).await;
    let ok = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(ok.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(ok.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(ok.header("x-ratelimit-reset"), Some("30"));
    assert_eq!(ok.header("x-ratelimit-after"), None);
    let _ = send(&mut c, Method::GET, "/", &[]).await;
    let no = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(no.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(no.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(no.header("x-ratelimit-after"), Some("30"));
    assert_eq!(no.header("retry-after"), Some("30"));

    // The inner service reads its request's decision.
    let fresh = RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(per_minute(5), &clock))
        .decision_extension(true);
    let app = Inner::new(tower::service_fn(|req: Request<Incoming>| async move {
        let left = req.extensions().get::<Decision>().map(|d| d.remaining());
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("{left:?}")))))
    }));
    let addr = serve(fresh.layer(app)).await;
    let mut c = connect(addr).await;
    let req = Request::builder()
        .uri("/")
        .header("host", "t")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let res = c.send_request(req).await.unwrap();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"Some(4)");
}

#[tokio::test]
async fn an_error_handler_sets_status_and_body_and_keeps_our_headers() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(PeerIp::default(), local::<IpAddr>(per_minute(1), &clock))
        .on_reject(|r: &tollgate_tower::Rejection<'_>| {
            let wait = r
                .decision
                .and_then(|d| d.retry_after())
                .map_or(0, |w| w.as_secs());
            let mut res = Response::new(Full::new(Bytes::from(format!(
                "{{\"reason\":\"{:?}\",\"policy\":\"{}\",\"wait\":{wait}}}",
                r.reason, r.policy
            ))));
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            res.headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            res
        });
    let addr = serve(layer.layer(hello())).await;
    let mut c = connect(addr).await;
    assert_eq!(status_with(&mut c, &[]).await, StatusCode::OK);
    let req = Request::builder()
        .uri("/")
        .header("host", "t")
        .body(Empty::<Bytes>::new())
        .unwrap();
    c.ready().await.unwrap();
    let res = c.send_request(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()["content-type"], "application/json");
    assert_eq!(res.headers()["retry-after"], "60");
    assert_eq!(res.headers()["ratelimit"], "\"default\";r=0;t=60");
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        &body[..],
        br#"{"reason":"Denied","policy":"default","wait":60}"#
    );
}

#[tokio::test]
async fn a_partition_key_names_the_clients_partition() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(
        HeaderKey::new(HeaderName::from_static("x-tenant")),
        local::<Box<[u8]>>(per_minute(2), &clock),
    )
    .partition_key(|k| k.to_vec());
    let mut c = connect(serve(layer.layer(hello())).await).await;
    let got = send(&mut c, Method::GET, "/", &[("x-tenant", "acme")]).await;
    assert_eq!(
        got.header("ratelimit"),
        Some("\"default\";r=1;t=30;pk=:YWNtZQ==:")
    );
    assert_eq!(
        got.header("ratelimit-policy"),
        Some("\"default\";q=2;w=60;pk=:YWNtZQ==:")
    );
}

#[tokio::test]
async fn a_live_quota_change_is_announced_at_once() {
    let clock = ManualClock::new();
    let shared = Arc::new(
        tollgate::KeyedLimiter::<IpAddr>::builder(Algorithm::TokenBucket, per_minute(10))
            .max_keys(
                std::num::NonZeroUsize::new(1000).unwrap(),
                tollgate::WhenFull::Deny,
            )
            .live()
            .build_with_clock(clock.clone())
            .unwrap(),
    );
    let layer = RateLimitLayer::new(PeerIp::default(), Arc::clone(&shared));
    let mut c = connect(serve(layer.layer(hello())).await).await;
    let before = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(
        before.header("ratelimit-policy"),
        Some("\"default\";q=10;w=60")
    );
    shared.set_quota(per_minute(30)).unwrap();
    let after = send(&mut c, Method::GET, "/", &[]).await;
    assert_eq!(
        after.header("ratelimit-policy"),
        Some("\"default\";q=30;w=60")
    );
    assert_eq!(after.header("ratelimit"), Some("\"default\";r=28;t=4"));
}
