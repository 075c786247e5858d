//! # tollgate
//!
//! Lock-free, high-throughput rate limiters for the hot path of proxies and load balancers.
//!
//! ## Quick start
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
//!
//! // 5 requests per second, bursts of 5; time from a manual clock, as in tests (in production,
//! // `TokenBucket::new(quota)` reads the default monotonic clock).
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::with_clock(Quota::per_second(5)?, clock.clone());
//! let passed = (0..10).filter(|_| limiter.try_acquire().is_allowed()).count();
//! assert_eq!(passed, 5);
//!
//! let denied = limiter.try_acquire();
//! assert_eq!(denied.retry_after(), Some(Duration::from_millis(200)));
//! clock.advance(Duration::from_millis(200));
//! assert!(limiter.try_acquire().is_allowed());
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! ## The limiters
//!
//! | limiter           | semantics                                              | state                 |
//! |-------------------|--------------------------------------------------------|-----------------------|
//! | [`TokenBucket`]   | GCRA: bursts up to `burst`, then `limit/period`, exact | one `AtomicU64`       |
//! | [`FixedWindow`]   | `limit` per window `[k·period, (k+1)·period)`          | one `AtomicU64`       |
//! | [`SlidingWindow`] | `limit` per any `period`, counted in `K` slots         | `K + 2` `AtomicU64`s  |
//! | [`SlidingLog`]    | exact: an admission counts while `now - s < period`    | `limit` `AtomicU64`s  |
//!
//! Each answers through the [`Limiter`] trait with a [`Decision`]: allowed or not, how many
//! remain, when to retry, when the limiter is full again. All four are one generic
//! [`RateLimiter`] over their algorithm. Each has a mutex twin in [`baseline`], written
//! independently, for differential tests and benchmarks.
//!
//! Per client (IP, API key, route): [`KeyedLimiter`] keeps one limiter per key in a concurrent
//! map, made on the key's first request with the map's quota or the key's plan
//! ([`KeyedLimiter::try_acquire_with`]), evicts keys back to their fresh state
//! ([`KeyedLimiter::evict_idle`]), and can bound its size ([`KeyedBuilder`]).
//!
//! A flood of keys in fixed memory: [`SketchLimiter`] counts every key in a sketch of atomic
//! counters sized at construction (no allocation, sweep or eviction), never admitting more
//! for a key than the exact map would; its only error is a false denial.
//! [`HybridSketchLimiter`] adds a fixed table of exact entries for the heaviest keys, so that
//! they stop causing false denials of the keys sharing their lanes. All answer through the
//! [`KeyedLimit`] trait, the keyed [`Limiter`].
//!
//! One hot key on many threads: [`Leased`] wraps a [`TokenBucket`] so that threads spend small
//! pre-paid leases with no shared write, within a documented `max_overshoot()` of the exact bucket.
//!
//! ## The API at a glance
//!
//! | for | names |
//! |---|---|
//! | one limit | [`TokenBucket`], [`FixedWindow`], [`SlidingWindow`], [`SlidingLog`]: each a [`RateLimiter`] over an [`Algo`] (sealed; [`AlwaysFits`] for the three that fit every quota); the [`Limiter`] trait; [`Quota`] and its [`QuotaError`]; [`Decision`] |
//! | one limit per key | [`KeyedLimiter`] (from a [`KeyedBuilder`]: [`Algorithm`], [`WhenFull`], [`KeyHasher`]; [`KeyedError`]), its [`KeyedPin`]; in fixed memory [`SketchLimiter`] ([`SketchSize`], [`SizeError`]) and [`HybridSketchLimiter`]; the [`KeyedLimit`] trait |
//! | several limits at once | [`Limits`] of [`Member`]s ([`LimitsError`], [`MAX_MEMBERS`]) |
//! | one hot key | [`Leased`] with a [`Lease`] ([`LeaseError`]) |
//! | quotas that change while running | [`Live`] over a [`Retune`] (sealed): [`LiveTokenBucket`], [`LiveFixedWindow`], [`LiveSlidingWindow`]; a keyed map's `live()` |
//! | time | the [`Clock`] trait: [`MonotonicClock`], [`CoarseClock`], [`ManualClock`] |
//! | waiting instead of denying | [`Wait`] ([`UntilReady`], [`Pacing`], [`WaitError`]) on a [`Timer`] / [`Sleep`]: [`ThreadSleep`], [`ManualSleep`], `TokioTimer` |
//! | counting decisions | [`Metered`], its [`MetricsSnapshot`]; [`Observed`] |
//! | configuration | `"5000/h burst 200"` parsed into a [`Quota`] ([`ParseQuotaError`], [`ParseQuotaErrorKind`], [`QuotaPart`]); with `serde`, `KeyedSettings` |
//! | the sliding window's slots, the sketch's columns | [`DEFAULT_SLOTS`], [`MAX_SLOTS`], [`MAX_COLUMNS`] |
//! | tests and benchmarks | the mutex twins in [`baseline`] |
//!
//! ## Guarantees
//!
//! - **Exact at one instant**: N threads racing at a frozen time admit exactly
//!   `min(N, what is left)`; no interleaving lets an extra request through.
//! - **Denials write nothing** to shared memory: a flood of rejected requests stays read-only.
//! - **No overflow, no wrap, no panic** on any input a [`Quota`] accepts, at any clock reading,
//!   including a clock that steps backwards (never an extra admission from it).
//! - **Lock-free** on every hot path except [`SlidingLog`]'s admissions, which serialize on a
//!   per-limiter sequence lock (its denials stay lock-free and read-only).
//!
//! Time comes from a [`Clock`]: [`MonotonicClock`] (quanta's TSC, made monotone) by default,
//! [`CoarseClock`] for cheaper 1 ms-precision reads, [`ManualClock`] for tests that never sleep.
//!
//! ## Without std
//!
//! With `default-features = false` the four limiters, [`Quota`], [`Decision`], [`Clock`] and
//! [`ManualClock`] build on `no_std` + `alloc` (the sliding window's ring and the sliding log's
//! entries are allocated once). The std clocks, the mutex twins and `std::error::Error` need
//! the `std` feature; without it a limiter takes its clock explicitly (`with_clock`), e.g. your
//! own [`Clock`] over a hardware timer. 64-bit atomics come from `portable-atomic`: native on
//! 64-bit targets, lock-based where the target has no 64-bit compare-and-swap (thumbv7em,
//! riscv32imc: see the README's platform table); on a target without any compare-and-swap (riscv32imc, thumbv6m) enable the `critical-section` feature and
//! link a critical-section implementation.
//!
//! ## Features
//!
//! | feature            | what it adds                                                                |
//! |--------------------|-----------------------------------------------------------------------------|
//! | `std` (default)    | the std clocks, [`KeyedLimiter`], [`Leased`], [`Limits`], live quotas, metrics, waiting, the mutex twins |
//! | `critical-section` | atomics inside a critical section, for targets without compare-and-swap      |
//! | `serde`            | `Serialize`/`Deserialize` for [`Quota`]; with `std`, the keyed map's settings |
//! | `tokio`            | `TokioTimer`: `until_ready(n).await` on tokio's timer (implies `std`)        |
//! | `tracing`          | a `tracing` event (target `tollgate`, level DEBUG) for every denial a [`Metered`] limiter makes (implies `std`) |
#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]
// docs.rs (nightly): each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs link to the std-only items (MonotonicClock, baseline); without std those links
// have no target, and only then.
#![cfg_attr(not(feature = "std"), allow(rustdoc::broken_intra_doc_links))]
#![warn(missing_docs)]

