//! The sketch target: a stream of requests over a small key space and clock moves (forward
//! and back), applied to a [`SketchLimiter`] of one to eight columns (so keys collide) in
//! either form, and to references on the same [`ManualClock`]:
//!
//! - the exact [`KeyedLimiter`] (fixed window) fed the whole stream: for every key, until the
//!   clock first steps back, the sketch's admitted units never exceed the exact map's
//!   (fixed-window form);
//! - per key, the exact limiter of the key's own traffic, charged only with what the sketch
//!   admitted (a [`FixedWindow`], or a two-window weighted count for the sliding form): every
//!   admission must fit it, and no decision is optimistic against it (`remaining` at most
//!   its, `reset_after` and, when both deny, `retry_after` at least its);
//! - `peek` answers what the next request of the same cost is answered, and writes nothing.

use std::collections::HashMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use tollgate::{
    Algorithm, Clock, Decision, FixedWindow, HybridSketchLimiter, KeyedLimiter, ManualClock, Quota,
    QuotaError, SketchLimiter, SketchSize,
};

use tollgate_test_support::{check_against_shadow, TwoWindow};

use crate::{Cost, QuotaSpec, Span};

/// Keys are `0..KEYS`.
pub const KEYS: u8 = 16;

/// The settings of one scenario.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct SketchSpec {
    /// The quota (its burst is ignored: a window counts `limit`).
    pub quota: QuotaSpec,
    /// Columns, `1 + columns % 8`.
    pub columns: u8,
    /// The two-window weighted form.
    pub sliding: bool,
}

/// One step of a sketch scenario.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum SketchOp {
    /// The clock moves forward (saturating).
    Advance(Span),
    /// The clock moves backward (saturating at zero).
    StepBack(Span),
    /// `try_acquire_n(key % KEYS, cost)`.
    Acquire {
        /// The key, mod [`KEYS`].
        key: u8,
        /// The cost.
        cost: Cost,
    },
    /// `peek(key % KEYS, cost)`, twice, then the same request.
    Peek {
        /// The key, mod [`KEYS`].
        key: u8,
        /// The cost.
        cost: Cost,
    },
}

/// Decodes the settings and up to [`MAX_OPS`](crate::MAX_OPS) operations.
pub fn decode(data: &[u8]) -> Option<(SketchSpec, Vec<SketchOp>)> {
    crate::settings_and_ops(data)
}

/// The time the limiters read: the clock's, up to the horizon (past it time stands still).
fn now(clock: &ManualClock) -> u64 {
    clock.now_nanos().min(crate::HORIZON)
}

/// The quota a sketch counts, `spec` without its burst (a window counts `limit`), and its
/// size, `1 + columns % 8` columns; `None` if tollgate refuses the numbers.
pub(crate) fn window_and_size(spec: &QuotaSpec, columns: u8) -> Option<(Quota, SketchSize)> {
    let quota = spec.build()?;
    let quota = Quota::try_new(quota.limit(), quota.period()).expect("the limit and period passed");
    let size = SketchSize::columns(1 + u64::from(columns % 8)).expect("1..=8 columns");
    Some((quota, size))
}

/// The exact fixed-window map, and every key's shadow (its own fixed window), all made now on
/// `clock`: the shadows share the sketch's origin (a limiter made later would count from its
/// own first reading, and read a clock stepped back before it as that).
pub(crate) fn references(
    quota: Quota,
    clock: &ManualClock,
) -> (
    KeyedLimiter<u8, ManualClock>,
    HashMap<u8, FixedWindow<ManualClock>>,
) {
    let exact = KeyedLimiter::<u8, _>::try_with_clock(Algorithm::FixedWindow, quota, clock.clone())
        .expect("a fixed window takes every quota");
    let shadows = (0..KEYS)
        .map(|k| (k, FixedWindow::with_clock(quota, clock.clone())))
        .collect();
    (exact, shadows)
}

/// A sketch under test: the two calls the targets make of either form.
pub(crate) trait Sketch {
    /// `peek(key, n)`.
    fn peek(&self, key: u8, n: u64) -> Decision;
    /// `try_acquire_n(key, n)`.
    fn try_acquire_n(&self, key: u8, n: u64) -> Decision;
}

macro_rules! sketch {
    ($($sketch:ident),*) => {$(
        impl Sketch for $sketch<u8, ManualClock> {
            fn peek(&self, key: u8, n: u64) -> Decision {
                $sketch::peek(self, &key, n)
            }
            fn try_acquire_n(&self, key: u8, n: u64) -> Decision {
                $sketch::try_acquire_n(self, &key, n)
            }
        }
    )*};
}

sketch!(SketchLimiter, HybridSketchLimiter);

/// Units admitted per key: by the sketch, by the exact map.
#[derive(Default)]
pub(crate) struct Tally(HashMap<u8, (u128, u128)>);

