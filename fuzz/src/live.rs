//! The live target: a limiter whose quota changes while it runs ([`tollgate::Live`]: the
//! token bucket, the fixed window or the sliding window, chosen by the input) and the
//! reference model of its algorithm ([`crate::model`]), on one stream of requests, peeks,
//! refunds, clock moves (forwards and back) and quota changes, on the same [`ManualClock`].
//! The model takes every change with its own `set_quota`: the level carried over as `Live`
//! documents it, in plain arithmetic.
//!
//! Checked on every step:
//! - every decision of `try_acquire_n` and of `peek` equal to the model's, all fields
//!   (a peek against the model's answer on a copy of it, which charges nothing);
//! - every `refund` giving back the model's count;
//! - every `set_quota` accepted or refused as the model says, a refusal with the model's
//!   typed error: [`QuotaError::PeriodFixed`] for a window asked for another period,
//!   [`QuotaError::RateTooHigh`] for a bucket asked for more than one token per tick or a
//!   capacity its ticks cannot hold;
//! - `quota()` after every change: the new quota if accepted, the one in force if refused;
//!   and a refused change leaves the next decision (a peek) as it was, and the model, left
//!   unchanged, goes on agreeing.
//!
//! The token bucket model is exact for every quota (not only those that tick in whole ns): it
//! reproduces the live bucket's tick, that of the first quota (`limit / gcd(limit, period)`
//! ticks per ns, at most 16), and rounds every later quota's interval up to it,
//! `ceil(period × ticks per ns / limit)` ticks.
//!
//! The quotas of the changes are drawn relative to the one in force (another limit over its
//! period, its rate scaled, its limit over another period) or from any numbers; numbers that
//! `Quota` itself refuses are the `quota` target's business and skipped here.

use std::time::Duration;

use arbitrary::Arbitrary;
use tollgate::{
    Limiter, Live, LiveFixedWindow, LiveSlidingWindow, LiveTokenBucket, ManualClock, Quota,
    QuotaError, DEFAULT_SLOTS,
};

use crate::differential::Reference;
use crate::model::{FixedWindowModel, SlidingWindowModel, TokenBucketModel};
use crate::{step_back, Cost, Num, Outcome, QuotaSpec, Span};

/// Which live limiter.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum LiveKind {
    /// `LiveTokenBucket`.
    TokenBucket,
    /// `LiveFixedWindow`.
    FixedWindow,
    /// `LiveSlidingWindow` (the default slots).
    SlidingWindow,
}

/// A quota for a change, as numbers, most of them relative to the quota in force.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum QuotaChoice {
    /// Another limit (and burst, if set) over the period in force: a window takes it.
    Limit {
        /// Requests per period.
        limit: Num,
        /// The burst, if set.
        burst: Option<Num>,
    },
    /// The limit and burst in force times `num / (den + 1)`, over the period in force: a
    /// tightened or loosened rate.
    Scaled {
        /// Numerator.
        num: u8,
        /// Denominator minus one.
        den: u8,
    },
    /// The limit in force (and a burst, if set) over a span of the period in force:
    /// `Span::Period` keeps it (`num = den + 1`) or takes a fraction or multiple of it. A
    /// window refuses any other period.
    Period {
        /// The new period, relative to the one in force.
        period: Span,
        /// The burst, if set.
        burst: Option<Num>,
    },
    /// Any numbers.
    Any(QuotaSpec),
}

impl QuotaChoice {
    /// The quota, if `Quota` accepts these numbers.
    pub fn build(&self, current: &Quota) -> Option<Quota> {
        let period_ns = nanos(current.period());
        let scale = |v: u64, num: u8, den: u8| {
            let scaled = u128::from(v) * u128::from(num) / (u128::from(den) + 1);
            u64::try_from(scaled).unwrap_or(u64::MAX)
        };
        let (limit, period_ns, burst) = match *self {
            QuotaChoice::Limit { limit, burst } => (limit.get(), period_ns, burst.map(Num::get)),
            QuotaChoice::Scaled { num, den } => (
                scale(current.limit(), num, den),
                period_ns,
                Some(scale(current.burst(), num, den)),
            ),
            QuotaChoice::Period { period, burst } => (
                current.limit(),
                period.nanos(period_ns),
                burst.map(Num::get),
            ),
            QuotaChoice::Any(spec) => return spec.build(),
        };
        let quota = Quota::try_new(limit, Duration::from_nanos(period_ns)).ok()?;
        match burst {
            Some(burst) => quota.with_burst(burst).ok(),
            None => Some(quota),
        }
    }
}

/// One step.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum LiveOp {
    /// The clock moves forward (saturating), by a span of the period in force.
    Advance(Span),
    /// The clock moves backward (saturating at zero).
    StepBack(Span),
    /// `try_acquire_n`.
    Acquire(Cost),
    /// `peek`: the decision `try_acquire_n` would give, charging nothing.
    Peek(Cost),
    /// `refund`.
    Refund(Cost),
    /// `set_quota`.
    SetQuota(QuotaChoice),
}

/// Decodes the limiter, its first quota and up to [`MAX_OPS`](crate::MAX_OPS) steps; `None` if the bytes run
/// out before the quota is complete.
pub fn decode(data: &[u8]) -> Option<((LiveKind, QuotaSpec), Vec<LiveOp>)> {
    crate::settings_and_ops(data)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("a validated period fits in u64 ns")
}

/// A live limiter, as the target drives it: [`Live`]'s own methods, for each of its three
/// public types.
trait LiveLimiter: Limiter {
    fn set_quota(&self, quota: Quota) -> Result<(), QuotaError>;
    fn quota(&self) -> Quota;
}

