//! How the layer answers a request it refuses itself: [`Reject`] handlers, what they are told
//! ([`Rejection`]), and the empty-bodied HTTP or gRPC default.

use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, Response, StatusCode};
use tollgate::Decision;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Whether the request is gRPC, so that an answer must be a gRPC status. Asked only when the
/// layer answers itself: an admission never looks.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
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
    /// A cost the quota can never allow ([`RateLimitLayer::exceeds_capacity_status`](crate::RateLimitLayer::exceeds_capacity_status)).
    ExceedsCapacity,
    /// No key, under [`MissingKey::Reject`](crate::MissingKey::Reject).
    MissingKey,
    /// The key named twice ([`KeyError::Ambiguous`](crate::KeyError::Ambiguous)): `400`.
    AmbiguousKey,
    /// The backend could not decide, under [`OnError::Reject`](crate::OnError::Reject).
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
    pub(crate) grpc_code: &'static str,
    pub(crate) message: &'static str,
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
/// [`RateLimitLayer::on_reject`](crate::RateLimitLayer::on_reject)). [`DefaultReject`] answers with an empty body.
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

/// A closure as a [`Reject`] handler (see [`RateLimitLayer::on_reject`](crate::RateLimitLayer::on_reject)).
///
/// ```
/// # use tollgate::{Algorithm, Quota};
/// # use tollgate_tower::{GlobalKey, LocalBackend, RateLimitLayer};
/// let layer = RateLimitLayer::new(GlobalKey, LocalBackend::<()>::try_new(Algorithm::TokenBucket, Quota::per_second(5)?)?)
///     .on_reject(|r: &tollgate_tower::Rejection<'_>| r.default_response::<String>());
/// # Ok::<(), tollgate::KeyedError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RejectFn<F>(pub(crate) F);

impl<R, F> Reject<R> for RejectFn<F>
where
    F: Fn(&Rejection<'_>) -> Response<R> + Clone + Send + Sync + 'static,
{
    fn reject(&self, rejection: &Rejection<'_>) -> Response<R> {
        (self.0)(rejection)
    }
}

/// An empty-bodied answer: `status` for HTTP, a trailers-only gRPC status for gRPC.
pub(crate) fn answer<R: Default>(
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
