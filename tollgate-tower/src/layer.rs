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
use core::future::Future;
use core::mem;
use core::pin::Pin;
use core::sync::atomic::{AtomicU64, Ordering};
use core::task::{Context, Poll, Waker};
use std::sync::{Arc, Mutex};

use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, Method, Request, Response, StatusCode};
use tollgate::{Decision, Quota};
use tower::{Layer, Service};

use crate::backend::{Backend, IntoBackend};
use crate::headers::{PolicyHeaders, PolicyNameError, QuotaUnit, RateLimitHeaders};
use crate::key::{KeyError, KeyExtractor};

/// When the `RateLimit` / `RateLimit-Policy` headers are sent.
///
/// ```
/// use tollgate_tower::HeaderMode;
/// assert_eq!(HeaderMode::default(), HeaderMode::Always);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeaderMode {
    /// On every counted response (the default).
    #[default]
    Always,
    /// Only on denials (429 / `RESOURCE_EXHAUSTED`): admissions stay untouched.
    DenyOnly,
    /// Never (`Retry-After` is still sent on a denial).
    Never,
}

/// What a request without a key gets (see [`KeyExtractor`]).
///
/// The default is `Reject(500)`: a missing key means the server is set up wrong (for instance
/// a peer-address extractor without the connection's address), and a loud error finds that
/// sooner than a silent pass. Such requests are counted in [`Stats::missing_key`].
///
/// ```
/// use tollgate_tower::MissingKey;
/// let shared: MissingKey<std::net::IpAddr> = MissingKey::Shared("0.0.0.0".parse().unwrap());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MissingKey<K> {
    /// Answer with this status (gRPC: `INTERNAL`) and an empty body.
    Reject(StatusCode),
    /// Let the request through uncounted.
    Allow,
    /// Count it against this one key: all keyless requests share a bucket.
    Shared(K),
}

/// What a request gets when the backend cannot decide (an unreachable store, a timeout).
///
/// ```
/// assert_eq!(tollgate_tower::OnError::default(), tollgate_tower::OnError::Reject(http::StatusCode::SERVICE_UNAVAILABLE));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Fail closed: answer with this status (gRPC: `UNAVAILABLE`). The default, `503`.
    Reject(StatusCode),
    /// Fail open: let the request through uncounted.
    Allow,
}

impl Default for OnError {
    fn default() -> Self {
        OnError::Reject(StatusCode::SERVICE_UNAVAILABLE)
    }
}

/// Counters shared by every clone of one layer. Admissions are not counted (that would put
/// a shared write on every request); everything else is.
///
/// ```
/// use tollgate::{Algorithm, Quota};
/// use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
/// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?);
/// assert_eq!(layer.stats().denied(), 0);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Default)]
pub struct Stats {
    denied: AtomicU64,
    shadow_denied: AtomicU64,
    missing_key: AtomicU64,
    invalid_key: AtomicU64,
    errors: AtomicU64,
}

