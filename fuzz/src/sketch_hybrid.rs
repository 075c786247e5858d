//! The hybrid sketch target: a stream of requests over a small key space and forward clock
//! moves, applied to a [`HybridSketchLimiter`] of one to eight columns and zero to seven
//! exact entries (so keys collide in both, and promotions, re-promotions and entries taken
//! back all happen), with any promotion threshold, and to references on the same
//! [`ManualClock`]:
//!
//! - the exact [`KeyedLimiter`](tollgate::KeyedLimiter) (fixed window) fed the whole stream: for every key the
//!   hybrid's admitted units never exceed the exact map's;
//! - per key, the exact [`FixedWindow`](tollgate::FixedWindow) of the key's own traffic charged only with what the
//!   hybrid admitted: every admission must fit it, and no decision is optimistic against it;
//! - `peek` answers what the next request of the same cost is answered, and writes nothing.
//!
//! The clock only moves forward (a [`SketchOp::StepBack`] is skipped): the hybrid's guarantee
//! is stated for clocks that do not step back past their `max_skew_nanos`.

use arbitrary::Arbitrary;
use tollgate::{HybridSketchLimiter, ManualClock};

use tollgate_test_support::check_against_shadow;

use crate::sketch::{references, window_and_size, SketchOp, Tally};
use crate::QuotaSpec;

/// The settings of one scenario.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct HybridSpec {
    /// The quota (its burst is ignored: a window counts `limit`).
    pub quota: QuotaSpec,
    /// Columns, `1 + columns % 8`.
    pub columns: u8,
    /// Exact entries, `exact % 8`.
    pub exact: u8,
    /// The promotion threshold, `1 + promote_at` (clamped by the limiter to the limit).
    pub promote_at: u8,
}

/// Decodes the settings and up to [`MAX_OPS`](crate::MAX_OPS) operations.
pub fn decode(data: &[u8]) -> Option<(HybridSpec, Vec<SketchOp>)> {
    crate::settings_and_ops(data)
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((spec, ops)) = decode(data) else {
        return;
    };
    let Some((quota, size)) = window_and_size(&spec.quota, spec.columns) else {
        return;
    };
    let len = quota.period().as_nanos() as u64;
    let clock = ManualClock::new();
    let hybrid = HybridSketchLimiter::<u8, _>::with_clock(
        quota,
        size,
        usize::from(spec.exact % 8),
        clock.clone(),
    )
    .promote_at(1 + u64::from(spec.promote_at));
    let (exact, shadows) = references(quota, &clock);
    let mut tally = Tally::default();
    for (i, op) in ops.iter().enumerate() {
        // No step back (see the module's docs).
        let Some((key, n, d, at)) = op.ask(i, &hybrid, &clock, len, None) else {
            continue;
        };
        check_against_shadow(&d, &shadows[&key], n, &at);
        tally.check(&exact, key, n, &d, &at, false);
    }
}
