//! [`ResponseFuture`]: a request waiting for a remote decision, for a busy inner service,
//! or for the inner service's response.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use http::{Request, Response};
use tower::Service;

use crate::backend::Backend;
use crate::config::Config;
use crate::headers::RateLimitHeaders;
use crate::reject::Reject;
use crate::verdict::Verdict;

/// A request waiting for an asynchronous backend's decision.
pub(crate) struct Waiting<S, ReqB, X, Bk: Backend, H> {
    pub(crate) req: Request<ReqB>,
    pub(crate) service: S,
    /// Whether `service` is ready.
    pub(crate) ready: bool,
    pub(crate) config: Arc<Config<X, Bk>>,
    pub(crate) policy: usize,
    pub(crate) shared: bool,
    pub(crate) reject: H,
    pub(crate) pk: Option<Vec<u8>>,
}

/// An admitted request waiting for the inner service to be ready.
pub(crate) struct Readying<S, ReqB> {
    pub(crate) service: S,
    pub(crate) req: Request<ReqB>,
    pub(crate) headers: Option<RateLimitHeaders>,
}

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`].
    pub struct ResponseFuture<S, ReqB, X, Bk, H>
    where
        S: Service<Request<ReqB>>,
        Bk: Backend,
    {
        #[pin]
        pub(crate) state: State<S, ReqB, X, Bk, H>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    pub(crate) enum State<S, ReqB, X, Bk, H>
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
    pub(crate) fn inner(future: S::Future, headers: Option<RateLimitHeaders>) -> Self {
        ResponseFuture {
            state: State::Inner { future, headers },
        }
    }

    pub(crate) fn answer(response: S::Response) -> Self {
        ResponseFuture {
            state: State::Answer {
                response: Some(response),
            },
        }
    }

    pub(crate) fn readying(
        service: S,
        req: Request<ReqB>,
        headers: Option<RateLimitHeaders>,
    ) -> Self {
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