impl Stats {
    /// Requests answered with a denial.
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().denied(), 0);
    /// ```
    pub fn denied(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.denied.load(Ordering::Relaxed)
    }

    /// Requests a shadow-mode layer let through that it would have denied.
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().shadow_denied(), 0);
    /// ```
    pub fn shadow_denied(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.shadow_denied.load(Ordering::Relaxed)
    }

    /// Requests without a key (whatever [`MissingKey`] then did with them).
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().missing_key(), 0);
    /// ```
    pub fn missing_key(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.missing_key.load(Ordering::Relaxed)
    }

    /// Requests refused (or, in shadow mode, passed) for naming their key more than once
    /// ([`KeyError::Ambiguous`]).
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().invalid_key(), 0);
    /// ```
    pub fn invalid_key(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.invalid_key.load(Ordering::Relaxed)
    }

    /// Requests the backend could not decide (whatever [`OnError`] then did with them).
    ///
    /// ```
    /// assert_eq!(tollgate_tower::Stats::default().errors(), 0);
    /// ```
    pub fn errors(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.errors.load(Ordering::Relaxed)
    }

    fn bump(counter: &AtomicU64) {
        // Relaxed: an independent counter; readers need no ordering with other memory.
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The cost of a request in units of its quota (see [`RateLimitLayer::cost`]).
type CostFn = dyn Fn(&http::request::Parts) -> u64 + Send + Sync;

/// The `pk` bytes of a key (see [`RateLimitLayer::partition_key`]).
type PartitionFn<K> = dyn Fn(&K) -> Vec<u8> + Send + Sync;

struct Policy<Bk> {
    /// `None` for the default policy.
    prefix: Option<Box<str>>,
    backend: Arc<Bk>,
    /// Rendered for the backend's quota when the policy was made.
    headers: Arc<PolicyHeaders>,
    /// Rendered for the quota in force, once a live backend's quota has changed.
    changed: Arc<Mutex<Option<Arc<PolicyHeaders>>>>,
}

impl<Bk> Clone for Policy<Bk> {
    fn clone(&self) -> Self {
        Policy {
            prefix: self.prefix.clone(),
            backend: Arc::clone(&self.backend),
            headers: Arc::clone(&self.headers),
            changed: Arc::clone(&self.changed),
        }
    }
}

impl<Bk: Backend> Policy<Bk> {
    fn new(
        prefix: Option<Box<str>>,
        name: &str,
        backend: Arc<Bk>,
        unit: QuotaUnit,
    ) -> Result<Self, PolicyNameError> {
        let headers = Arc::new(PolicyHeaders::try_with_unit(name, &backend.quota(), unit)?);
        Ok(Policy {
            prefix,
            backend,
            headers,
            changed: Arc::default(),
        })
    }

    /// Runs `f` on the headers of the quota in force: the ones rendered up front unless a
    /// live backend's quota changed since (then rendered once per change, under a lock that
    /// only such policies take).
    #[inline]
    fn with_headers<T>(&self, f: impl FnOnce(&PolicyHeaders) -> T) -> T {
        let quota = self.backend.quota();
        if quota == self.headers.quota() {
            return f(&self.headers);
        }
        self.with_changed(quota, f)
    }

    #[cold]
    fn with_changed<T>(&self, quota: Quota, f: impl FnOnce(&PolicyHeaders) -> T) -> T {
        let current = {
            let mut slot = self.changed.lock().unwrap_or_else(|e| e.into_inner());
            match &*slot {
                Some(h) if h.quota() == quota => Arc::clone(h),
                _ => {
                    // The name was checked when the policy was made.
                    let (name, unit) = (self.headers.name(), self.headers.unit());
                    let h = match PolicyHeaders::try_with_unit(name, &quota, unit) {
                        Ok(h) => Arc::new(h),
                        Err(_) => return f(&self.headers),
                    };
                    *slot = Some(Arc::clone(&h));
                    h
                }
            }
        };
        f(&current)
    }
}

struct Config<X, Bk: Backend> {
    extractor: X,
    /// Route policies, longest prefix first, then the default policy last.
    policies: Vec<Policy<Bk>>,
    header_mode: HeaderMode,
    missing: MissingKey<Bk::Key>,
    on_error: OnError,
    exceeds: StatusCode,
    shadow: bool,
    exempt: Vec<Method>,
    cors_preflight: bool,
    legacy: bool,
    decision_extension: bool,
    /// Send `RateLimit` headers for keys shared by many clients.
    expose_shared: bool,
    unit: QuotaUnit,
    outage_retry_after: HeaderValue,
    cost: Option<Arc<CostFn>>,
    partition_key: Option<Arc<PartitionFn<Bk::Key>>>,
    stats: Arc<Stats>,
}

impl<X: Clone, Bk: Backend> Clone for Config<X, Bk> {
    fn clone(&self) -> Self {
        Config {
            extractor: self.extractor.clone(),
            policies: self.policies.clone(),
            header_mode: self.header_mode,
            missing: self.missing.clone(),
            on_error: self.on_error,
            exceeds: self.exceeds,
            shadow: self.shadow,
            exempt: self.exempt.clone(),
            cors_preflight: self.cors_preflight,
            legacy: self.legacy,
            decision_extension: self.decision_extension,
            expose_shared: self.expose_shared,
            unit: self.unit,
            outage_retry_after: self.outage_retry_after.clone(),
            cost: self.cost.clone(),
            partition_key: self.partition_key.clone(),
            stats: Arc::clone(&self.stats),
        }
    }
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
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct RateLimitLayer<X, Bk: Backend, H = DefaultReject> {
    config: Arc<Config<X, Bk>>,
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
    /// # Ok::<(), tollgate::QuotaError>(())
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

    /// When the rate-limit headers are sent (default [`HeaderMode::Always`]).
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer, HeaderMode};
    /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
    ///     .headers(HeaderMode::DenyOnly);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn headers(mut self, mode: HeaderMode) -> Self {
        self.config().header_mode = mode;
        self
    }

    /// What a keyless request gets (default `MissingKey::Reject(500)`).
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use tollgate_tower::{PeerIp, LocalBackend, RateLimitLayer, MissingKey};
    /// let layer = RateLimitLayer::new(PeerIp::default(), LocalBackend::<std::net::IpAddr>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
    ///     .on_missing_key(MissingKey::Shared("0.0.0.0".parse().unwrap()));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn on_missing_key(mut self, answer: MissingKey<Bk::Key>) -> Self {
        self.config().missing = answer;
        self
    }

    /// What a request gets when the backend fails (default `OnError::Reject(503)`).
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer, OnError};
    /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
    ///     .on_error(OnError::Allow);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn on_error(mut self, answer: OnError) -> Self {
        self.config().on_error = answer;
        self
    }

    /// The status for a request whose cost exceeds what the quota can ever allow (default
    /// `429`, sent without `Retry-After` since no wait helps; `413` is the other usual pick).
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
    /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
    ///     .exceeds_capacity_status(http::StatusCode::PAYLOAD_TOO_LARGE);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn exceeds_capacity_status(mut self, status: StatusCode) -> Self {
        self.config().exceeds = status;
        self
    }

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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn shadow(mut self, on: bool) -> Self {
        self.config().shadow = on;
        self
    }

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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn exempt_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.config().exempt = methods.into_iter().collect();
        self
    }

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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn exempt_cors_preflight(mut self, on: bool) -> Self {
        self.config().cors_preflight = on;
        self
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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn partition_key(
        mut self,
        f: impl Fn(&Bk::Key) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.config().partition_key = Some(Arc::new(f));
        self
    }

    /// Sends the legacy `X-RateLimit-Limit`, `-Remaining`, `-Reset` (and on a denial
    /// `X-RateLimit-After`) beside the IETF fields, wherever those are sent (default off;
    /// what tower_governor's `use_headers` sends). Values the inner service set are kept.
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use tollgate_tower::{PeerIp, LocalBackend, RateLimitLayer};
    /// let layer = RateLimitLayer::new(PeerIp::default(), LocalBackend::<std::net::IpAddr>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
    ///     .legacy_headers(true);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.config().legacy = on;
        self
    }

    /// Hands each request that reaches the inner service its [`Decision`] as a request
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
    pub fn decision_extension(mut self, on: bool) -> Self {
        self.config().decision_extension = on;
        self
    }

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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn expose_shared_state(mut self, on: bool) -> Self {
        self.config().expose_shared = on;
        self
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
    /// # Ok::<(), tollgate::QuotaError>(())
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

    /// The `Retry-After` sent with the answer to a request the backend could not decide
    /// ([`OnError::Reject`], default 1 s, rounded up to whole seconds).
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
    /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
    ///     .outage_retry_after(std::time::Duration::from_secs(5));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn outage_retry_after(mut self, wait: core::time::Duration) -> Self {
        self.config().outage_retry_after = HeaderValue::from(crate::headers::ceil_secs(wait));
        self
    }

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
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn cost(
        mut self,
        f: impl Fn(&http::request::Parts) -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.config().cost = Some(Arc::new(f));
        self
    }

    /// The counters shared by this layer and all its services.
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
    /// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?);
    /// let stats = layer.stats();
    /// assert_eq!(stats.errors(), 0);
    /// # Ok::<(), tollgate::QuotaError>(())
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

