//! What the layer reports beyond [`Stats`](crate::Stats): counters through the `metrics`
//! facade (feature `metrics`) and `tracing` events (feature `tracing`). Without either
//! feature everything here compiles to nothing.
//!
//! # Counters (`metrics`)
//!
//! | name                                | labels              | counts                            |
//! |-------------------------------------|---------------------|-----------------------------------|
//! | `tollgate_tower_decisions_total`    | `policy`, `outcome` | requests the backend decided: `outcome` is `allowed`, `denied` (a capacity-exceeding cost included) or `shadow_denied` |
//! | `tollgate_tower_missing_key_total`  | `policy`            | requests without a key, whatever [`MissingKey`](crate::MissingKey) did with them |
//! | `tollgate_tower_invalid_key_total`  | `policy`            | requests naming their key twice    |
//! | `tollgate_tower_backend_errors_total` | `policy`          | requests the backend could not decide, whatever [`OnError`](crate::OnError) did with them |
//!
//! `policy` is the policy's name: `"default"` (or [`RateLimitLayer::try_policy_name`]'s) or a
//! route's ([`RateLimitLayer::try_route`]); for a keyless or ambiguous request, the policy its
//! path selects. Each policy registers its handles with the global recorder the first time it
//! counts, so a recorder installed before the first request sees every count; after that, one
//! count is an atomic load and the recorder's increment.
//!
//! # Events (`tracing`)
//!
//! Target `tollgate_tower`: a DEBUG event per denial (`policy`, `status`, `remaining`,
//! `retry_after_ms`, `exceeds_capacity`), per shadow denial (the same, `shadow = true`), per
//! keyless or ambiguous request (`policy`, `reason`); a WARN event per backend error
//! (`policy`, `error`).
//!
//! [`RateLimitLayer::try_policy_name`]: crate::RateLimitLayer::try_policy_name
//! [`RateLimitLayer::try_route`]: crate::RateLimitLayer::try_route

/// What one counted request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    ShadowDenied,
    MissingKey,
    InvalidKey,
    BackendError,
}

#[cfg(feature = "metrics")]
mod counters {
    use std::sync::OnceLock;

    use metrics::{counter, describe_counter, Counter};

    use super::Outcome;

    const DECISIONS: &str = "tollgate_tower_decisions_total";
    const MISSING_KEY: &str = "tollgate_tower_missing_key_total";
    const INVALID_KEY: &str = "tollgate_tower_invalid_key_total";
    const BACKEND_ERRORS: &str = "tollgate_tower_backend_errors_total";

    /// One policy's handles, one per [`Outcome`].
    struct Handles([Counter; 6]);

    /// A policy's counters, registered with the global recorder on first use.
    #[derive(Default)]
    pub(crate) struct PolicyCounters(OnceLock<Handles>);

    impl PolicyCounters {
        #[inline]
        pub(crate) fn count(&self, policy: &str, outcome: Outcome) {
            self.0.get_or_init(|| Handles::register(policy)).0[outcome as usize].increment(1);
        }
    }

    impl Handles {
        #[cold]
        fn register(policy: &str) -> Handles {
            static DESCRIBED: OnceLock<()> = OnceLock::new();
            DESCRIBED.get_or_init(|| {
                describe_counter!(
                    DECISIONS,
                    "Requests the rate limiter decided, by policy and outcome."
                );
                describe_counter!(MISSING_KEY, "Requests without a rate-limit key.");
                describe_counter!(INVALID_KEY, "Requests naming their rate-limit key twice.");
                describe_counter!(
                    BACKEND_ERRORS,
                    "Requests the rate limiter's backend could not decide."
                );
            });
            let p = policy.to_owned();
            let decided = |outcome: &'static str| counter!(DECISIONS, "policy" => p.clone(), "outcome" => outcome);
            // In `Outcome` order.
            Handles([
                decided("allowed"),
                decided("denied"),
                decided("shadow_denied"),
                counter!(MISSING_KEY, "policy" => p.clone()),
                counter!(INVALID_KEY, "policy" => p.clone()),
                counter!(BACKEND_ERRORS, "policy" => p),
            ])
        }
    }
}

#[cfg(feature = "metrics")]
pub(crate) use counters::PolicyCounters;

/// Without the `metrics` feature: counts nothing, holds nothing.
#[cfg(not(feature = "metrics"))]
#[derive(Default)]
pub(crate) struct PolicyCounters;

#[cfg(not(feature = "metrics"))]
impl PolicyCounters {
    #[inline(always)]
    pub(crate) fn count(&self, _policy: &str, _outcome: Outcome) {}
}

/// A `tracing` event for a request the layer denied (or, with `shadow`, would have).
#[inline]
pub(crate) fn denial(
    _policy: &str,
    _status: http::StatusCode,
    _decision: &tollgate::Decision,
    _shadow: bool,
) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "tollgate_tower",
        policy = _policy,
        status = _status.as_u16(),
        remaining = _decision.remaining(),
        retry_after_ms = _decision
            .retry_after()
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        exceeds_capacity = _decision.exceeds_capacity(),
        shadow = _shadow,
        "rate limit denial"
    );
}

/// A `tracing` event for a request without a usable key (`reason`: missing or ambiguous).
#[cfg(any(feature = "metrics", feature = "tracing"))]
#[inline]
pub(crate) fn keyless(_policy: &str, _reason: &'static str) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "tollgate_tower", policy = _policy, reason = _reason, "rate limit key");
}

/// A `tracing` event for a request the backend could not decide.
#[inline]
pub(crate) fn backend_error(_policy: &str, _error: &dyn std::error::Error) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        target: "tollgate_tower",
        policy = _policy,
        error = %_error,
        "rate limit backend error"
    );
}
