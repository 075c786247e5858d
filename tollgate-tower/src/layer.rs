//! [`RateLimitLayer`] and its service [`RateLimit`]: per-key limits in front of any tower
//! service taking `http::Request<B>` and answering `http::Response<R>` with `R: Default`.
//!
//! Per request: skip exempt methods (none by default) and, if asked, CORS preflights; pick
//! the policy (the longest matching route prefix of the normalized path, else the default);
//! extract the key; ask the policy's backend for `cost` units. An admission calls the inner
//! service (appending the headers if configured); a denial answers at once with `429` (gRPC:
//! `grpc-status: 8`, `RESOURCE_EXHAUSTED`) and an empty body. `poll_ready` never returns
//! `Pending` (a denial does not wait for a busy inner service; an admission waits for it in
//! its response future), and nothing closes the connection: keep-alive is the server's, as
//! for any other response.
//!
//! The layer's state (extractor, backends, pre-rendered headers, counters) sits behind one
//! `Arc`: every clone of the layer or service shares the same limits, unlike
//! `tower::limit::RateLimit`, whose per-clone state lets a cloned service pass its limit many
//! times over.

use core::fmt;
use std::sync::Arc;

use http::header::HeaderValue;
use http::{Method, StatusCode};
use tower::Layer;

use crate::backend::{Backend, IntoBackend};
use crate::config::{Config, HeaderMode, MissingKey, OnError, Policy};
use crate::headers::{PolicyNameError, QuotaUnit};
use crate::reject::{DefaultReject, RejectFn};
use crate::service::RateLimit;
use crate::stats::Stats;

/// Builder methods that each set one field of the layer's [`Config`]: every
/// `pub fn name(arg: Type) => field = value;` becomes `pub fn name(mut self, arg: Type) -> Self`
/// with its doc comment, setting `field` to `value` in this layer's own copy of the config
/// (copied on write while a clone or a service shares it).
macro_rules! config_setters {
    ($(
        $(#[$doc:meta])*
        pub fn $name:ident($arg:ident: $ty:ty) => $field:ident = $value:expr;
    )*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, $arg: $ty) -> Self {
            self.config().$field = $value;
            self
        }
    )*};
}

/// A tower [`Layer`] limiting requests per key; its service is [`RateLimit`].
///
/// Every service the layer makes, and every clone of it, shares the layer's backends. A
/// setting changed on a clone of a layer changes that clone only; the backends stay shared.
///
/// ```
/// use axum::{routing::get, Router};
/// use tollgate::{Algorithm, Quota};
/// use tollgate_tower::{LocalBackend, PeerIp, RateLimitLayer};
///
/// let per_client = LocalBackend::try_new(Algorithm::TokenBucket, Quota::per_second(10)?.with_burst(20)?)?;
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(PeerIp::default(), per_client));
/// // Serve with `app.into_make_service_with_connect_info::<std::net::SocketAddr>()` so
/// // `PeerIp` sees each connection's address.
/// # Ok::<(), tollgate::KeyedError>(())
/// ```
pub struct RateLimitLayer<X, Bk: Backend, H = DefaultReject> {
    pub(crate) config: Arc<Config<X, Bk>>,
    reject: H,
}

impl<X, Bk: Backend, H: Clone> Clone for RateLimitLayer<X, Bk, H> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
            reject: self.reject.clone(),
        }
    }
}

impl<X, Bk: Backend, H> fmt::Debug for RateLimitLayer<X, Bk, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("policies", &self.config.policies.len())
            .field("header_mode", &self.config.header_mode)
            .field("shadow", &self.config.shadow)
            .finish_non_exhaustive()
    }
}