/// The service [`RateLimitLayer`] wraps around `S`. `Clone`; clones share all limits.
///
/// ```
/// use tollgate::{Algorithm, ManualClock, Quota};
/// use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
/// use tower::{Layer, Service, ServiceExt};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let backend = LocalBackend::try_with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, ManualClock::new())?;
/// let hello = tower::service_fn(|_req: http::Request<()>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
/// });
/// let mut svc = RateLimitLayer::new(GlobalKey, backend).layer(hello);
/// let first = svc.ready().await?.call(http::Request::new(())).await?;
/// let second = svc.ready().await?.call(http::Request::new(())).await?;
/// assert_eq!((first.status().as_u16(), second.status().as_u16()), (200, 429));
/// assert_eq!(second.headers()["retry-after"], "1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct RateLimit<S, X, Bk: Backend, H = DefaultReject> {
    inner: S,
    /// Whether `inner` answered `poll_ready` with `Ready` since its last call.
    ready: bool,
    config: Arc<Config<X, Bk>>,
    reject: H,
}

impl<S: Clone, X, Bk: Backend, H: Clone> Clone for RateLimit<S, X, Bk, H> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            ready: false,
            config: Arc::clone(&self.config),
            reject: self.reject.clone(),
        }
    }
}

impl<S: fmt::Debug, X, Bk: Backend, H> fmt::Debug for RateLimit<S, X, Bk, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The outcome of one request before the inner service runs.
enum Verdict<R> {
    /// Call the inner service, adding these headers to its response.
    Pass(Option<RateLimitHeaders>),
    /// Answer with this response.
    Answer(Response<R>),
}

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Whether the request is gRPC, so that an answer must be a gRPC status. Asked only when the
/// layer answers itself: an admission never looks.
fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// Why the layer answers a request itself (see [`Rejection`]).
///
/// ```
/// assert_ne!(tollgate_tower::RejectReason::Denied, tollgate_tower::RejectReason::Unavailable);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// Over the quota: `429`, a retry after `Retry-After` can pass.
    Denied,
    /// A cost the quota can never allow ([`RateLimitLayer::exceeds_capacity_status`]).
    ExceedsCapacity,
    /// No key, under [`MissingKey::Reject`].
    MissingKey,
    /// The key named twice ([`KeyError::Ambiguous`]): `400`.
    AmbiguousKey,
    /// The backend could not decide, under [`OnError::Reject`].
    Unavailable,
}