macro_rules! live_limiter {
    ($($limiter:ty),*) => {$(
        impl LiveLimiter for $limiter {
            fn set_quota(&self, quota: Quota) -> Result<(), QuotaError> {
                Live::set_quota(self, quota)
            }

            fn quota(&self) -> Quota {
                Live::quota(self)
            }
        }
    )*};
}

live_limiter!(
    LiveTokenBucket<ManualClock>,
    LiveFixedWindow<ManualClock>,
    LiveSlidingWindow<ManualClock>
);

/// A reference model of a live limiter: a request and a refund at a clock reading (as the
/// differential targets drive it), and a change.
trait LiveModel: Reference + Clone {
    fn set_quota(&mut self, quota: &Quota, now_ns: u64) -> Result<(), QuotaError>;
}

impl LiveModel for TokenBucketModel {
    fn set_quota(&mut self, quota: &Quota, now_ns: u64) -> Result<(), QuotaError> {
        TokenBucketModel::set_quota(self, quota, now_ns)
    }
}

/// A window's count does not depend on the instant of the change.
impl LiveModel for FixedWindowModel {
    fn set_quota(&mut self, quota: &Quota, _now_ns: u64) -> Result<(), QuotaError> {
        FixedWindowModel::set_quota(self, quota)
    }
}

/// The slots' counts do not depend on the instant of the change.
impl LiveModel for SlidingWindowModel {
    fn set_quota(&mut self, quota: &Quota, _now_ns: u64) -> Result<(), QuotaError> {
        SlidingWindowModel::set_quota(self, quota)
    }
}

/// Runs the steps on `live` (made from `first` on `clock`, which read `offset` then) and on
/// `model`, whose time is the limiter's own: ns since it was made.
fn drive(
    live: &dyn LiveLimiter,
    mut model: impl LiveModel,
    first: Quota,
    ops: &[LiveOp],
    clock: &ManualClock,
    offset: u64,
) {
    let mut quota = first;
    let mut now: u64 = 0;
    for (step, &op) in ops.iter().enumerate() {
        let period_ns = nanos(quota.period());
        match op {
            LiveOp::Advance(span) => {
                now = now.saturating_add(span.nanos(period_ns));
                clock.set(Duration::from_nanos(offset.saturating_add(now)));
            }
            LiveOp::StepBack(span) => {
                // Below the start the clock reads before the limiter's origin: as the origin.
                let reading = step_back(&mut now, span.nanos(period_ns), offset);
                clock.set(Duration::from_nanos(reading));
            }
            LiveOp::Acquire(cost) => {
                let n = cost.units();
                let got = Outcome::from(live.try_acquire_n(n));
                let expected = model.acquire(now, n);
                assert_eq!(
                    got, expected,
                    "step {step}: {n} units at {now} ns under {quota:?}"
                );
            }
            LiveOp::Peek(cost) => {
                let n = cost.units();
                let got = Outcome::from(live.peek(n));
                let expected = model.clone().acquire(now, n);
                assert_eq!(
                    got, expected,
                    "step {step}: peek of {n} units at {now} ns under {quota:?}"
                );
            }
            LiveOp::Refund(cost) => {
                let n = cost.units();
                let got = live.refund(n);
                let expected = model.refund(now, n);
                assert_eq!(
                    got, expected,
                    "step {step}: refund of {n} units at {now} ns under {quota:?}"
                );
            }
            LiveOp::SetQuota(choice) => {
                let Some(new) = choice.build(&quota) else {
                    continue;
                };
                let before = live.peek(1);
                let got = live.set_quota(new);
                let expected = model.set_quota(&new, now);
                assert_eq!(
                    got, expected,
                    "step {step}: {quota:?} changed to {new:?} at {now} ns"
                );
                if got.is_ok() {
                    quota = new;
                } else {
                    assert_eq!(
                        live.peek(1),
                        before,
                        "step {step}: a refused change to {new:?} moved the level at {now} ns"
                    );
                }
                assert_eq!(live.quota(), quota, "step {step}: quota() after {got:?}");
            }
        }
    }
}

/// Decodes `data` and runs the stream; inputs whose first quota `Quota` refuses are the
/// `quota` target's business and end here.
///
/// # Panics
/// Wherever the live limiter and its model disagree.
pub fn run(data: &[u8]) {
    let Some(((kind, quota), ops)) = decode(data) else {
        return;
    };
    let Some(quota) = quota.build() else {
        return;
    };
    // Once on a clock that reads 0 when the limiter is made, once on a clock whose zero is
    // far before (whole windows or slots: a live window's period never changes).
    let grain = match kind {
        LiveKind::TokenBucket => 1,
        LiveKind::FixedWindow => nanos(quota.period()),
        LiveKind::SlidingWindow => nanos(quota.period()).div_ceil(u64::from(DEFAULT_SLOTS)),
    };
    for offset in [0, crate::clock_offset(data, grain)] {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(offset));
        match kind {
            LiveKind::TokenBucket => {
                let live = LiveTokenBucket::with_clock(quota, clock.clone());
                let model = TokenBucketModel::live(&quota);
                drive(&live, model, quota, &ops, &clock, offset);
            }
            LiveKind::FixedWindow => {
                let live = LiveFixedWindow::with_clock(quota, clock.clone());
                let model = FixedWindowModel::new(&quota);
                drive(&live, model, quota, &ops, &clock, offset);
            }
            LiveKind::SlidingWindow => {
                let live = LiveSlidingWindow::with_clock(quota, clock.clone());
                let model = SlidingWindowModel::new(&quota, DEFAULT_SLOTS);
                drive(&live, model, quota, &ops, &clock, offset);
            }
        }
    }
}