impl<X: Clone, Bk: Backend> RateLimitLayer<X, Bk> {
    /// Limits every request by the key `extractor` picks, against `backend`'s quota, under the
    /// policy name `"default"`. `backend` is any [`Backend`] or a `KeyedLimiter` you built.
    /// Defaults: every method counted, headers on every response (none for a key shared by
    /// many clients, see [`RateLimitLayer::expose_shared_state`]), cost 1, a keyless request
    /// gets `500`, a request naming its key twice `400`, a backend error `503` with
    /// `Retry-After: 1`.
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota};
    /// use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
    /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(1000)?)?);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn new(extractor: X, backend: impl IntoBackend<Backend = Bk>) -> Self {
        let backend = backend.into_backend();
        let policy = match Policy::new(None, "default", Arc::new(backend), QuotaUnit::Requests) {
            Ok(p) => p,
            Err(_) => unreachable!("\"default\" is printable ASCII"),
        };
        RateLimitLayer {
            config: Arc::new(Config {
                extractor,
                policies: vec![policy],
                header_mode: HeaderMode::Always,
                missing: MissingKey::Reject(StatusCode::INTERNAL_SERVER_ERROR),
                on_error: OnError::default(),
                exceeds: StatusCode::TOO_MANY_REQUESTS,
                shadow: false,
                exempt: Vec::new(),
                cors_preflight: false,
                legacy: false,
                decision_extension: false,
                expose_shared: false,
                unit: QuotaUnit::Requests,
                outage_retry_after: HeaderValue::from_static("1"),
                cost: None,
                partition_key: None,
                stats: Arc::new(Stats::default()),
            }),
            reject: DefaultReject,
        }
    }
}

impl<X: Clone, Bk: Backend, H> RateLimitLayer<X, Bk, H> {
    fn config(&mut self) -> &mut Config<X, Bk> {
        Arc::make_mut(&mut self.config)
    }