/// What a [`Reject`] handler is told about a request the layer answers itself. The layer adds
/// its rate-limit headers (and `Retry-After`, unless the handler set one) to the response
/// the handler makes.
///
/// ```
/// # fn f(r: &tollgate_tower::Rejection<'_>) {
/// if let Some(d) = r.decision {
///     println!("{} over policy {}, retry in {:?}", r.status, r.policy, d.retry_after());
/// }
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Rejection<'a> {
    /// Why.
    pub reason: RejectReason,
    /// The status the layer would answer with.
    pub status: StatusCode,
    /// The backend's decision, for a denial.
    pub decision: Option<Decision>,
    /// The policy's name (the one its path selects when no key was found).
    pub policy: &'a str,
    /// Whether the request is gRPC (`content-type: application/grpc…`).
    pub grpc: bool,
    /// The request's headers.
    pub request: &'a HeaderMap,
    grpc_code: &'static str,
    message: &'static str,
}

impl Rejection<'_> {
    /// The layer's own answer: an empty body with [`Rejection::status`], or for gRPC a
    /// trailers-only status (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`, ...).
    ///
    /// ```
    /// # fn f(r: &tollgate_tower::Rejection<'_>) {
    /// let res: http::Response<String> = r.default_response();
    /// # }
    /// ```
    pub fn default_response<R: Default>(&self) -> Response<R> {
        answer(self.grpc, self.status, self.grpc_code, self.message)
    }
}

/// How the layer answers a request it refuses: status and body (see
/// [`RateLimitLayer::on_reject`]). [`DefaultReject`] answers with an empty body.
///
/// ```
/// use tollgate_tower::{Reject, Rejection};
/// #[derive(Clone)]
/// struct Json;
/// impl Reject<String> for Json {
///     fn reject(&self, r: &Rejection<'_>) -> http::Response<String> {
///         let mut res = http::Response::new(format!("{{\"error\":\"{:?}\"}}", r.reason));
///         *res.status_mut() = r.status;
///         res
///     }
/// }
/// ```
pub trait Reject<R>: Clone + Send + Sync + 'static {
    /// The response for `rejection`.
    fn reject(&self, rejection: &Rejection<'_>) -> Response<R>;
}