// The sliding window's ring and the sliding log's entries are boxed slices, with or without std.
extern crate alloc;

mod algo;
mod clock;
mod config;
mod decision;
mod limiter;
mod quota;
mod sync;

#[cfg(feature = "std")]
pub mod baseline;
#[cfg(feature = "std")]
mod group;
#[cfg(feature = "std")]
mod keyed;
#[cfg(feature = "std")]
mod leased;
#[cfg(feature = "std")]
mod live;
#[cfg(feature = "std")]
mod metrics;
#[cfg(feature = "std")]
mod sketch;
#[cfg(feature = "std")]
mod wait;

/// The internals the loom models and their planted mutants (`loom-tests/`) build on; loom
/// builds only, not part of the API.
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::algo::sealed::Sealed;
    pub use crate::algo::{update, Algo, Step};
    /// The leased bucket's protocol without thread-local storage, and its planted bugs.
    #[cfg(feature = "std")]
    pub use crate::leased::loom_model::{LeaseHolder, LeaseModel};
    #[cfg(feature = "std")]
    pub use crate::leased::Planted;
    pub use crate::limiter::RateLimiter;
    pub use crate::quota::{GcraParams, WindowParams};
    pub use loom::sync::atomic::{fence, AtomicU64, Ordering};

    /// The keyed slot protocols, sound and planted.
    #[cfg(feature = "std")]
    pub use crate::keyed::loom::{StatePlant, StateSlotModel, WordPlant, WordSlotModel};

    /// The `Limits` group, sound or with a planted bug (in a rollback, a refund, or the sliding
    /// head's load).
    #[cfg(feature = "std")]
    pub use crate::group::loom_model::{
        planted_any_slot_rollback, planted_relaxed_sliding_head, planted_stale_refund,
        planted_store_rollback, planted_whole_charge_rollback, GroupModel,
    };
    /// One key of a live keyed token bucket map, sound and planted.
    #[cfg(feature = "std")]
    pub use crate::keyed::live_loom::{KeyedLiveModel, KeyedLivePlant};
    /// The keyed table (two buckets, one stripe), sound and planted.
    #[cfg(feature = "std")]
    pub use crate::keyed::table_loom::{TableModel, TablePlant};
    #[cfg(feature = "std")]
    pub use crate::live::loom_model::{CellModel, LiveModel, LivePlant};
    /// The hybrid sketch (one column, one exact entry), sound and planted.
    #[cfg(feature = "std")]
    pub use crate::sketch::hybrid_loom::{HybridModel, HybridPlant};
    /// One column of the fixed-memory keyed sketch, sound and planted.
    #[cfg(feature = "std")]
    pub use crate::sketch::loom_model::{SketchCellModel, SketchPlant};

    /// Copies of the refund helpers with a planted defect each.
    pub use crate::algo::planted;
    /// The token bucket's algorithm and pure functions.
    pub mod token_bucket {
        pub use crate::algo::token_bucket::{
            admit_at, allowed, decide, decide_at, refused, ticks, Gcra,
        };
    }
    /// The fixed window's algorithm and pure decision.
    pub mod fixed_window {
        pub use crate::algo::fixed_window::{decide, Fixed};
    }
    /// The sliding window's algorithm, geometry, state and pure decision.
    pub mod sliding_window {
        pub use crate::algo::sliding_window::{
            decide_head, Geometry, Head, HeadAtomic, HeadCell, Move, Packed, Sliding, SlotRing,
        };
    }
    /// The sliding log's algorithm, parameters and state.
    pub mod sliding_log {
        pub use crate::algo::sliding_log::Log;
        pub use crate::algo::sliding_log::{LogParams, LogState, LOCKED};
    }

    /// A limiter running the algorithm `A` under `params`, reading `clock`.
    ///
    /// # Errors
    /// When `A`'s state cannot be allocated.
    pub fn limiter<A: Algo, C: crate::Clock>(
        params: A::Params,
        clock: C,
    ) -> Result<RateLimiter<A, C>, crate::QuotaError> {
        Ok(RateLimiter::from_core(
            crate::algo::Core::with_params(params)?,
            clock,
        ))
    }
}

