//! The four differential targets: one stream of operations applied to the lock-free limiter,
//! its mutex twin and the reference model, all three answering every request identically;
//! the [`Ledger`](crate::invariants::Ledger) checks the admissions on the way.

use std::time::Duration;

use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{FixedWindow, Limiter, ManualClock, Quota, SlidingLog, SlidingWindow, TokenBucket};

use crate::invariants::{Bound, Ledger};
use crate::model::{FixedWindowModel, SlidingLogModel, SlidingWindowModel, TokenBucketModel};
use crate::stream::{self, Ask, Steps};
use crate::{clock_offset, decode, Op, Outcome};

/// A duration in ns (a validated period fits).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("a period fits")
}

/// The largest limit the sliding-log target builds: the log and its twin hold `limit`
/// entries, and the twin records a cost of `n` one entry at a time.
pub const MAX_LOG_LIMIT: u64 = 1 << 12;

/// The same limiter and twin again, on a clock whose zero is `offset` ns before their start
/// (see [`crate::clock_offset`]).
struct Shifted<'a> {
    clock: &'a ManualClock,
    offset: u64,
    lock_free: &'a dyn Limiter,
    twin: &'a dyn Limiter,
}

/// A reference model as the differential targets (and, with its quota changes, the `live`
/// target) drive it.
pub(crate) trait Reference {
    /// One request of `n` units at clock reading `now_ns`.
    fn acquire(&mut self, now_ns: u64, n: u64) -> Outcome;
    /// A refund of `n` units at clock reading `now_ns`: the units given back.
    fn refund(&mut self, now_ns: u64, n: u64) -> u64;
}

/// [`Reference`] for models that refund: their own `acquire` and `refund`.
macro_rules! reference {
    ($($model:ty),*) => {$(
        impl Reference for $model {
            fn acquire(&mut self, now_ns: u64, n: u64) -> Outcome {
                <$model>::acquire(self, now_ns, n)
            }
            fn refund(&mut self, now_ns: u64, n: u64) -> u64 {
                <$model>::refund(self, now_ns, n)
            }
        }
    )*};
}

reference!(TokenBucketModel, FixedWindowModel, SlidingWindowModel);

/// The sliding log refunds nothing (`Limiter::refund`).
impl Reference for SlidingLogModel {
    fn acquire(&mut self, now_ns: u64, n: u64) -> Outcome {
        SlidingLogModel::acquire(self, now_ns, n)
    }
    fn refund(&mut self, _: u64, _: u64) -> u64 {
        0
    }
}

/// A limiter, its twin and their model, driven together on one clock.
struct Driven<'a, M> {
    quota: &'a Quota,
    clock: &'a ManualClock,
    lock_free: &'a dyn Limiter,
    twin: &'a dyn Limiter,
    model: M,
    bound: Bound,
    ledger: Ledger,
    /// The same limiter and twin on a clock whose zero is far before their start.
    shifted: &'a Shifted<'a>,
    /// How far the last steps back went below the start (the first clock saturates at 0;
    /// the shifted one reads that much before its origin, which must read as the origin).
    under: u64,
}