/// The layer's own answers: empty bodies (see [`Rejection::default_response`]).
///
/// ```
/// let _ = tollgate_tower::DefaultReject;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultReject;

impl<R: Default> Reject<R> for DefaultReject {
    #[inline]
    fn reject(&self, rejection: &Rejection<'_>) -> Response<R> {
        rejection.default_response()
    }
}

/// A closure as a [`Reject`] handler (see [`RateLimitLayer::on_reject`]).
///
/// ```
/// # use tollgate::{Algorithm, Quota};
/// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
/// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
///     .on_reject(|r: &tollgate_tower::Rejection<'_>| r.default_response::<String>());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RejectFn<F>(F);

impl<R, F> Reject<R> for RejectFn<F>
where
    F: Fn(&Rejection<'_>) -> Response<R> + Clone + Send + Sync + 'static,
{
    fn reject(&self, rejection: &Rejection<'_>) -> Response<R> {
        (self.0)(rejection)
    }
}

/// An empty-bodied answer: `status` for HTTP, a trailers-only gRPC status for gRPC.
fn answer<R: Default>(
    grpc: bool,
    status: StatusCode,
    grpc_code: &'static str,
    message: &'static str,
) -> Response<R> {
    let mut res = Response::new(R::default());
    if grpc {
        let h = res.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        h.insert(GRPC_STATUS, HeaderValue::from_static(grpc_code));
        h.insert(GRPC_MESSAGE, HeaderValue::from_static(message));
    } else {
        *res.status_mut() = status;
    }
    res
}

impl<X, Bk: Backend> Config<X, Bk> {
    /// The index of the policy for a request to `uri`, matched on its normalized path.
    #[inline]
    fn policy(&self, uri: &http::Uri) -> usize {
        if self.policies.len() == 1 {
            return 0; // the default policy alone: no path to look at
        }
        let path = crate::path::normalize(uri.path());
        self.policies
            .iter()
            .position(|p| match &p.prefix {
                None => true,
                Some(prefix) => crate::path::under(&path, prefix),
            })
            .unwrap_or(self.policies.len() - 1)
    }

    /// The decision to hand the inner service as a request extension, if asked for.
    #[inline]
    fn handed<E>(&self, result: &Result<Decision, E>) -> Option<Decision> {
        if self.decision_extension {
            result.as_ref().ok().copied()
        } else {
            None
        }
    }

    /// The header mode for a key of this kind: none for a shared key unless exposed.
    #[inline]
    fn mode(&self, shared: bool) -> HeaderMode {
        if shared && !self.expose_shared {
            HeaderMode::Never
        } else {
            self.header_mode
        }
    }

    /// Whether `req` passes uncounted: an exempt method, or an allowed CORS preflight.
    #[inline]
    fn exempt<B>(&self, req: &Request<B>) -> bool {
        if !self.exempt.is_empty() && self.exempt.contains(req.method()) {
            return true;
        }
        self.cors_preflight
            && req.method() == Method::OPTIONS
            && req.headers().contains_key(http::header::ORIGIN)
            && req
                .headers()
                .contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
    }

    /// What the backend's answer (or failure) means for the request with headers `req`.
    #[inline]
    fn verdict<R, E, H: Reject<R>>(
        &self,
        policy: usize,
        req: &HeaderMap,
        result: Result<Decision, E>,
        shared: bool,
        reject: &H,
        pk: Option<&[u8]>,
    ) -> Verdict<R> {
        match result {
            // The common case, inline: an admission without headers renders and counts nothing.
            Ok(d) if d.is_allowed() && self.mode(shared) != HeaderMode::Always => {
                Verdict::Pass(None)
            }
            result => self.full_verdict(policy, req, result, shared, reject, pk),
        }
    }

    /// [`Config::verdict`] for every other outcome: headers to render, a denial, an error.
    #[allow(clippy::too_many_arguments)]
    fn full_verdict<R, E, H: Reject<R>>(
        &self,
        policy: usize,
        req: &HeaderMap,
        result: Result<Decision, E>,
        shared: bool,
        reject: &H,
        pk: Option<&[u8]>,
    ) -> Verdict<R> {
        let mode = self.mode(shared);
        let name = self.policies[policy].headers.name();
        let decision = match result {
            Ok(d) => d,
            Err(_) => {
                Stats::bump(&self.stats.errors);
                return match self.on_error {
                    OnError::Reject(status) if !self.shadow => {
                        let mut res = reject.reject(&Rejection {
                            reason: RejectReason::Unavailable,
                            status,
                            decision: None,
                            policy: name,
                            grpc: is_grpc(req),
                            request: req,
                            grpc_code: "14",
                            message: "rate limiter unavailable",
                        });
                        if let http::header::Entry::Vacant(e) =
                            res.headers_mut().entry(http::header::RETRY_AFTER)
                        {
                            e.insert(self.outage_retry_after.clone());
                        }
                        Verdict::Answer(res)
                    }
                    _ => Verdict::Pass(None),
                };
            }
        };
        let policy = &self.policies[policy];
        let render = |d: &Decision| {
            policy.with_headers(|h| {
                let mut r = h.render(d);
                if self.legacy {
                    r = r.with_legacy(h);
                }
                if let Some(pk) = pk {
                    r = r.with_partition_key(pk);
                }
                r
            })
        };
        if decision.is_allowed() {
            return Verdict::Pass(match mode {
                HeaderMode::Always => Some(render(&decision)),
                HeaderMode::DenyOnly | HeaderMode::Never => None,
            });
        }
        let mut rendered = render(&decision);
        if self.shadow {
            Stats::bump(&self.stats.shadow_denied);
            rendered.retry_after = None;
            if let Some(l) = &mut rendered.legacy {
                l.after = None;
            }
            return Verdict::Pass((mode != HeaderMode::Never).then_some(rendered));
        }
        Stats::bump(&self.stats.denied);
        let (status, reason) = if decision.exceeds_capacity() {
            (self.exceeds, RejectReason::ExceedsCapacity)
        } else {
            (StatusCode::TOO_MANY_REQUESTS, RejectReason::Denied)
        };
        let mut res = reject.reject(&Rejection {
            reason,
            status,
            decision: Some(decision),
            policy: name,
            grpc: is_grpc(req),
            request: req,
            grpc_code: "8",
            message: "rate limit exceeded",
        });
        if mode == HeaderMode::Never {
            if let Some(r) = rendered.retry_after {
                if let http::header::Entry::Vacant(e) =
                    res.headers_mut().entry(http::header::RETRY_AFTER)
                {
                    e.insert(r);
                }
            }
        } else {
            rendered.apply(res.headers_mut());
        }
        Verdict::Answer(res)
    }
}

impl<S, X, Bk, H, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S, X, Bk, H>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    X: KeyExtractor<ReqB, Key = Bk::Key>,
    Bk: Backend,
    H: Reject<ResB>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB, X, Bk, H>;

    /// Always ready unless the inner service failed: a denial never waits for the inner
    /// service. The inner service's readiness is polled here and remembered; an admitted
    /// request that finds it not ready waits for it inside its response future.
    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if !self.ready {
            match self.inner.poll_ready(cx) {
                Poll::Ready(Ok(())) => self.ready = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let config = &*self.config;
        if config.exempt(&req) {
            return self.pass(req, None);
        }
        let mut shared = config.extractor.is_shared();
        let key = match config.extractor.extract_key(&req) {
            Ok(key) => key,
            Err(KeyError::Ambiguous) => {
                Stats::bump(&config.stats.invalid_key);
                if config.shadow {
                    return self.pass(req, None);
                }
                return ResponseFuture::answer(self.reject.reject(&Rejection {
                    reason: RejectReason::AmbiguousKey,
                    status: StatusCode::BAD_REQUEST,
                    decision: None,
                    policy: config.policies[config.policy(req.uri())].headers.name(),
                    grpc: is_grpc(req.headers()),
                    request: req.headers(),
                    grpc_code: "3",
                    message: "ambiguous rate-limit key",
                }));
            }
            Err(KeyError::Missing) => {
                Stats::bump(&config.stats.missing_key);
                match &config.missing {
                    MissingKey::Allow => return self.pass(req, None),
                    MissingKey::Reject(_) if config.shadow => return self.pass(req, None),
                    MissingKey::Reject(status) => {
                        let policy = &config.policies[config.policy(req.uri())];
                        return ResponseFuture::answer(self.reject.reject(&Rejection {
                            reason: RejectReason::MissingKey,
                            status: *status,
                            decision: None,
                            policy: policy.headers.name(),
                            grpc: is_grpc(req.headers()),
                            request: req.headers(),
                            grpc_code: "13",
                            message: "no rate-limit key",
                        }));
                    }
                    MissingKey::Shared(key) => {
                        shared = true;
                        key.clone()
                    }
                }
            }
        };
        // The request stays where it is unless a cost function needs its parts: a request is
        // a few hundred bytes, and every move of it is a copy.
        let cost = match &config.cost {
            None => 1,
            Some(f) => {
                let (parts, body) = req.into_parts();
                let cost = f(&parts);
                req = Request::from_parts(parts, body);
                cost
            }
        };
        let policy = config.policy(req.uri());
        let mut decision = config.policies[policy].backend.try_acquire(&key, cost);
        // An in-process backend is ready now: decide without a wake-up or a service clone.
        match Pin::new(&mut decision).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(result) => {
                let handed = config.handed(&result);
                let pk = config.partition_key.as_ref().map(|f| f(&key));
                let pk = pk.as_deref();
                match config.verdict(policy, req.headers(), result, shared, &self.reject, pk) {
                    Verdict::Pass(headers) => {
                        if let Some(d) = handed {
                            req.extensions_mut().insert(d);
                        }
                        self.pass(req, headers)
                    }
                    Verdict::Answer(res) => ResponseFuture::answer(res),
                }
            }
            Poll::Pending => {
                let pk = config.partition_key.as_ref().map(|f| f(&key));
                let (service, ready) = self.take_service();
                ResponseFuture {
                    state: State::Deciding {
                        decision,
                        // Boxed: only remote decisions wait, and a small future is cheaper to
                        // move on every other request.
                        waiting: Some(Box::new(Waiting {
                            req,
                            service,
                            ready,
                            config: Arc::clone(&self.config),
                            policy,
                            shared,
                            reject: self.reject.clone(),
                            pk,
                        })),
                    },
                }
            }
        }
    }
}

