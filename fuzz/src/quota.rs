//! The `quota` target: arbitrary numbers into every `Quota` constructor, `with_burst`,
//! `SlidingWindow::with_slots` and `SlidingLog::try_with_clock` (and the twins'). Each gives a
//! value or a typed error, never a panic; a value keeps the numbers asked for; an accepted
//! quota builds every limiter and twin, and each pair then answers arbitrary operations
//! identically, without a panic, overflow or wrap.

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{
    FixedWindow, Limiter, ManualClock, Quota, QuotaError, SlidingLog, SlidingWindow, TokenBucket,
};

use crate::stream::{self, Ask, Steps};
use crate::{Num, Op, Outcome};

/// A lock-free limiter and its mutex twin.
type Pair = (Box<dyn Limiter>, Box<dyn Limiter>);

/// The largest limit for which this target builds sliding logs: a log allocates 8 bytes per
/// unit of limit up front, and the twin records a cost one entry at a time. Larger limits
/// still go through `try_with_clock` when it refuses them without allocating.
pub const MAX_LOG_LIMIT: u64 = 1 << 12;

/// Operations per input in this target (it drives eight limiters per operation).
pub const MAX_QUOTA_OPS: usize = 64;

/// A period as arbitrary `Duration` parts (seconds and sub-second ns, which may carry).
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct PeriodSpec {
    /// Whole seconds.
    pub secs: Num,
    /// Nanoseconds, any `u32`: those ≥ 10^9 carry into the seconds.
    pub nanos: u32,
}

impl PeriodSpec {
    /// The duration, or `None` where `Duration` itself cannot hold it (not tollgate's
    /// concern: `Duration::new` would panic before tollgate is called).
    pub fn duration(self) -> Option<Duration> {
        Duration::from_secs(self.secs.get())
            .checked_add(Duration::from_nanos(u64::from(self.nanos)))
    }
}

/// Which constructor.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Constructor {
    /// `Quota::try_new(limit, period)`.
    New(Num, PeriodSpec),
    /// `Quota::try_new(limit, Duration::from_nanos(ns))`.
    NewNanos(Num, Num),
    /// `Quota::per_second(limit)`.
    PerSecond(Num),
    /// `Quota::per_minute(limit)`.
    PerMinute(Num),
    /// `Quota::per_hour(limit)`.
    PerHour(Num),
}

/// One input of the `quota` target.
#[derive(Arbitrary, Clone, Debug)]
pub struct QuotaInput {
    /// The constructor and its numbers.
    pub constructor: Constructor,
    /// Bursts to set in turn with `with_burst`.
    pub bursts: Vec<Num>,
    /// Slots for `with_slots`, any `u32`.
    pub slots: u32,
    /// Operations on every limiter.
    pub ops: Vec<Op>,
}

/// Builds the quota, checking what every constructor promises; `None` when the numbers do
/// not even make a `Duration` (`Duration::new` would panic before tollgate is called).
fn construct(c: Constructor) -> Option<Result<Quota, QuotaError>> {
    let (limit, period, result) = match c {
        Constructor::New(limit, period) => {
            let d = period.duration()?;
            (limit.get(), d, Quota::try_new(limit.get(), d))
        }
        Constructor::NewNanos(limit, ns) => {
            let d = Duration::from_nanos(ns.get());
            (limit.get(), d, Quota::try_new(limit.get(), d))
        }
        Constructor::PerSecond(limit) => {
            let r = Quota::per_second(limit.get());
            assert_eq!(r, Quota::try_new(limit.get(), Duration::from_secs(1)));
            (limit.get(), Duration::from_secs(1), r)
        }
        Constructor::PerMinute(limit) => {
            let r = Quota::per_minute(limit.get());
            assert_eq!(r, Quota::try_new(limit.get(), Duration::from_secs(60)));
            (limit.get(), Duration::from_secs(60), r)
        }
        Constructor::PerHour(limit) => {
            let r = Quota::per_hour(limit.get());
            assert_eq!(r, Quota::try_new(limit.get(), Duration::from_secs(3600)));
            (limit.get(), Duration::from_secs(3600), r)
        }
    };
    match result {
        Ok(q) => {
            assert_eq!((q.limit(), q.period(), q.burst()), (limit, period, limit));
            assert!(limit >= 1 && !period.is_zero());
        }
        Err(e) => {
            // Displays without a panic, and the simple refusals are the documented ones.
            let _ = e.to_string();
            if limit == 0 {
                assert_eq!(e, QuotaError::ZeroLimit);
            } else if period.is_zero() {
                assert_eq!(e, QuotaError::ZeroPeriod);
            }
        }
    }
    Some(result)
}

