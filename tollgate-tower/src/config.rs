//! The layer's settings and its policies: what a request is limited by, and how the pieces
//! that do not depend on the backend's answer (the policy for a path, exemptions, the header
//! mode for a key) are chosen.

use std::sync::{Arc, Mutex};

use http::header::HeaderValue;
use http::{Method, Request, StatusCode};
use tollgate::{Decision, Quota};

use crate::backend::Backend;
use crate::headers::{PolicyHeaders, PolicyNameError, QuotaUnit};
use crate::observe::{Outcome, PolicyCounters};
use crate::stats::Stats;

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

/// What a request without a key gets (see [`KeyExtractor`](crate::KeyExtractor)).
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

/// The cost of a request in units of its quota (see [`RateLimitLayer::cost`]).
pub(crate) type CostFn = dyn Fn(&http::request::Parts) -> u64 + Send + Sync;

/// The `pk` bytes of a key (see [`RateLimitLayer::partition_key`]).
pub(crate) type PartitionFn<K> = dyn Fn(&K) -> Vec<u8> + Send + Sync;

pub(crate) struct Policy<Bk> {
    /// `None` for the default policy.
    pub(crate) prefix: Option<Box<str>>,
    pub(crate) backend: Arc<Bk>,
    /// Rendered for the backend's quota when the policy was made.
    pub(crate) headers: Arc<PolicyHeaders>,
    /// Rendered for the quota in force, once a live backend's quota has changed.
    pub(crate) changed: Arc<Mutex<Option<Arc<PolicyHeaders>>>>,
    /// The policy's `metrics` handles (nothing without the feature).
    pub(crate) counters: Arc<PolicyCounters>,
}

impl<Bk> Clone for Policy<Bk> {
    fn clone(&self) -> Self {
        Policy {
            prefix: self.prefix.clone(),
            backend: Arc::clone(&self.backend),
            headers: Arc::clone(&self.headers),
            changed: Arc::clone(&self.changed),
            counters: Arc::clone(&self.counters),
        }
    }
}

impl<Bk: Backend> Policy<Bk> {
    pub(crate) fn new(
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
            counters: Arc::default(),
        })
    }

    /// Counts `outcome` under this policy (with the `metrics` feature; else nothing).
    #[inline]
    pub(crate) fn count(&self, outcome: Outcome) {
        self.counters.count(self.headers.name(), outcome);
    }

    /// Runs `f` on the headers of the quota in force: the ones rendered up front unless a
    /// live backend's quota changed since (then rendered once per change, under a lock that
    /// only such policies take).
    #[inline]
    pub(crate) fn with_headers<T>(&self, f: impl FnOnce(&PolicyHeaders) -> T) -> T {
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

pub(crate) struct Config<X, Bk: Backend> {
    pub(crate) extractor: X,
    /// Route policies, longest prefix first, then the default policy last.
    pub(crate) policies: Vec<Policy<Bk>>,
    pub(crate) header_mode: HeaderMode,
    pub(crate) missing: MissingKey<Bk::Key>,
    pub(crate) on_error: OnError,
    pub(crate) exceeds: StatusCode,
    pub(crate) shadow: bool,
    pub(crate) exempt: Vec<Method>,
    pub(crate) cors_preflight: bool,
    pub(crate) legacy: bool,
    pub(crate) decision_extension: bool,
    /// Send `RateLimit` headers for keys shared by many clients.
    pub(crate) expose_shared: bool,
    pub(crate) unit: QuotaUnit,
    pub(crate) outage_retry_after: HeaderValue,
    pub(crate) cost: Option<Arc<CostFn>>,
    pub(crate) partition_key: Option<Arc<PartitionFn<Bk::Key>>>,
    pub(crate) stats: Arc<Stats>,
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

impl<X, Bk: Backend> Config<X, Bk> {
    /// The index of the policy for a request to `uri`, matched on its normalized path.
    #[inline]
    pub(crate) fn policy(&self, uri: &http::Uri) -> usize {
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

    /// Reports a request without a usable key (`metrics` counter, `tracing` event) under the
    /// policy its path selects; nothing without those features.
    #[inline]
    pub(crate) fn note_keyless(&self, uri: &http::Uri, outcome: Outcome, reason: &'static str) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        {
            let policy = &self.policies[self.policy(uri)];
            policy.count(outcome);
            crate::observe::keyless(policy.headers.name(), reason);
        }
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let _ = (uri, outcome, reason);
    }

    /// The decision to hand the inner service as a request extension, if asked for.
    #[inline]
    pub(crate) fn handed<E>(&self, result: &Result<Decision, E>) -> Option<Decision> {
        if self.decision_extension {
            result.as_ref().ok().copied()
        } else {
            None
        }
    }

    /// The header mode for a key of this kind: none for a shared key unless exposed.
    #[inline]
    pub(crate) fn mode(&self, shared: bool) -> HeaderMode {
        if shared && !self.expose_shared {
            HeaderMode::Never
        } else {
            self.header_mode
        }
    }

    /// Whether `req` passes uncounted: an exempt method, or an allowed CORS preflight.
    #[inline]
    pub(crate) fn exempt<B>(&self, req: &Request<B>) -> bool {
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
}