impl<M: Reference> Driven<'_, M> {
    /// Both clocks at `now` of the limiters' time.
    fn set(&self, now: u64) {
        self.clock.set(Duration::from_nanos(now));
        let s = self.shifted;
        let reading = if now == 0 {
            s.offset.saturating_sub(self.under)
        } else {
            s.offset.saturating_add(now)
        };
        s.clock.set(Duration::from_nanos(reading));
    }

    /// One request of `n` units at `now`, answered alike by all three and within what every
    /// decision promises; `must_pass` for a retry probe.
    fn acquire(&mut self, step: usize, now: u64, n: u64, must_pass: Option<bool>) -> Outcome {
        let quota = self.quota;
        self.set(now);
        let got = Outcome::from(self.lock_free.try_acquire_n(n));
        let twin_got = Outcome::from(self.twin.try_acquire_n(n));
        let s = self.shifted;
        let shifted_got = Outcome::from(s.lock_free.try_acquire_n(n));
        let shifted_twin = Outcome::from(s.twin.try_acquire_n(n));
        assert_eq!(
            got, shifted_got,
            "step {step}: {n} units at {now} ns, and on a clock whose zero is {} ns earlier",
            s.offset
        );
        assert_eq!(
            twin_got, shifted_twin,
            "step {step}: twin, {n} units at {now} ns, on a clock whose zero is {} ns earlier",
            s.offset
        );
        let expected = self.model.acquire(now, n);
        assert_eq!(
            got, twin_got,
            "step {step}: lock-free vs twin, {n} units at {now} ns"
        );
        assert_eq!(
            got, expected,
            "step {step}: lock-free vs model, {n} units at {now} ns"
        );
        // What every decision promises, whatever the algorithm.
        assert!(
            got.remaining <= quota.limit().max(quota.burst()),
            "step {step}: remaining above capacity"
        );
        if got.allowed || got.exceeds_capacity {
            assert_eq!(
                got.retry_after_ns, None,
                "step {step}: a retry_after that cannot apply"
            );
        }
        assert_eq!(
            got.exceeds_capacity,
            n > capacity(quota, self.bound),
            "step {step}: exceeds_capacity"
        );
        if let Some(pass) = must_pass {
            assert_eq!(
                got.allowed,
                pass,
                "step {step}: {n} units {} retry_after was {}",
                if pass { "at" } else { "1 ns before" },
                if pass { "refused" } else { "admitted" }
            );
        }
        if got.allowed {
            self.ledger.admitted(now, n);
        }
        got
    }

    /// A refund of `n` units at `now`: all three give back the same, never beyond capacity.
    fn refund(&mut self, step: usize, now: u64, n: u64) {
        self.set(now);
        let given = self.lock_free.refund(n);
        let twin_given = self.twin.refund(n);
        let s = self.shifted;
        let (shifted_given, shifted_twin) = (s.lock_free.refund(n), s.twin.refund(n));
        assert_eq!(
            (given, twin_given),
            (shifted_given, shifted_twin),
            "step {step}: refund of {n} units at {now} ns, and on a clock whose zero is {} ns earlier",
            s.offset
        );
        let expected = self.model.refund(now, n);
        assert_eq!(
            given, twin_given,
            "step {step}: refund lock-free vs twin, {n} units at {now} ns"
        );
        assert_eq!(
            given, expected,
            "step {step}: refund lock-free vs model, {n} units at {now} ns"
        );
        assert!(
            given <= n.min(capacity(self.quota, self.bound)),
            "step {step}: a refund of {given} units, asked {n}, beyond capacity"
        );
        self.ledger.refunded(n, given);
    }
}

impl<M: Reference> Steps for Driven<'_, M> {
    fn advanced(&mut self, _: usize, _: u64) {
        self.under = 0;
    }
    fn stepped_back(&mut self, _: usize, from: u64, back: u64) {
        self.under = self.under.saturating_add(back.saturating_sub(from));
    }
    fn overtaking(&mut self, _: usize, read: u64, now: u64) {
        if now > read {
            self.under = 0;
        }
    }
    fn acquire(&mut self, step: usize, now: u64, n: u64, ask: Ask) -> Outcome {
        let must_pass = match ask {
            Ask::Retry { waited, must_pass } => {
                if waited > 0 {
                    self.under = 0;
                }
                Some(must_pass)
            }
            _ => None,
        };
        Driven::acquire(self, step, now, n, must_pass)
    }
    fn refund(&mut self, step: usize, now: u64, n: u64) {
        Driven::refund(self, step, now, n);
    }
}

/// Runs one decoded stream against the limiter and twin that `pair` makes on a clock, and
/// their model; and against a second pair made on a clock whose zero is `offset` ns before
/// their start (see [`crate::clock_offset`]), whose every decision must be the first
/// limiter's.
fn drive<L: Limiter, T: Limiter>(
    quota: &Quota,
    ops: &[Op],
    offset: u64,
    pair: impl Fn(ManualClock) -> (L, T),
    model: impl Reference,
    bound: Bound,
) {
    let (clock, far) = (ManualClock::new(), ManualClock::new());
    far.set(Duration::from_nanos(offset));
    let (lock_free, twin) = pair(clock.clone());
    let (far_lock_free, far_twin) = pair(far.clone());
    let shifted = Shifted {
        clock: &far,
        offset,
        lock_free: &far_lock_free,
        twin: &far_twin,
    };
    let period_ns = u64::try_from(quota.period().as_nanos()).expect("a period fits");
    let mut d = Driven {
        quota,
        clock: &clock,
        lock_free: &lock_free,
        twin: &twin,
        model,
        bound,
        ledger: Ledger::new(bound, quota),
        shifted: &shifted,
        under: 0,
    };
    stream::run(ops, period_ns, &mut d);
    d.ledger.check();
}