/// Decodes `data` and runs it.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(mut input) = QuotaInput::arbitrary(&mut u) else {
        return;
    };
    input.ops.truncate(MAX_QUOTA_OPS);
    let Some(Ok(mut quota)) = construct(input.constructor) else {
        return;
    };
    for burst in &input.bursts {
        match quota.with_burst(burst.get()) {
            Ok(q) => {
                assert_eq!(
                    (q.limit(), q.period(), q.burst()),
                    (quota.limit(), quota.period(), burst.get())
                );
                quota = q;
            }
            Err(e) => {
                let _ = e.to_string();
                if burst.get() == 0 {
                    assert_eq!(e, QuotaError::ZeroBurst);
                } else {
                    assert!(matches!(e, QuotaError::BurstTooLarge { .. }), "{e:?}");
                }
            }
        }
    }
    let _ = quota.is_exact();
    let clock = ManualClock::new();
    let mut pairs: Vec<Pair> = vec![
        (
            Box::new(TokenBucket::with_clock(quota, clock.clone())),
            Box::new(MutexTokenBucket::with_clock(quota, clock.clone())),
        ),
        (
            Box::new(FixedWindow::with_clock(quota, clock.clone())),
            Box::new(MutexFixedWindow::with_clock(quota, clock.clone())),
        ),
        (
            Box::new(SlidingWindow::with_clock(quota, clock.clone())),
            Box::new(MutexSlidingWindow::with_clock(quota, clock.clone())),
        ),
    ];
    let slotted = SlidingWindow::try_with_slots(quota, input.slots, clock.clone());
    let twin_slotted = MutexSlidingWindow::try_with_slots(quota, input.slots, clock.clone());
    match (slotted, twin_slotted) {
        (Ok(a), Ok(b)) => pairs.push((Box::new(a), Box::new(b))),
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            let valid = (1..=tollgate::MAX_SLOTS).contains(&input.slots);
            match a {
                QuotaError::InvalidSlots { slots } => assert!(!valid && slots == input.slots),
                QuotaError::RateTooHigh { .. } => assert!(valid),
                other => panic!("try_with_slots({}) refused with {other:?}", input.slots),
            }
        }
        (a, b) => panic!(
            "try_with_slots({}): lock-free {:?}, twin {:?}",
            input.slots,
            a.err(),
            b.err()
        ),
    }
    if quota.limit() <= MAX_LOG_LIMIT {
        let log = SlidingLog::try_with_clock(quota, clock.clone()).expect("a small log allocates");
        let twin =
            MutexSlidingLog::try_with_clock(quota, clock.clone()).expect("a small log allocates");
        pairs.push((Box::new(log), Box::new(twin)));
    }

    let period_ns = u64::try_from(quota.period().as_nanos()).expect("a period fits");
    let mut all = All {
        pairs: &pairs,
        clock: &clock,
        quota: &quota,
    };
    stream::run(&input.ops, period_ns, &mut all);
}

/// Every limiter and its twin, on one clock, driven by one stream.
struct All<'a> {
    pairs: &'a [Pair],
    clock: &'a ManualClock,
    quota: &'a Quota,
}

impl Steps for All<'_> {
    /// The first limiter's answer (the one a retry probe follows).
    fn acquire(&mut self, step: usize, now: u64, n: u64, _: Ask) -> Outcome {
        self.clock.set(Duration::from_nanos(now));
        acquire_all(self.pairs, step, now, n, self.quota)
    }
    fn refund(&mut self, step: usize, now: u64, n: u64) {
        self.clock.set(Duration::from_nanos(now));
        refund_all(self.pairs, step, now, n, self.quota);
    }
}

/// Every limiter and its twin answer a request of `n` units alike: the first one's answer.
fn acquire_all(pairs: &[Pair], step: usize, now: u64, n: u64, quota: &Quota) -> Outcome {
    let mut first = None;
    for (i, (lock_free, twin)) in pairs.iter().enumerate() {
        let got = Outcome::from(lock_free.try_acquire_n(n));
        let twin_got = Outcome::from(twin.try_acquire_n(n));
        assert_eq!(
            got, twin_got,
            "step {step}, limiter {i}: {n} units at {now} ns, {quota:?}"
        );
        first.get_or_insert(got);
    }
    first.expect("a token bucket, a fixed window and a sliding window at least")
}

/// Every limiter and its twin give back alike on a refund of `n` units, never beyond the
/// capacity.
fn refund_all(pairs: &[Pair], step: usize, now: u64, n: u64, quota: &Quota) {
    for (i, (lock_free, twin)) in pairs.iter().enumerate() {
        let given = lock_free.refund(n);
        assert_eq!(
            given,
            twin.refund(n),
            "step {step}, limiter {i}: refund of {n} units at {now} ns, {quota:?}"
        );
        assert!(
            given <= n.min(quota.limit().max(quota.burst())),
            "step {step}, limiter {i}: a refund of {given} units, asked {n}"
        );
    }
}