impl Tally {
    /// Asks `exact` for `key`'s request of `n` too (`d` the answer under test), counts both,
    /// and checks that the key's units admitted so far are no more than the map's (unless
    /// `lenient`).
    pub(crate) fn check(
        &mut self,
        exact: &KeyedLimiter<u8, ManualClock>,
        key: u8,
        n: u64,
        d: &Decision,
        at: &str,
        lenient: bool,
    ) {
        let e = exact.try_acquire_n(&key, n);
        let t = self.0.entry(key).or_default();
        t.0 += u128::from(if d.is_allowed() { n } else { 0 });
        t.1 += u128::from(if e.is_allowed() { n } else { 0 });
        assert!(
            lenient || t.0 <= t.1,
            "{at}: {} units admitted, the exact map {}",
            t.0,
            t.1
        );
    }
}

impl SketchOp {
    /// What this op asks: the key, the units and whether it peeks first; `None` for a clock
    /// step, made here on `clock` (`len` the window's length). A step back is made only where
    /// `stepped_back` is given, and then recorded there; without it, it is skipped.
    pub(crate) fn request(
        self,
        clock: &ManualClock,
        len: u64,
        stepped_back: Option<&mut bool>,
    ) -> Option<(u8, u64, bool)> {
        match self {
            SketchOp::Advance(s) => {
                let t = clock.now_nanos().saturating_add(s.nanos(len));
                clock.set(Duration::from_nanos(t));
                None
            }
            SketchOp::StepBack(s) => {
                if let Some(stepped_back) = stepped_back {
                    let t = clock.now_nanos().saturating_sub(s.nanos(len));
                    *stepped_back |= t < clock.now_nanos();
                    clock.set(Duration::from_nanos(t));
                }
                None
            }
            SketchOp::Acquire { key, cost } => Some((key % KEYS, cost.units(), false)),
            SketchOp::Peek { key, cost } => Some((key % KEYS, cost.units(), true)),
        }
    }

    /// Op `i` made on `sketch`: `None` for a clock step (see [`SketchOp::request`]); for a
    /// request, the key, the units, the answer and where it was made (for messages). A peek
    /// is checked on the way: it writes nothing (asked twice, the same answer) and answers
    /// what the request then gets.
    pub(crate) fn ask(
        self,
        i: usize,
        sketch: &impl Sketch,
        clock: &ManualClock,
        len: u64,
        stepped_back: Option<&mut bool>,
    ) -> Option<(u8, u64, Decision, String)> {
        let (key, n, peek) = self.request(clock, len, stepped_back)?;
        let at = format!("op {i} key {key} n {n} at {}", clock.now_nanos());
        let peeked = peek.then(|| sketch.peek(key, n));
        if let Some(p) = peeked {
            assert_eq!(p, sketch.peek(key, n), "{at}: a peek wrote");
        }
        let d = sketch.try_acquire_n(key, n);
        if let Some(p) = peeked {
            assert_eq!(p, d, "{at}: the peek differs from the request");
        }
        Some((key, n, d, at))
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((spec, ops)) = decode(data) else {
        return;
    };
    let Some((quota, size)) = window_and_size(&spec.quota, spec.columns) else {
        return;
    };
    let (limit, len) = (quota.limit(), quota.period().as_nanos() as u64);
    let clock = ManualClock::new();
    let sketch = if spec.sliding {
        match SketchLimiter::<u8, _>::try_sliding_with_clock(quota, size, clock.clone()) {
            Ok(s) => s,
            Err(e) => {
                assert!(limit > u64::from(u32::MAX), "refused {limit}: {e}");
                assert_eq!(
                    e,
                    QuotaError::LimitTooLarge {
                        limit,
                        max: u64::from(u32::MAX)
                    }
                );
                return;
            }
        }
    } else {
        SketchLimiter::<u8, _>::with_clock(quota, size, clock.clone())
    };
    let (exact, shadows) = references(quota, &clock);
    let mut two: HashMap<u8, TwoWindow> = HashMap::new();
    let mut tally = Tally::default();
    // Once the clock has stepped back, the exact map counts a request behind a key's window
    // in that later window where the sketch denies it, and a later request may then pass the
    // sketch and not the map: from then on only the key's own limit (the shadow) is checked.
    let mut stepped_back = false;
    for (i, op) in ops.iter().enumerate() {
        let Some((key, n, d, at)) = op.ask(i, &sketch, &clock, len, Some(&mut stepped_back)) else {
            continue;
        };
        if spec.sliding {
            let own = two.entry(key).or_default();
            let t = now(&clock);
            let est = own.estimate(t, len);
            let after = est + if d.is_allowed() { n } else { 0 };
            assert!(
                d.remaining() <= limit.saturating_sub(after),
                "{at}: remaining {d:?} above the key's own ({est} counted)"
            );
            if d.is_allowed() {
                // A zero cost passes whatever the count (every limiter's rule): it admits no
                // unit. A clock stepped back can put the key's own estimate above the limit.
                assert!(
                    n == 0 || (n <= limit && est + n <= limit),
                    "{at}: admitted at {est} counted"
                );
                own.charge(t, len, n);
            }
            continue;
        }
        check_against_shadow(&d, &shadows[&key], n, &at);
        tally.check(&exact, key, n, &d, &at, stepped_back);
    }
}