pub use algo::{Algo, AlwaysFits};
pub use clock::{Clock, ManualClock};
#[cfg(feature = "std")]
pub use clock::{CoarseClock, MonotonicClock};
#[cfg(all(feature = "serde", feature = "std"))]
pub use config::{KeyedSettings, SettingsError};
pub use config::{ParseQuotaError, ParseQuotaErrorKind, QuotaPart};
pub use decision::Decision;
#[cfg(feature = "std")]
pub use group::{Limits, LimitsError, Member, MAX_MEMBERS};
#[cfg(feature = "std")]
pub use keyed::KeyedLimit;
#[cfg(feature = "std")]
pub use keyed::{
    Algorithm, KeyHasher, KeyedBuilder, KeyedError, KeyedLimiter, KeyedPin, KeyedTable, WhenFull,
};
#[cfg(feature = "std")]
pub use leased::{Lease, LeaseError, Leased};
pub use limiter::{FixedWindow, Limiter, RateLimiter, SlidingLog, SlidingWindow, TokenBucket};
#[cfg(feature = "std")]
pub use live::{Live, LiveFixedWindow, LiveSlidingWindow, LiveTokenBucket, Retune};
#[cfg(feature = "std")]
pub use metrics::{Metered, MetricsSnapshot, Observed};
pub use quota::{Quota, QuotaError, DEFAULT_SLOTS, MAX_SLOTS};
#[cfg(feature = "std")]
pub use sketch::{HybridSketchLimiter, SizeError, SketchLimiter, SketchSize, MAX_COLUMNS};
#[cfg(feature = "tokio")]
pub use wait::TokioTimer;
#[cfg(feature = "std")]
pub use wait::{ManualSleep, Pacing, Sleep, ThreadSleep, Timer, UntilReady, Wait, WaitError};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The examples of `docs/keyed.md`, compiled and run as doc tests.
#[cfg(all(doctest, feature = "std"))]
#[doc = include_str!("../docs/keyed.md")]
struct KeyedDocDoctests;

/// The examples of `docs/operations.md`, compiled and run as doc tests.
#[cfg(all(doctest, feature = "std"))]
#[doc = include_str!("../docs/operations.md")]
struct OperationsDocDoctests;
