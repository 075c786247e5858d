//! The keyed target: a stream of requests over a small key space, clock moves and idle
//! evictions, applied to a [`KeyedLimiter`] and to a reference written for clarity: a
//! `HashMap` from keys to mutex twins (`tollgate::baseline`), each made on its key's first
//! request from the quota that request carries, on the same [`ManualClock`].
//!
//! Checked on every step: every decision equal to the key's twin's (all fields); after an
//! `EvictIdle`, the evicted count equal to the number of twins back to full capacity (which
//! the reference removes); `len()` and `is_empty()` equal to the reference's after every step.
//! A key evicted and asked again starts on a fresh limiter in both.
//!
//! Half the inputs bound the map (`max_keys` 1 to 8, either [`WhenFull`]): the reference
//! mirrors the bound's rule step by step (single-threaded it is exact): a new key that finds
//! the map full sweeps idle keys when a sweep is due, then is denied (`Deny`) or judged by a
//! throwaway twin (`AdmitUntracked`).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{
    Algorithm, Clock, KeyedLimiter, Limiter, ManualClock, Quota, QuotaError, WhenFull,
    DEFAULT_SLOTS,
};

use crate::differential::MAX_LOG_LIMIT;
use crate::{Cost, Outcome, QuotaSpec, Span, MAX_OPS};

/// Keys are `0..KEYS`.
pub const KEYS: u8 = 8;

/// One step of a keyed scenario.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum KeyedOp {
    /// The clock moves forward (saturating), by a span of the map's period.
    Advance(Span),
    /// The clock moves backward (saturating at zero).
    StepBack(Span),
    /// Ask for `cost` units for key `key % KEYS` (`try_acquire` for one unit, else
    /// `try_acquire_n`); a new key's limiter gets the map's quota.
    Acquire {
        /// The key, mod [`KEYS`].
        key: u8,
        /// The cost.
        cost: Cost,
    },
    /// Ask for one unit for key `key % KEYS` with plan `plan % plans` (`try_acquire_with`):
    /// a new key's limiter gets the plan's quota.
    AcquireWith {
        /// The key, mod [`KEYS`].
        key: u8,
        /// The plan, mod the number of valid plans.
        plan: u8,
    },
    /// `evict_idle()`.
    EvictIdle,
}

/// The map's settings, decoded first.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct KeyedSpec {
    /// `Algorithm::ALL[algorithm % 4]`.
    pub algorithm: u8,
    /// The map's quota.
    pub quota: QuotaSpec,
    /// The plans' quotas (those tollgate accepts; for the sliding log, those of at most
    /// [`MAX_LOG_LIMIT`]).
    pub plans: [QuotaSpec; 3],
    /// `max_keys = 1 + k % KEYS` and `AdmitUntracked` if true, `Deny` if false.
    pub bound: Option<(u8, bool)>,
}