impl<S: Clone, X, Bk: Backend, H> RateLimit<S, X, Bk, H> {
    /// The inner service for a response future, and whether it is ready: this service keeps
    /// a fresh clone (not ready).
    fn take_service(&mut self) -> (S, bool) {
        let clone = self.inner.clone();
        (
            mem::replace(&mut self.inner, clone),
            mem::take(&mut self.ready),
        )
    }

    /// Hands `req` to the inner service: at once if it is ready, else through a response
    /// future that waits for it.
    #[inline]
    fn pass<ReqB>(
        &mut self,
        req: Request<ReqB>,
        headers: Option<RateLimitHeaders>,
    ) -> ResponseFuture<S, ReqB, X, Bk, H>
    where
        S: Service<Request<ReqB>>,
    {
        // Ready since `poll_ready`, or ready now (a caller that skipped `poll_ready`, an inner
        // service that became ready since): call it in place, no clone.
        if mem::take(&mut self.ready)
            || matches!(
                self.inner
                    .poll_ready(&mut Context::from_waker(Waker::noop())),
                Poll::Ready(Ok(()))
            )
        {
            return ResponseFuture::inner(self.inner.call(req), headers);
        }
        let (service, _) = self.take_service();
        ResponseFuture::readying(service, req, headers)
    }
}

