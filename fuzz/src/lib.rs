//! Fuzz targets for tollgate, as a library: the same `run(data)` is called by libFuzzer
//! (`fuzz_targets/*.rs`, one line each, `cargo +nightly fuzz run <target>`) and by the stable
//! replay of the committed corpus (`cargo test --manifest-path fuzz/Cargo.toml`).
//!
//! | target           | what it checks                                                          |
//! |------------------|-------------------------------------------------------------------------|
//! | `quota`          | every `Quota` constructor on arbitrary numbers: a value or a typed error, never a panic; an accepted quota builds every limiter, which then survives arbitrary operations |
//! | `token_bucket`   | `TokenBucket` = `MutexTokenBucket` = [`model::TokenBucketModel`] on every decision and refund; at most `burst + rate × elapsed` admitted; retrying after `retry_after` passes, one ns earlier does not |
//! | `fixed_window`   | the same against [`model::FixedWindowModel`]; at most `limit` per aligned window |
//! | `sliding_window` | the same against [`model::SlidingWindowModel`]; at most `limit` in any window of length `period` |
//! | `sliding_log`    | the same against [`model::SlidingLogModel`]; at most `limit` in any window of length `period` |
//! | `keyed_table`    | `KeyedTable` (token bucket or fixed window, 300 keys in a table of 256 slots, either `WhenFull`, clock back and forth) = the slots holding mutex twins, searched from each key's home, with the table's rules for taking unused and idle slots spelled out, on every decision and `len()`, on two clocks of different zeros (its own [`keyed_table::TableOp`]s) |
//! | `leased`         | `Leased` (up to 4 virtual threads, give-backs, thread exits) vs `MutexTokenBucket`: every admission within burst + rate × time + `max_overshoot()` over each stretch of non-decreasing readings; give-backs never above the burst; at most the burst at one instant (its own [`leased::LeasedOp`]s) |
//! | `keyed`          | `KeyedLimiter` (any algorithm, plans, `evict_idle`, optionally bounded, optionally `live()` with `SetQuota`) = a `HashMap` of mutex twins (live: of the `live` target's models, carried over every change) on every decision, eviction count, `len()` and change (its own [`keyed::KeyedOp`]s) |
//! | `live`           | `LiveTokenBucket`, `LiveFixedWindow`, `LiveSlidingWindow` = the model of their algorithm, carried over every `set_quota` as `Live` documents, on every decision, peek and refund; a refused change has the model's typed error and keeps `quota()` and the level; `quota()` reports every accepted one (its own [`live::LiveOp`]s) |
//! | `sketch`         | `SketchLimiter` (1–8 columns, both forms, clock back and forth): per key never more admitted units than the exact `KeyedLimiter`; every admission fits the key's own exact count of what the sketch admitted, and no decision is optimistic against it; `peek` = the request (its own [`sketch::SketchOp`]s) |
//! | `sketch_hybrid`  | `HybridSketchLimiter` (1–8 columns, 0–7 exact entries, any promotion threshold, clock forward): the `sketch` target's checks on every decision, per key never more than the exact `KeyedLimiter` (the [`sketch::SketchOp`]s, steps back skipped) |
//!
//! Every target decodes its input with `arbitrary` into a quota and a list of operations
//! ([`Op`]): `Advance`, `StepBack` (the clock going backwards), `Acquire(n)`, the two
//! retry probes, `Refund(n)` and `Overtaken` (a call decided on a reading older than a
//! request that overtook it). Time is a [`tollgate::ManualClock`]: nothing sleeps.

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use tollgate::{Decision, Quota};

mod differential;
pub mod invariants;
pub mod keyed;
pub mod keyed_table;
pub mod leased;
pub mod live;
pub mod model;
pub mod quota;
pub mod sketch;
pub mod sketch_hybrid;
pub mod stream;

pub use differential::{fixed_window, sliding_log, sliding_window, token_bucket};

/// The limiters' time horizon (2^58 ns): past it, time stands still. Restated from the
/// documentation (`tollgate` keeps its constant private).
pub const HORIZON: u64 = 1 << 58;

/// Operations a target decodes from its input: at most this many (longer inputs are cut).
pub const MAX_OPS: usize = 400;

/// A number drawn mostly small (where the edges are dense), sometimes anywhere in `u64`.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Num {
    /// 0..=255.
    Tiny(u8),
    /// 0..=65535.
    Small(u16),
    /// Around a power of two: `2^k + delta - 128`, saturating (limits of the packed words).
    NearPow2 {
        /// The exponent, mod 64.
        k: u8,
        /// The offset, shifted by -128.
        delta: u8,
    },
    /// Anything.
    Any(u64),
}

impl Num {
    /// The value.
    pub fn get(self) -> u64 {
        match self {
            Num::Tiny(v) => u64::from(v),
            Num::Small(v) => u64::from(v),
            Num::NearPow2 { k, delta } => (1u64 << (k % 64))
                .saturating_add(u64::from(delta))
                .saturating_sub(128),
            Num::Any(v) => v,
        }
    }
}