/// Decodes the settings and up to [`MAX_OPS`] operations; `None` if the bytes run out before
/// the settings are complete.
pub fn decode(data: &[u8]) -> Option<(KeyedSpec, Vec<KeyedOp>)> {
    let mut u = Unstructured::new(data);
    let spec = KeyedSpec::arbitrary(&mut u).ok()?;
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS && !u.is_empty() {
        match KeyedOp::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    Some((spec, ops))
}

/// The mutex twin of `algorithm` under `quota`, or the error the keyed map gives for it.
fn twin(
    algorithm: Algorithm,
    quota: Quota,
    clock: &ManualClock,
) -> Result<Box<dyn Limiter>, QuotaError> {
    let clock = clock.clone();
    Ok(match algorithm {
        Algorithm::TokenBucket => Box::new(MutexTokenBucket::with_clock(quota, clock)),
        Algorithm::FixedWindow => Box::new(MutexFixedWindow::with_clock(quota, clock)),
        Algorithm::SlidingWindow => Box::new(MutexSlidingWindow::try_with_slots(
            quota,
            DEFAULT_SLOTS,
            clock,
        )?),
        Algorithm::SlidingLog => Box::new(MutexSlidingLog::try_with_clock(quota, clock)?),
    })
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("a validated period fits in u64 ns")
}

/// The reference: the keyed map as a `HashMap` of twins, with the bound's rule spelled out.
struct Reference {
    algorithm: Algorithm,
    quota: Quota,
    clock: ManualClock,
    twins: HashMap<u64, Box<dyn Limiter>>,
    /// `(max_keys, when_full, last_sweep_ns, full_misses)`.
    bound: Option<(usize, WhenFull, u64, u64)>,
}

impl Reference {
    /// Whether a twin is back to full capacity at the clock's now: `Slot::is_fresh`, a
    /// zero-cost request whose `reset_after` is zero.
    fn is_fresh(twin: &dyn Limiter) -> bool {
        twin.try_acquire_n(0).reset_after() == Duration::ZERO
    }

    /// Removes the fresh twins; how many.
    fn sweep(&mut self) -> usize {
        let before = self.twins.len();
        self.twins
            .retain(|_, twin| !Reference::is_fresh(twin.as_ref()));
        before - self.twins.len()
    }

    /// `KeyedLimiter::make_room`: may a new key be inserted?
    fn make_room(&mut self, now: u64) -> bool {
        let Some((max_keys, _, last, misses)) = self.bound else {
            return true;
        };
        if self.twins.len() < max_keys {
            return true;
        }
        let misses = misses + 1;
        let due = misses >= (max_keys as u64 / 16).max(1)
            || now.saturating_sub(last) >= nanos(self.quota.period());
        let (last, misses) = if due {
            self.sweep();
            (now, 0)
        } else {
            (last, misses)
        };
        if let Some(bound) = &mut self.bound {
            (bound.2, bound.3) = (last, misses);
        }
        self.twins.len() < max_keys
    }

    /// A request of `n` units for `key`, whose limiter (if new) is made from `quota`.
    fn acquire(&mut self, key: u64, n: u64, quota: Quota) -> Outcome {
        if !self.twins.contains_key(&key) {
            let Ok(fresh) = twin(self.algorithm, quota, &self.clock) else {
                // The map's algorithm cannot represent the plan: denied, nothing inserted.
                return Outcome::exceeds(0, 0);
            };
            let now = self.clock.now_nanos();
            if !self.make_room(now) {
                let (_, when_full, _, _) = self.bound.expect("only a bound says no");
                return match when_full {
                    WhenFull::Deny => {
                        let pass_at = now.saturating_add(nanos(quota.period()));
                        Outcome::denied(0, now, pass_at, 0)
                    }
                    WhenFull::AdmitUntracked => Outcome::from(fresh.try_acquire_n(n)),
                };
            }
            self.twins.insert(key, fresh);
        }
        Outcome::from(self.twins[&key].try_acquire_n(n))
    }
}

/// Decodes `data` and runs the stream; inputs whose map quota tollgate refuses are the
/// `quota` target's business and end here.
///
/// # Panics
/// Wherever the keyed map and the reference disagree.
pub fn run(data: &[u8]) {
    let Some((spec, ops)) = decode(data) else {
        return;
    };
    let Some(quota) = spec.quota.build() else {
        return;
    };
    let algorithm = Algorithm::ALL[usize::from(spec.algorithm % 4)];
    // The sliding log's twin holds `limit` entries per key: keep the work per input bounded.
    let small = |q: &Quota| algorithm != Algorithm::SlidingLog || q.limit() <= MAX_LOG_LIMIT;
    if !small(&quota) {
        return;
    }
    let plans: Vec<Quota> = spec
        .plans
        .iter()
        .filter_map(QuotaSpec::build)
        .filter(small)
        .collect();
    let bound = spec.bound.map(|(k, admit)| {
        let max_keys = 1 + usize::from(k % KEYS);
        let when_full = if admit {
            WhenFull::AdmitUntracked
        } else {
            WhenFull::Deny
        };
        (max_keys, when_full)
    });

    let clock = ManualClock::new();
    let mut builder = KeyedLimiter::<u64>::builder(algorithm, quota);
    if let Some((max_keys, when_full)) = bound {
        let max_keys = NonZeroUsize::new(max_keys).expect("at least one key");
        builder = builder.max_keys(max_keys, when_full);
    }
    let built = builder.build_with_clock(clock.clone());
    let twin_built = twin(algorithm, quota, &clock);
    assert_eq!(
        built.as_ref().err(),
        twin_built.as_ref().err(),
        "{algorithm:?} map vs twin on {quota:?}"
    );
    let Ok(keyed) = built else { return };
    for plan in &plans {
        assert_eq!(
            keyed.check_quota(plan).err(),
            twin(algorithm, *plan, &clock).err(),
            "{algorithm:?} check_quota vs twin on plan {plan:?}"
        );
    }

    let mut reference = Reference {
        algorithm,
        quota,
        clock: clock.clone(),
        twins: HashMap::new(),
        bound: bound.map(|(max_keys, when_full)| (max_keys, when_full, 0, 0)),
    };
    let period_ns = nanos(quota.period());
    let mut now: u64 = 0;
    for (step, &op) in ops.iter().enumerate() {
        match op {
            KeyedOp::Advance(span) => {
                now = now.saturating_add(span.nanos(period_ns));
                clock.set(Duration::from_nanos(now));
            }
            KeyedOp::StepBack(span) => {
                now = now.saturating_sub(span.nanos(period_ns));
                clock.set(Duration::from_nanos(now));
            }
            KeyedOp::Acquire { key, cost } => {
                let key = u64::from(key % KEYS);
                let n = cost.units();
                let got = if n == 1 {
                    keyed.try_acquire(&key)
                } else {
                    keyed.try_acquire_n(&key, n)
                };
                let expected = reference.acquire(key, n, quota);
                assert_eq!(
                    Outcome::from(got),
                    expected,
                    "step {step}: key {key}, {n} units at {now} ns"
                );
            }
            KeyedOp::AcquireWith { key, plan } => {
                if plans.is_empty() {
                    continue;
                }
                let key = u64::from(key % KEYS);
                let plan = plans[usize::from(plan) % plans.len()];
                let got = keyed.try_acquire_with(&key, &plan);
                let expected = reference.acquire(key, 1, plan);
                assert_eq!(
                    Outcome::from(got),
                    expected,
                    "step {step}: key {key}, plan {plan:?} at {now} ns"
                );
            }
            KeyedOp::EvictIdle => {
                let evicted = keyed.evict_idle();
                let expected = reference.sweep();
                assert_eq!(evicted, expected, "step {step}: evicted at {now} ns");
            }
        }
        assert_eq!(keyed.len(), reference.twins.len(), "step {step}: len");
        assert_eq!(
            keyed.is_empty(),
            reference.twins.is_empty(),
            "step {step}: is_empty"
        );
    }
}