    /// Names the default policy in the headers (an sf-string, default `"default"`).
    ///
    /// # Errors
    /// [`PolicyNameError`] for a byte outside printable ASCII.
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota};
    /// use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
    /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
    ///     .try_policy_name("free")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_policy_name(mut self, name: &str) -> Result<Self, PolicyNameError> {
        let config = self.config();
        let default = config
            .policies
            .last_mut()
            .expect("the default policy is always last");
        *default = Policy::new(
            None,
            name,
            Arc::clone(&default.backend),
            default.headers.unit(),
        )?;
        Ok(self)
    }

    /// Requests whose path is `prefix` or lies below it (`/upload` matches `/upload` and
    /// `/upload/x`, not `/uploads`) are limited by `backend` under the policy `name`: one
    /// quota per route or plan. The longest matching prefix wins; other paths use the default.
    ///
    /// Paths are matched normalized, as the most lenient upstream would route them: merged
    /// slashes, percent-escapes decoded (repeatedly), dot segments resolved, `;` parameters
    /// dropped, `\` as `/`, ASCII case ignored. `//login`, `/%6Cogin`, `/LOGIN` and
    /// `/x/../login` all get `/login`'s policy.
    ///
    /// # Errors
    /// [`PolicyNameError`] for a byte outside printable ASCII in `name`.
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota};
    /// use tollgate_tower::{LocalBackend, PeerIp, RateLimitLayer};
    /// let layer = RateLimitLayer::new(PeerIp::default(), LocalBackend::<std::net::IpAddr>::try_new(Algorithm::TokenBucket, Quota::per_second(50)?)?)
    ///     .try_route("/login", "login", LocalBackend::try_new(Algorithm::SlidingLog, Quota::per_minute(5)?)?)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_route(
        mut self,
        prefix: &str,
        name: &str,
        backend: impl IntoBackend<Backend = Bk>,
    ) -> Result<Self, PolicyNameError> {
        let unit = self.config.unit;
        let prefix = crate::path::normalize(prefix);
        let policy = Policy::new(
            Some(prefix.trim_end_matches('/').into()),
            name,
            Arc::new(backend.into_backend()),
            unit,
        )?;
        let policies = &mut self.config().policies;
        policies.push(policy);
        // Longest prefix first; the default (no prefix, length -1) stays last.
        policies.sort_by_key(|p| {
            core::cmp::Reverse(p.prefix.as_ref().map_or(-1, |s| s.len() as isize))
        });
        Ok(self)
    }

    config_setters! {
        /// When the rate-limit headers are sent (default [`HeaderMode::Always`]).
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer, HeaderMode};
        /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .headers(HeaderMode::DenyOnly);
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn headers(mode: HeaderMode) => header_mode = mode;

        /// What a keyless request gets (default `MissingKey::Reject(500)`).
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{PeerIp, LocalBackend, RateLimitLayer, MissingKey};
        /// let layer = RateLimitLayer::new(PeerIp::default(), LocalBackend::<std::net::IpAddr>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .on_missing_key(MissingKey::Shared("0.0.0.0".parse().unwrap()));
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn on_missing_key(answer: MissingKey<Bk::Key>) => missing = answer;

        /// What a request gets when the backend fails (default `OnError::Reject(503)`).
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer, OnError};
        /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .on_error(OnError::Allow);
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn on_error(answer: OnError) => on_error = answer;

        /// The status for a request whose cost exceeds what the quota can ever allow (default
        /// `429`, sent without `Retry-After` since no wait helps; `413` is the other usual pick).
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
        /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .exceeds_capacity_status(http::StatusCode::PAYLOAD_TOO_LARGE);
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn exceeds_capacity_status(status: StatusCode) => exceeds = status;

        /// Shadow mode: never answer in place of the inner service; send the headers as if
        /// limiting, and count what would have been denied in [`Stats::shadow_denied`]. Keyless
        /// requests, requests naming their key twice, and requests the backend could not decide
        /// are counted ([`Stats::missing_key`], [`Stats::invalid_key`], [`Stats::errors`]) and
        /// passed too. For trying a limit on live traffic.
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
        /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .shadow(true);
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn shadow(on: bool) => shadow = on;

        /// Methods that pass uncounted and without headers (default: none, every method is
        /// counted). Replaces the list. An exempt method reaches the inner service without any
        /// limit: exempt only what the inner service answers cheaply.
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
        /// use http::Method;
        /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .exempt_methods([Method::HEAD]);
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn exempt_methods(methods: impl IntoIterator<Item = Method>)
            => exempt = methods.into_iter().collect();

        /// Lets CORS preflights pass uncounted (default off): an `OPTIONS` request carrying both
        /// `Origin` and `Access-Control-Request-Method`. Any client can send those headers, so
        /// the inner service must answer such a request cheaply (a CORS layer inside this one).
        /// Other `OPTIONS` requests are counted.
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
        /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .exempt_cors_preflight(true);
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn exempt_cors_preflight(on: bool) => cors_preflight = on;
    }

    /// Answers refused requests (denials, keyless or ambiguous keys, backend failures) with
    /// `handler`'s response instead of an empty body: a JSON or problem+json body, another
    /// status. The layer adds its rate-limit headers to it (`RateLimit` items appended,
    /// `Retry-After` unless the handler set one). The body type is the inner service's.
    ///
    /// ```
    /// use tollgate::{Algorithm, ManualClock, Quota};
    /// use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer, Rejection};
    /// use tower::{Layer, ServiceExt};
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let backend = LocalBackend::try_with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?;
    /// let app = tower::service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hi")))
    /// });
    /// let svc = RateLimitLayer::new(GlobalKey, backend)
    ///     .on_reject(|r: &Rejection<'_>| {
    ///         let mut res = http::Response::new(format!("slow down ({:?})", r.reason));
    ///         *res.status_mut() = r.status;
    ///         res
    ///     })
    ///     .layer(app);
    /// let _ = svc.clone().oneshot(http::Request::new(())).await?;
    /// let no = svc.oneshot(http::Request::new(())).await?;
    /// assert_eq!((no.status().as_u16(), no.body().as_str()), (429, "slow down (Denied)"));
    /// assert_eq!(no.headers()["retry-after"], "1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn on_reject<F>(self, handler: F) -> RateLimitLayer<X, Bk, RejectFn<F>>
    where
        F: Clone + Send + Sync + 'static,
    {
        RateLimitLayer {
            config: self.config,
            reject: RejectFn(handler),
        }
    }

    config_setters! {
        /// Adds the partition key `pk` (`:base64:`) to the `RateLimit` and `RateLimit-Policy`
        /// items, from the bytes `f` makes of the request's key: a client behind a shared
        /// address learns which quota partition it is counted in. Off by default. Send something
        /// that identifies the partition without exposing it if the key is sensitive (a hash, a
        /// tenant id, not an API key).
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{PeerIp, LocalBackend, RateLimitLayer};
        /// let layer = RateLimitLayer::new(PeerIp::default(), LocalBackend::<std::net::IpAddr>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .partition_key(|ip| ip.to_string().into_bytes());
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn partition_key(f: impl Fn(&Bk::Key) -> Vec<u8> + Send + Sync + 'static)
            => partition_key = Some(Arc::new(f));

        /// Sends the legacy `X-RateLimit-Limit`, `-Remaining`, `-Reset` (and on a denial
        /// `X-RateLimit-After`) beside the IETF fields, wherever those are sent (default off;
        /// what tower_governor's `use_headers` sends). Values the inner service set are kept.
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{PeerIp, LocalBackend, RateLimitLayer};
        /// let layer = RateLimitLayer::new(PeerIp::default(), LocalBackend::<std::net::IpAddr>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .legacy_headers(true);
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn legacy_headers(on: bool) => legacy = on;

        /// Hands each request that reaches the inner service its [`Decision`](tollgate::Decision) as a request
        /// extension (default off: an extension costs an allocation per request). A handler reads
        /// what is left of its client's quota; in shadow mode a denied decision marks a request
        /// that would have been refused.
        ///
        /// ```
        /// use tollgate::{Algorithm, Decision, ManualClock, Quota};
        /// use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
        /// use tower::{Layer, ServiceExt};
        /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
        /// let backend = LocalBackend::try_with_clock(Algorithm::TokenBucket, Quota::per_second(3)?, ManualClock::new())?;
        /// let app = tower::service_fn(|req: http::Request<()>| async move {
        ///     let left = req.extensions().get::<Decision>().map_or(0, |d| d.remaining());
        ///     Ok::<_, std::convert::Infallible>(http::Response::new(left.to_string()))
        /// });
        /// let svc = RateLimitLayer::new(GlobalKey, backend).decision_extension(true).layer(app);
        /// assert_eq!(svc.oneshot(http::Request::new(())).await?.body(), "2");
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// # }).unwrap();
        /// ```
        pub fn decision_extension(on: bool) => decision_extension = on;

        /// Sends the `RateLimit` headers even when one key stands for many clients (a
        /// [`GlobalKey`](crate::GlobalKey), a `RouteKey`, keyless requests in a
        /// [`MissingKey::Shared`] bucket). Off by default: those headers would tell every client
        /// how much of the shared quota the others used. A denial still carries `Retry-After`.
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
        /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .expose_shared_state(true);
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn expose_shared_state(on: bool) => expose_shared = on;
    }

    /// What the quotas count, announced as `qu` in `RateLimit-Policy` (default requests,
    /// not announced). Set it with a [`RateLimitLayer::cost`] that counts something else.
    /// Applies to every policy, those added before and after.
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer, QuotaUnit};
    /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(1 << 20)?)?)
    ///     .cost(tollgate_tower::content_length_cost)
    ///     .quota_unit(QuotaUnit::ContentBytes);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn quota_unit(mut self, unit: QuotaUnit) -> Self {
        let config = self.config();
        config.unit = unit;
        for p in &mut config.policies {
            if let Ok(new) = Policy::new(
                p.prefix.clone(),
                p.headers.name(),
                Arc::clone(&p.backend),
                unit,
            ) {
                *p = new;
            }
        }
        self
    }

    config_setters! {
        /// The `Retry-After` sent with the answer to a request the backend could not decide
        /// ([`OnError::Reject`], default 1 s, rounded up to whole seconds).
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
        /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
        ///     .outage_retry_after(std::time::Duration::from_secs(5));
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn outage_retry_after(wait: core::time::Duration)
            => outage_retry_after = HeaderValue::from(crate::headers::ceil_secs(wait));

        /// A request's cost in units of the quota (default 1), e.g. by its declared body size
        /// ([`content_length_cost`]). A cost above the quota's capacity is refused with
        /// [`RateLimitLayer::exceeds_capacity_status`].
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
        /// // A quota of 1 MiB per second, counted in KiB.
        /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(1024)?)?)
        ///     .cost(|parts| tollgate_tower::content_length_cost(parts).div_ceil(1024).max(1));
        /// # Ok::<(), tollgate::KeyedError>(())
        /// ```
        pub fn cost(f: impl Fn(&http::request::Parts) -> u64 + Send + Sync + 'static)
            => cost = Some(Arc::new(f));
    }

    /// The counters shared by this layer and all its services.
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
    /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?);
    /// let stats = layer.stats();
    /// assert_eq!(stats.errors(), 0);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.config.stats)
    }
}

/// The request's `Content-Length` in bytes, 0 when absent or unreadable: a cost function for
/// byte quotas (see [`RateLimitLayer::cost`]). A missing length is cost 0 here; combine with
/// `.max(1)` to count every request.
///
/// ```
/// let (parts, ()) = http::Request::builder().header("content-length", "2048").body(()).unwrap().into_parts();
/// assert_eq!(tollgate_tower::content_length_cost(&parts), 2048);
/// ```
pub fn content_length_cost(parts: &http::request::Parts) -> u64 {
    parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl<S, X: Clone, Bk: Backend, H: Clone> Layer<S> for RateLimitLayer<X, Bk, H> {
    type Service = RateLimit<S, X, Bk, H>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            ready: false,
            config: Arc::clone(&self.config),
            reject: self.reject.clone(),
        }
    }
}