/// A span of time, often relative to the quota's period so that window edges are hit.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Span {
    /// A few ns: one-off edges.
    Ns(u8),
    /// `period × num / (den + 1)`: fractions and multiples of the period.
    Period {
        /// Numerator.
        num: u8,
        /// Denominator minus one.
        den: u8,
    },
    /// Any number of ns (past the horizon, up to `u64::MAX`).
    Any(Num),
}

impl Span {
    /// The span in ns, for a quota of `period_ns`.
    pub fn nanos(self, period_ns: u64) -> u64 {
        match self {
            Span::Ns(v) => u64::from(v),
            Span::Period { num, den } => {
                let ns = u128::from(period_ns) * u128::from(num) / (u128::from(den) + 1);
                u64::try_from(ns).unwrap_or(u64::MAX)
            }
            Span::Any(n) => n.get(),
        }
    }
}

/// A cost.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Cost {
    /// One unit, the common case.
    One,
    /// Zero: always allowed, takes nothing.
    Zero,
    /// A number, often around the limit.
    Num(Num),
}

impl Cost {
    /// The cost in units.
    pub fn units(self) -> u64 {
        match self {
            Cost::One => 1,
            Cost::Zero => 0,
            Cost::Num(n) => n.get(),
        }
    }
}

/// One step of a scenario.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Op {
    /// The clock moves forward (saturating at `u64::MAX` ns).
    Advance(Span),
    /// The clock moves backward (saturating at zero).
    StepBack(Span),
    /// Ask for `n` units.
    Acquire(Cost),
    /// If the last request was denied with a `retry_after`, wait exactly that long and ask
    /// again for the same cost: it must pass.
    RetryAfter,
    /// If the last request was denied with a `retry_after` of at least 1 ns, wait 1 ns less
    /// and ask again: it must still be denied (the wait is minimal).
    RetryJustBefore,
    /// `refund(n)`: every limiter gives back what the model does.
    Refund(Cost),
    /// A request overtaken between its clock reading and its write: it reads the clock, the
    /// clock moves on by `by` and `others` units are asked for at the later reading, and only
    /// then is it decided (a refund of `cost` if `refund`, else a request of `cost`) on its
    /// older reading. The clock stays at the later reading. A limiter reads the clock once
    /// per call, so the stream runs the later request first and the overtaken one with the
    /// clock set back.
    Overtaken {
        /// How far the clock moves on meanwhile.
        by: Span,
        /// The request that overtakes it.
        others: Cost,
        /// Whether the overtaken call is a refund.
        refund: bool,
        /// Its cost.
        cost: Cost,
    },
}

/// A quota as numbers, before validation.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct QuotaSpec {
    /// Requests per period.
    pub limit: Num,
    /// The period in ns.
    pub period_ns: Num,
    /// The burst, if set.
    pub burst: Option<Num>,
    /// The sliding window's slots, `1 + s % 4096` if set, else the default 8 (the other
    /// targets ignore it).
    pub slots: Option<u16>,
}

impl QuotaSpec {
    /// The quota, if tollgate accepts these numbers.
    pub fn build(&self) -> Option<Quota> {
        let quota =
            Quota::try_new(self.limit.get(), Duration::from_nanos(self.period_ns.get())).ok()?;
        match self.burst {
            Some(b) => quota.with_burst(b.get()).ok(),
            None => Some(quota),
        }
    }
}

impl QuotaSpec {
    /// The sliding window's slot count: always in `1..=MAX_SLOTS`.
    pub fn slots(&self) -> u32 {
        self.slots.map_or(tollgate::DEFAULT_SLOTS, |s| {
            1 + u32::from(s) % tollgate::MAX_SLOTS
        })
    }
}

/// A decision, field by field, so that models (which cannot build a `Decision`) compare
/// with `assert_eq!`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Admitted.
    pub allowed: bool,
    /// Units left after the decision.
    pub remaining: u64,
    /// ns until the same request would pass; `None` for an admission, a cost above
    /// capacity, or a pass beyond the horizon.
    pub retry_after_ns: Option<u64>,
    /// ns until back to full capacity.
    pub reset_after_ns: u64,
    /// The cost can never pass.
    pub exceeds_capacity: bool,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("a decision's durations fit in u64 ns")
}

impl From<Decision> for Outcome {
    fn from(d: Decision) -> Outcome {
        Outcome {
            allowed: d.is_allowed(),
            remaining: d.remaining(),
            retry_after_ns: d.retry_after().map(nanos),
            reset_after_ns: nanos(d.reset_after()),
            exceeds_capacity: d.exceeds_capacity(),
        }
    }
}

