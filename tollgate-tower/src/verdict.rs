//! What a backend's answer (or failure) means for a request: pass it on with these headers,
//! or answer it now.

use http::{HeaderMap, Response, StatusCode};
use tollgate::Decision;

use crate::backend::Backend;
use crate::config::{Config, HeaderMode, OnError};
use crate::headers::RateLimitHeaders;
use crate::observe::{self, Outcome};
use crate::reject::{is_grpc, Reject, RejectReason, Rejection};
use crate::stats::Stats;

/// The outcome of one request before the inner service runs.
pub(crate) enum Verdict<R> {
    /// Call the inner service, adding these headers to its response.
    Pass(Option<RateLimitHeaders>),
    /// Answer with this response.
    Answer(Response<R>),
}

impl<X, Bk: Backend> Config<X, Bk> {
    /// What the backend's answer (or failure) means for the request with headers `req`.
    #[inline]
    pub(crate) fn verdict<R, E: std::error::Error, H: Reject<R>>(
        &self,
        policy: usize,
        req: &HeaderMap,
        result: Result<Decision, E>,
        shared: bool,
        reject: &H,
        pk: Option<&[u8]>,
    ) -> Verdict<R> {
        match result {
            // The common case, inline: an admission without headers renders nothing (and
            // counts nothing but the `metrics` feature's counter).
            Ok(d) if d.is_allowed() && self.mode(shared) != HeaderMode::Always => {
                self.policies[policy].count(Outcome::Allowed);
                Verdict::Pass(None)
            }
            result => self.full_verdict(policy, req, result, shared, reject, pk),
        }
    }

    /// [`Config::verdict`] for every other outcome: headers to render, a denial, an error.
    #[allow(clippy::too_many_arguments)]
    fn full_verdict<R, E: std::error::Error, H: Reject<R>>(
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
            Err(e) => {
                Stats::bump(&self.stats.errors);
                self.policies[policy].count(Outcome::BackendError);
                observe::backend_error(name, &e);
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
            policy.count(Outcome::Allowed);
            return Verdict::Pass(match mode {
                HeaderMode::Always => Some(render(&decision)),
                HeaderMode::DenyOnly | HeaderMode::Never => None,
            });
        }
        let mut rendered = render(&decision);
        if self.shadow {
            Stats::bump(&self.stats.shadow_denied);
            policy.count(Outcome::ShadowDenied);
            observe::denial(name, StatusCode::TOO_MANY_REQUESTS, &decision, true);
            rendered.retry_after = None;
            if let Some(l) = &mut rendered.legacy {
                l.after = None;
            }
            return Verdict::Pass((mode != HeaderMode::Never).then_some(rendered));
        }
        Stats::bump(&self.stats.denied);
        policy.count(Outcome::Denied);
        let (status, reason) = if decision.exceeds_capacity() {
            (self.exceeds, RejectReason::ExceedsCapacity)
        } else {
            (StatusCode::TOO_MANY_REQUESTS, RejectReason::Denied)
        };
        observe::denial(name, status, &decision, false);
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
            if let Some(r) = rendered.retry_after
                && let http::header::Entry::Vacant(e) =
                    res.headers_mut().entry(http::header::RETRY_AFTER)
            {
                e.insert(r);
            }
        } else {
            rendered.apply(res.headers_mut());
        }
        Verdict::Answer(res)
    }
}
