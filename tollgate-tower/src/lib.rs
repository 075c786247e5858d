//! # tollgate-tower
//!
//! Per-client rate limits for [tower] services — axum routers, hyper 1 servers, tonic — on
//! tollgate's lock-free limiters, answering with the IETF `RateLimit` / `RateLimit-Policy`
//! headers (draft-ietf-httpapi-ratelimit-headers) and `Retry-After`.
//!
//! ## Quick start
//!
//! ```
//! use axum::{routing::get, Router};
//! use tollgate::{Algorithm, Quota};
//! use tollgate_tower::{LocalBackend, RateLimitLayer, TrustedProxy};
//!
//! // 100 requests per minute per client, behind the load balancer 10.0.0.7 (trust its
//! // address, not its network).
//! let clients = LocalBackend::try_new(Algorithm::SlidingWindow, Quota::per_minute(100)?)?;
//! let layer = RateLimitLayer::new(TrustedProxy::new(["10.0.0.7/32".parse()?]), clients);
//! let app: Router = Router::new().route("/", get(|| async { "hi" })).layer(layer);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - [`RateLimitLayer`] / [`RateLimit`]: one shared state behind an `Arc` for every clone; a
//!   denial is an immediate `429` (gRPC: `RESOURCE_EXHAUSTED`), never a `Pending` that holds
//!   the connection; per-route policies, a cost function, exempt methods, shadow mode.
//! - Keys ([`KeyExtractor`]): [`GlobalKey`], [`PeerIp`], [`TrustedProxy`] (rightmost
//!   untrusted hop of `X-Forwarded-For` / `Forwarded`, only from trusted peers), IPv6 grouped
//!   per /64 by default ([`Grouping`]), [`HeaderKey`], `RouteKey` (axum), closures
//!   ([`key_fn`]) and pairs.
//! - Decisions from a [`Backend`]: in process, [`LocalBackend`] over a `KeyedLimiter` or
//!   [`KeyedBackend`] over any `tollgate::KeyedLimit` (a fixed-memory `SketchLimiter`); with the `redis` feature,
//!   `RedisBackend` over a `tollgate_redis::RedisLimiter` (one limit shared by every
//!   instance, the same layer with an async decision).
//! - Observability: [`Stats`] always; with the `metrics` feature, counters through the
//!   [`metrics`](https://docs.rs/metrics) facade for any exporter
//!   (`tollgate_tower_decisions_total{policy, outcome}`, missing and invalid keys, backend
//!   errors); with the `tracing` feature, an event per denial, keyless request and backend
//!   error (target `tollgate_tower`).
//! - [`PolicyHeaders`]: the header values from a [`tollgate::Decision`], for other servers.
#![warn(missing_docs)]
// docs.rs (nightly): each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod future;
mod headers;
mod key;
mod layer;
mod net;
mod observe;
mod path;
#[cfg(feature = "redis")]
mod redis;
mod reject;
mod service;
mod stats;
mod verdict;

pub use backend::{Backend, IntoBackend, KeyedBackend, LocalBackend};
pub use config::{HeaderMode, MissingKey, OnError};
pub use future::ResponseFuture;
pub use headers::{
    ceil_secs, stated_policy, LegacyHeaders, PolicyHeaders, PolicyNameError, QuotaUnit,
    RateLimitHeaders, RATELIMIT, RATELIMIT_POLICY,
};
#[cfg(feature = "axum")]
pub use key::RouteKey;
pub use key::{
    key_fn, peer_addr, FnKey, ForwardedHeader, GlobalKey, Grouping, HeaderKey, KeyError,
    KeyExtractor, PeerAddr, PeerIp, RealIp, TrustedProxy,
};
pub use layer::{content_length_cost, RateLimitLayer};
pub use net::{IpNet, NetError};
#[cfg(feature = "redis")]
pub use redis::{RedisBackend, RedisDecision, RedisKey};
pub use reject::{DefaultReject, Reject, RejectFn, RejectReason, Rejection};
pub use service::RateLimit;
pub use stats::Stats;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
