//! [`RateLimit`], the service [`RateLimitLayer`](crate::RateLimitLayer) makes: per request,
//! exemptions, the key, the backend's decision, and the hand-off to the inner service.

use core::fmt;
use core::future::Future;
use core::mem;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use tower::Service;

use crate::backend::Backend;
use crate::config::{Config, MissingKey};
use crate::future::{ResponseFuture, State, Waiting};
use crate::headers::RateLimitHeaders;
use crate::key::{KeyError, KeyExtractor};
use crate::observe::Outcome;
use crate::reject::{is_grpc, DefaultReject, Reject, RejectReason, Rejection};
use crate::stats::Stats;
use crate::verdict::Verdict;

/// The service [`RateLimitLayer`](crate::RateLimitLayer) wraps around `S`. `Clone`; clones share all limits.
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
    pub(crate) inner: S,
    /// Whether `inner` answered `poll_ready` with `Ready` since its last call.
    pub(crate) ready: bool,
    pub(crate) config: Arc<Config<X, Bk>>,
    pub(crate) reject: H,
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
                config.note_keyless(req.uri(), Outcome::InvalidKey, "ambiguous");
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
                config.note_keyless(req.uri(), Outcome::MissingKey, "missing");
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