/// The largest cost an algorithm can ever admit.
fn capacity(quota: &Quota, bound: Bound) -> u64 {
    match bound {
        Bound::Bucket => quota.burst(),
        Bound::Aligned | Bound::Sliding => quota.limit(),
    }
}

macro_rules! target {
    ($(#[$doc:meta])* $name:ident, |$quota:ident, $slots:ident, $ops:ident, $data:ident| $body:block) => {
        $(#[$doc])*
        pub mod $name {
            use super::*;

            /// Decodes `data` and runs the stream; inputs whose quota tollgate refuses are
            /// the `quota` target's business and end here.
            pub fn run(data: &[u8]) {
                let Some((spec, $ops)) = decode(data) else { return };
                let Some($quota) = spec.build() else { return };
                let $slots = spec.slots();
                let $data = data;
                $body
            }
        }
    };
}

target!(
    /// `TokenBucket` vs `MutexTokenBucket` vs [`TokenBucketModel`]; bound: burst + rate × time.
    token_bucket,
    |quota, _slots, ops, data| {
        let pair = |c: ManualClock| {
            (TokenBucket::with_clock(quota, c.clone()), MutexTokenBucket::with_clock(quota, c))
        };
        let model = TokenBucketModel::new(&quota);
        drive(&quota, &ops, clock_offset(data, 1), pair, model, Bound::Bucket);
    }
);

target!(
    /// `FixedWindow` vs `MutexFixedWindow` vs [`FixedWindowModel`]; bound: limit per window.
    fixed_window,
    |quota, _slots, ops, data| {
        let pair = |c: ManualClock| {
            (FixedWindow::with_clock(quota, c.clone()), MutexFixedWindow::with_clock(quota, c))
        };
        // Windows align to the clock's zero: an offset of whole periods.
        let offset = clock_offset(data, nanos(quota.period()));
        drive(&quota, &ops, offset, pair, FixedWindowModel::new(&quota), Bound::Aligned);
    }
);

target!(
    /// `SlidingWindow` (1 to 4096 slots) vs `MutexSlidingWindow` vs [`SlidingWindowModel`];
    /// bound: limit in any period.
    sliding_window,
    |quota, slots, ops, data| {
        let pair = |c: ManualClock| {
            let lock_free = SlidingWindow::try_with_slots(quota, slots, c.clone());
            (lock_free, MutexSlidingWindow::try_with_slots(quota, slots, c))
        };
        let (refused, twin_refused) = pair(ManualClock::new());
        assert_eq!(refused.as_ref().err(), twin_refused.as_ref().err(), "{slots} slots");
        if refused.is_err() {
            return;
        }
        let pair = |c| {
            let (lock_free, twin) = pair(c);
            (lock_free.expect("accepted above"), twin.expect("accepted above"))
        };
        // Slots align to the clock's zero: an offset of whole slots.
        let offset = clock_offset(data, nanos(quota.period()).div_ceil(u64::from(slots)));
        let model = SlidingWindowModel::new(&quota, slots);
        drive(&quota, &ops, offset, pair, model, Bound::Sliding);
    }
);

target!(
    /// `SlidingLog` vs `MutexSlidingLog` vs [`SlidingLogModel`] (limits up to
    /// [`MAX_LOG_LIMIT`]); bound: limit in any period.
    sliding_log,
    |quota, _slots, ops, data| {
        if quota.limit() > MAX_LOG_LIMIT {
            return;
        }
        let pair = |c: ManualClock| {
            let lock_free = SlidingLog::try_with_clock(quota, c.clone()).expect("a small log");
            (lock_free, MutexSlidingLog::try_with_clock(quota, c).expect("a small log"))
        };
        let model = SlidingLogModel::new(&quota);
        drive(&quota, &ops, clock_offset(data, 1), pair, model, Bound::Sliding);
    }
);