/// A request waiting for an asynchronous backend's decision.
struct Waiting<S, ReqB, X, Bk: Backend, H> {
    req: Request<ReqB>,
    service: S,
    /// Whether `service` is ready.
    ready: bool,
    config: Arc<Config<X, Bk>>,
    policy: usize,
    shared: bool,
    reject: H,
    pk: Option<Vec<u8>>,
}

/// An admitted request waiting for the inner service to be ready.
struct Readying<S, ReqB> {
    service: S,
    req: Request<ReqB>,
    headers: Option<RateLimitHeaders>,
}

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`].
    pub struct ResponseFuture<S, ReqB, X, Bk, H>
    where
        S: Service<Request<ReqB>>,
        Bk: Backend,
    {
        #[pin]
        state: State<S, ReqB, X, Bk, H>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, X, Bk, H>
    where
        S: Service<Request<ReqB>>,
        Bk: Backend,
    {
        Inner { #[pin] future: S::Future, headers: Option<RateLimitHeaders> },
        Answer { response: Option<S::Response> },
        Deciding { decision: Bk::Future, waiting: Option<Box<Waiting<S, ReqB, X, Bk, H>>> },
        // Boxed: only a request that finds the inner service busy waits here.
        Readying { waiting: Option<Box<Readying<S, ReqB>>> },
    }
}

impl<S: Service<Request<ReqB>>, ReqB, X, Bk: Backend, H> ResponseFuture<S, ReqB, X, Bk, H> {
    fn inner(future: S::Future, headers: Option<RateLimitHeaders>) -> Self {
        ResponseFuture {
            state: State::Inner { future, headers },
        }
    }

    fn answer(response: S::Response) -> Self {
        ResponseFuture {
            state: State::Answer {
                response: Some(response),
            },
        }
    }

    fn readying(service: S, req: Request<ReqB>, headers: Option<RateLimitHeaders>) -> Self {
        ResponseFuture {
            state: State::Readying {
                waiting: Some(Box::new(Readying {
                    service,
                    req,
                    headers,
                })),
            },
        }
    }
}

impl<S: Service<Request<ReqB>>, ReqB, X, Bk: Backend, H> fmt::Debug
    for ResponseFuture<S, ReqB, X, Bk, H>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, ReqB, X, Bk, H, ResB> Future for ResponseFuture<S, ReqB, X, Bk, H>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    Bk: Backend,
    H: Reject<ResB>,
{
    type Output = Result<Response<ResB>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Inner { future, headers } => {
                    if headers.is_none() {
                        // Nothing to add: the inner response passes through without a move.
                        return future.poll(cx);
                    }
                    let mut res = match future.poll(cx) {
                        Poll::Ready(Ok(res)) => res,
                        other => return other,
                    };
                    if let Some(h) = headers.take() {
                        h.apply(res.headers_mut());
                    }
                    return Poll::Ready(Ok(res));
                }
                StateProj::Answer { response } => {
                    let res = response.take().expect("polled after completion");
                    return Poll::Ready(Ok(res));
                }
                StateProj::Readying { waiting } => {
                    let w = waiting.as_mut().expect("polled after completion");
                    match w.service.poll_ready(cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => return Poll::Pending,
                    }
                    let Readying {
                        mut service,
                        req,
                        headers,
                    } = *waiting.take().expect("polled after completion");
                    let next = State::Inner {
                        future: service.call(req),
                        headers,
                    };
                    this.state.set(next);
                }
                StateProj::Deciding { decision, waiting } => {
                    let result = match Pin::new(decision).poll(cx) {
                        Poll::Ready(r) => r,
                        Poll::Pending => return Poll::Pending,
                    };
                    let mut w = *waiting.take().expect("polled after completion");
                    let handed = w.config.handed(&result);
                    let verdict = w.config.verdict(
                        w.policy,
                        w.req.headers(),
                        result,
                        w.shared,
                        &w.reject,
                        w.pk.as_deref(),
                    );
                    if let (Some(d), Verdict::Pass(_)) = (handed, &verdict) {
                        w.req.extensions_mut().insert(d);
                    }
                    let next = match verdict {
                        Verdict::Pass(headers) if w.ready => {
                            let mut service = w.service;
                            State::Inner {
                                future: service.call(w.req),
                                headers,
                            }
                        }
                        Verdict::Pass(headers) => State::Readying {
                            waiting: Some(Box::new(Readying {
                                service: w.service,
                                req: w.req,
                                headers,
                            })),
                        },
                        Verdict::Answer(res) => State::Answer {
                            response: Some(res),
                        },
                    };
                    this.state.set(next);
                }
            }
        }
    }
}
