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

/// Runs one decoded stream against a limiter, its twin and a model; and against the shifted
/// copies, whose every decision must be the first limiter's.
#[allow(clippy::too_many_arguments)]
fn drive(
    quota: &Quota,
    ops: &[Op],
    clock: &ManualClock,
    lock_free: &dyn Limiter,
    twin: &dyn Limiter,
    model: impl Reference,
    bound: Bound,
    shifted: &Shifted<'_>,
) {
    let period_ns = u64::try_from(quota.period().as_nanos()).expect("a period fits");
    let mut d = Driven {
        quota,
        clock,
        lock_free,
        twin,
        model,
        bound,
        ledger: Ledger::new(bound, quota),
        shifted,
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
    ($(#[$doc:meta])* $name:ident, |$quota:ident, $slots:ident, $clock:ident, $ops:ident, $shifted:ident, $data:ident| $body:block) => {
        $(#[$doc])*
        pub mod $name {
            use super::*;

            /// Decodes `data` and runs the stream; inputs whose quota tollgate refuses are
            /// the `quota` target's business and end here.
            pub fn run(data: &[u8]) {
                let Some((spec, $ops)) = decode(data) else { return };
                let Some($quota) = spec.build() else { return };
                let $slots = spec.slots();
                let $clock = ManualClock::new();
                let $shifted = ManualClock::new();
                let $data = data;
                $body
            }
        }
    };
}

target!(
    /// `TokenBucket` vs `MutexTokenBucket` vs [`TokenBucketModel`]; bound: burst + rate × time.
    token_bucket,
    |quota, _slots, clock, ops, far, data| {
        let lock_free = TokenBucket::with_clock(quota, clock.clone());
        let twin = MutexTokenBucket::with_clock(quota, clock.clone());
        let offset = clock_offset(data, 1);
        far.set(Duration::from_nanos(offset));
        let (far_lock_free, far_twin) = (
            TokenBucket::with_clock(quota, far.clone()),
            MutexTokenBucket::with_clock(quota, far.clone()),
        );
        let shifted = Shifted { clock: &far, offset, lock_free: &far_lock_free, twin: &far_twin };
        let model = TokenBucketModel::new(&quota);
        drive(&quota, &ops, &clock, &lock_free, &twin, model, Bound::Bucket, &shifted);
    }
);

target!(
    /// `FixedWindow` vs `MutexFixedWindow` vs [`FixedWindowModel`]; bound: limit per window.
    fixed_window,
    |quota, _slots, clock, ops, far, data| {
        let lock_free = FixedWindow::with_clock(quota, clock.clone());
        let twin = MutexFixedWindow::with_clock(quota, clock.clone());
        // Windows align to the clock's zero: an offset of whole periods.
        let offset = clock_offset(data, nanos(quota.period()));
        far.set(Duration::from_nanos(offset));
        let (far_lock_free, far_twin) = (
            FixedWindow::with_clock(quota, far.clone()),
            MutexFixedWindow::with_clock(quota, far.clone()),
        );
        let shifted = Shifted { clock: &far, offset, lock_free: &far_lock_free, twin: &far_twin };
        let model = FixedWindowModel::new(&quota);
        drive(&quota, &ops, &clock, &lock_free, &twin, model, Bound::Aligned, &shifted);
    }
);

target!(
    /// `SlidingWindow` (1 to 4096 slots) vs `MutexSlidingWindow` vs [`SlidingWindowModel`];
    /// bound: limit in any period.
    sliding_window,
    |quota, slots, clock, ops, far, data| {
        let built = SlidingWindow::try_with_slots(quota, slots, clock.clone());
        let twin_built = MutexSlidingWindow::try_with_slots(quota, slots, clock.clone());
        assert_eq!(built.as_ref().err(), twin_built.as_ref().err(), "{slots} slots");
        let (Ok(lock_free), Ok(twin)) = (built, twin_built) else { return };
        // Slots align to the clock's zero: an offset of whole slots.
        let offset = clock_offset(data, nanos(quota.period()).div_ceil(u64::from(slots)));
        far.set(Duration::from_nanos(offset));
        let (Ok(far_lock_free), Ok(far_twin)) = (
            SlidingWindow::try_with_slots(quota, slots, far.clone()),
            MutexSlidingWindow::try_with_slots(quota, slots, far.clone()),
        ) else {
            unreachable!("the same quota and slots")
        };
        let shifted = Shifted { clock: &far, offset, lock_free: &far_lock_free, twin: &far_twin };
        let model = SlidingWindowModel::new(&quota, slots);
        drive(&quota, &ops, &clock, &lock_free, &twin, model, Bound::Sliding, &shifted);
    }
);

target!(
    /// `SlidingLog` vs `MutexSlidingLog` vs [`SlidingLogModel`] (limits up to
    /// [`MAX_LOG_LIMIT`]); bound: limit in any period.
    sliding_log,
    |quota, _slots, clock, ops, far, data| {
        if quota.limit() > MAX_LOG_LIMIT {
            return;
        }
        let lock_free = SlidingLog::try_with_clock(quota, clock.clone()).expect("a small log");
        let twin = MutexSlidingLog::try_with_clock(quota, clock.clone()).expect("a small log");
        let offset = clock_offset(data, 1);
        far.set(Duration::from_nanos(offset));
        let far_lock_free = SlidingLog::try_with_clock(quota, far.clone()).expect("a small log");
        let far_twin = MutexSlidingLog::try_with_clock(quota, far.clone()).expect("a small log");
        let shifted = Shifted { clock: &far, offset, lock_free: &far_lock_free, twin: &far_twin };
        let model = SlidingLogModel::new(&quota);
        drive(&quota, &ops, &clock, &lock_free, &twin, model, Bound::Sliding, &shifted);
    }
);