impl Outcome {
    /// An admission leaving `remaining`, full again in `reset` ns.
    pub fn allowed(remaining: u64, reset: u64) -> Outcome {
        Outcome {
            allowed: true,
            remaining,
            retry_after_ns: None,
            reset_after_ns: reset,
            exceeds_capacity: false,
        }
    }

    /// A denial at `now_ns` of a request that passes at `pass_at` (never, if past the
    /// horizon, where time stands still).
    pub fn denied(remaining: u64, now_ns: u64, pass_at: u64, reset: u64) -> Outcome {
        Outcome {
            allowed: false,
            remaining,
            retry_after_ns: (pass_at <= HORIZON).then(|| pass_at.saturating_sub(now_ns)),
            reset_after_ns: reset,
            exceeds_capacity: false,
        }
    }

    /// A cost above capacity.
    pub fn exceeds(remaining: u64, reset: u64) -> Outcome {
        Outcome {
            allowed: false,
            remaining,
            retry_after_ns: None,
            reset_after_ns: reset,
            exceeds_capacity: true,
        }
    }
}

/// Where a second copy of the limiters under test finds its clock's zero: far before its
/// start, at a magnitude picked from a hash of the input (not decoded from it, so that the
/// committed corpus keeps its meaning), and a multiple of `grain` (the window or slot length
/// a window limiter aligns its start to). The copy's clock reads `offset + now` where the
/// first copy's reads `now`: every decision must be the same, up to and past the horizon of
/// the limiters' own time. At most `u64::MAX - HORIZON`, so that a saturated reading is past
/// the horizon for both.
///
/// | hash % 4 | magnitude                                              |
/// |----------|--------------------------------------------------------|
/// | 0        | `SystemTime` now: 1.76 × 10^18 ns since 1970, and some |
/// | 1        | just below 2^58 (the horizon as an absolute reading)   |
/// | 2        | around 2^63 (a counter that has run for centuries)     |
/// | 3        | anywhere up to `u64::MAX - HORIZON`                    |
pub fn clock_offset(data: &[u8], grain: u64) -> u64 {
    // FNV-1a: any spread will do.
    let h = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let low = h >> 8;
    let off = match h % 4 {
        0 => 1_760_000_000_000_000_000 + low % (1 << 50),
        1 => HORIZON - low % (1 << 40),
        2 => (1 << 63) + low % (1 << 50),
        _ => low % (u64::MAX - HORIZON),
    };
    off - off % grain.max(1)
}

/// Decodes a target's settings `S` (a tuple of several in the order they are read), then up to
/// [`MAX_OPS`] operations from the rest: they end where the bytes run out or an operation
/// cannot be decoded. `None` if the bytes run out before the settings are complete.
pub(crate) fn settings_and_ops<'a, S: Arbitrary<'a>, T: Arbitrary<'a>>(
    data: &'a [u8],
) -> Option<(S, Vec<T>)> {
    let mut u = Unstructured::new(data);
    let settings = S::arbitrary(&mut u).ok()?;
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS && !u.is_empty() {
        match T::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    Some((settings, ops))
}

/// Decodes a quota and up to [`MAX_OPS`] operations; `None` if the bytes run out before the
/// quota is complete.
pub fn decode(data: &[u8]) -> Option<(QuotaSpec, Vec<Op>)> {
    settings_and_ops(data)
}

/// A step back of `back` ns from `now` (the limiters' own time, ns since they were made) on a
/// clock that reads `offset + now`: `now` saturates at 0, and the returned reading of the
/// offset clock goes below `offset` by what `now` could not (before the limiters' origin,
/// which they must read as the origin).
pub(crate) fn step_back(now: &mut u64, back: u64, offset: u64) -> u64 {
    let reading = if back > *now {
        offset.saturating_sub(back - *now)
    } else {
        offset.saturating_add(*now - back)
    };
    *now = now.saturating_sub(back);
    reading
}

/// Runs the named target on one input (for the corpus replay).
///
/// # Panics
/// On an unknown target, or wherever the target finds a bug.
pub fn run(target: &str, data: &[u8]) {
    match target {
        "quota" => quota::run(data),
        "token_bucket" => token_bucket::run(data),
        "fixed_window" => fixed_window::run(data),
        "sliding_window" => sliding_window::run(data),
        "sliding_log" => sliding_log::run(data),
        "keyed" => keyed::run(data),
        "keyed_table" => keyed_table::run(data),
        "leased" => leased::run(data),
        "live" => live::run(data),
        "sketch" => sketch::run(data),
        "sketch_hybrid" => sketch_hybrid::run(data),
        _ => panic!("unknown fuzz target {target}"),
    }
}

/// Every target, by name (the names of `fuzz_targets/*.rs`).
pub const TARGETS: [&str; 11] = [
    "quota",
    "token_bucket",
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "keyed",
    "keyed_table",
    "leased",
    "live",
    "sketch",
    "sketch_hybrid",
];
