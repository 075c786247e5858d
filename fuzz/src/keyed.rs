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
//!
//! Half the inputs (a flag in the header) build the map
//! [`live()`](tollgate::KeyedBuilder::live) (token bucket or fixed window; the others must
//! refuse it with [`KeyedError::NotLive`]) and change quotas while it runs: `SetQuota`, the
//! map's own with `set_quota` or a plan's with `set_plan_quota`. The reference of a live map
//! holds per key the model of its algorithm that takes `set_quota` ([`crate::model`], as the
//! `live` target drives it), and per plan the model of a key never charged, at the plan's
//! quota in force: a new key of the plan starts as a copy of it. A change goes to the plan's
//! model first; accepted, to every key of the plan at the same instant; refused, with the
//! model's typed error, to none. After every change: `quota()` and every `plan_quota()` equal
//! to the reference's, and a zero-cost request of every key equal to its model's (the carry,
//! seen at once). A map built without `live` refuses every change with `NotLive` and keeps its
//! quotas. The bound's rule reads the quotas in force, as the map does: sweeps are spaced by
//! the period of the map's own quota, and a `Deny` waits the period of the plan the request
//! names.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use arbitrary::Arbitrary;
use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{
    Algorithm, Clock, KeyedError, KeyedLimiter, Limiter, ManualClock, Quota, QuotaError, WhenFull,
    DEFAULT_SLOTS,
};

use crate::differential::MAX_LOG_LIMIT;
use crate::live::QuotaChoice;
use crate::model::{FixedWindowModel, TokenBucketModel};
use crate::{step_back, Cost, Outcome, QuotaSpec, Span};

/// Keys are `0..KEYS`.
pub const KEYS: u8 = 8;

/// One step of a keyed scenario.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum KeyedOp {
    /// The clock moves forward (saturating), by a span of the period of the map's quota in
    /// force.
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
    /// A quota change: `plan % (plans + 2)` picks `set_quota` (0), `set_plan_quota` of the
    /// map's own quota by its name (1), or of plan `plan - 2`; the new quota is drawn relative
    /// to the one in force for that plan.
    SetQuota {
        /// Which plan, mod the number of valid plans plus two.
        plan: u8,
        /// The new quota.
        quota: QuotaChoice,
    },
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
    /// Built [`tollgate::KeyedBuilder::live`].
    pub live: bool,
}

/// Decodes the settings and up to [`MAX_OPS`](crate::MAX_OPS) operations; `None` if the bytes run out before
/// the settings are complete.
pub fn decode(data: &[u8]) -> Option<(KeyedSpec, Vec<KeyedOp>)> {
    crate::settings_and_ops(data)
}

/// The mutex twin of `algorithm` under `quota`, or the error the keyed map gives for it.
/// The map's clock as a key's twin reads it. A twin is made on its key's first request, but the
/// map counts every key's time from its own start (the manual clock's 0 here): so the twin's
/// first reading, the one that sets its origin, reads 0, and every later one the clock.
#[derive(Debug)]
struct FromMapStart {
    clock: ManualClock,
    started: std::sync::atomic::AtomicBool,
}

impl Clock for FromMapStart {
    fn now_nanos(&self) -> u64 {
        // Relaxed: one thread, a flag for the first reading only.
        if self
            .started
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            self.clock.now_nanos()
        } else {
            0
        }
    }
}

pub(crate) fn twin(
    algorithm: Algorithm,
    quota: Quota,
    clock: &ManualClock,
) -> Result<Box<dyn Limiter>, QuotaError> {
    let clock = FromMapStart {
        clock: clock.clone(),
        started: std::sync::atomic::AtomicBool::new(false),
    };
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

/// One key's limiter in a live map's reference: the model of its algorithm that takes
/// `set_quota`, as the `live` target drives it.
#[derive(Clone, Debug)]
enum LiveModel {
    /// A live token bucket, in the tick of its plan's first quota.
    Bucket(TokenBucketModel),
    /// A live fixed window.
    Window(FixedWindowModel),
}

impl LiveModel {
    /// A key never charged, on a plan first made from `quota`; `None` for the algorithms a
    /// live map refuses.
    fn new(algorithm: Algorithm, quota: &Quota) -> Option<LiveModel> {
        match algorithm {
            Algorithm::TokenBucket => Some(LiveModel::Bucket(TokenBucketModel::live(quota))),
            Algorithm::FixedWindow => Some(LiveModel::Window(FixedWindowModel::new(quota))),
            Algorithm::SlidingWindow | Algorithm::SlidingLog => None,
        }
    }

    fn acquire(&mut self, now_ns: u64, n: u64) -> Outcome {
        match self {
            LiveModel::Bucket(m) => m.acquire(now_ns, n),
            LiveModel::Window(m) => m.acquire(now_ns, n),
        }
    }

    /// A change at `now_ns` (a window's count does not depend on the instant).
    fn set_quota(&mut self, quota: &Quota, now_ns: u64) -> Result<(), QuotaError> {
        match self {
            LiveModel::Bucket(m) => m.set_quota(quota, now_ns),
            LiveModel::Window(m) => m.set_quota(quota),
        }
    }
}

/// One key's limiter in the reference.
enum KeyRef {
    /// A map built without `live`: the mutex twin.
    Twin(Box<dyn Limiter>),
    /// A live map: the model, and the name of the key's plan.
    Live { plan: Quota, model: LiveModel },
}

impl KeyRef {
    fn acquire(&mut self, now_ns: u64, n: u64) -> Outcome {
        match self {
            KeyRef::Twin(twin) => Outcome::from(twin.try_acquire_n(n)),
            KeyRef::Live { model, .. } => model.acquire(now_ns, n),
        }
    }

    /// A zero-cost request: nothing charged.
    fn probe(&mut self, now_ns: u64) -> Outcome {
        self.acquire(now_ns, 0)
    }

    /// Whether the limiter is back to full capacity at `now_ns`: `Slot::is_fresh`, a
    /// zero-cost request whose `reset_after` is zero.
    fn is_fresh(&mut self, now_ns: u64) -> bool {
        self.probe(now_ns).reset_after_ns == 0
    }
}

/// A live plan in the reference: its quota in force, and a key of it never charged.
struct PlanRef {
    quota: Quota,
    fresh: LiveModel,
}

/// The reference: the keyed map as a `HashMap` of twins (or, live, of models), with the
/// bound's rule spelled out.
struct Reference {
    algorithm: Algorithm,
    quota: Quota,
    clock: ManualClock,
    keys: HashMap<u64, KeyRef>,
    /// A live map's plans by name, made on first use; `None` if not live.
    live: Option<HashMap<Quota, PlanRef>>,
    /// `(max_keys, when_full, last_sweep_ns, full_misses)`.
    bound: Option<(usize, WhenFull, u64, u64)>,
}

impl Reference {
    /// Removes the fresh limiters; how many.
    fn sweep(&mut self) -> usize {
        let now = self.clock.now_nanos();
        let before = self.keys.len();
        self.keys.retain(|_, key| !key.is_fresh(now));
        before - self.keys.len()
    }

    /// `KeyedLimiter::make_room`: may a new key be inserted?
    fn make_room(&mut self, now: u64) -> bool {
        let Some((max_keys, _, last, misses)) = self.bound else {
            return true;
        };
        if self.keys.len() < max_keys {
            return true;
        }
        let misses = misses + 1;
        let due = misses >= (max_keys as u64 / 16).max(1)
            || now.saturating_sub(last) >= nanos(self.plan_quota(&self.quota).period());
        let (last, misses) = if due {
            self.sweep();
            (now, 0)
        } else {
            (last, misses)
        };
        if let Some(bound) = &mut self.bound {
            (bound.2, bound.3) = (last, misses);
        }
        self.keys.len() < max_keys
    }

    /// A live map's plan named `name`, made at `name` on its first use.
    fn plan(&mut self, name: Quota) -> Option<&mut PlanRef> {
        let algorithm = self.algorithm;
        let plans = self.live.as_mut()?;
        Some(plans.entry(name).or_insert_with(|| PlanRef {
            quota: name,
            fresh: LiveModel::new(algorithm, &name).expect("a live map's algorithm"),
        }))
    }

    /// A new key's limiter, made from `quota`: a twin, or a copy of the live plan's fresh key.
    fn fresh(&mut self, quota: Quota) -> Result<KeyRef, QuotaError> {
        if let Some(plan) = self.plan(quota) {
            let model = plan.fresh.clone();
            return Ok(KeyRef::Live { plan: quota, model });
        }
        twin(self.algorithm, quota, &self.clock).map(KeyRef::Twin)
    }

    /// A request of `n` units for `key`, whose limiter (if new) is made from `quota`.
    fn acquire(&mut self, key: u64, n: u64, quota: Quota) -> Outcome {
        let now = self.clock.now_nanos();
        if !self.keys.contains_key(&key) {
            let Ok(mut fresh) = self.fresh(quota) else {
                // The map's algorithm cannot represent the plan: denied, nothing inserted.
                return Outcome::exceeds(0, 0);
            };
            if !self.make_room(now) {
                let (_, when_full, _, _) = self.bound.expect("only a bound says no");
                return match when_full {
                    // The period of the plan's quota in force.
                    WhenFull::Deny => {
                        let pass_at = now.saturating_add(nanos(self.plan_quota(&quota).period()));
                        Outcome::denied(0, now, pass_at, 0)
                    }
                    WhenFull::AdmitUntracked => fresh.acquire(now, n),
                };
            }
            self.keys.insert(key, fresh);
        }
        self.keys
            .get_mut(&key)
            .expect("inserted above")
            .acquire(now, n)
    }

    /// A change of the plan named `name` to `quota`: the plan's fresh key first (it says
    /// whether the change is refused, and with which error), then every key of the plan, at
    /// the same instant. A map built without `live` refuses every change.
    fn set_quota(&mut self, name: Quota, quota: &Quota) -> Result<(), KeyedError> {
        let now = self.clock.now_nanos();
        let Some(plan) = self.plan(name) else {
            return Err(KeyedError::NotLive);
        };
        plan.fresh.set_quota(quota, now)?;
        plan.quota = *quota;
        for (key, limiter) in &mut self.keys {
            let KeyRef::Live { plan, model } = limiter else {
                unreachable!("a live map's keys are models");
            };
            if *plan == name {
                assert_eq!(
                    model.set_quota(quota, now),
                    Ok(()),
                    "key {key}: a change its plan accepts"
                );
            }
        }
        Ok(())
    }

    /// The quota in force for the plan named `name`.
    fn plan_quota(&self, name: &Quota) -> Quota {
        self.live
            .as_ref()
            .and_then(|plans| plans.get(name))
            .map_or(*name, |plan| plan.quota)
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
    if spec.live {
        builder = builder.live();
    }
    // The same map again on a clock whose zero is far before its start (an offset of whole
    // windows or slots of the map's quota, which its windows align to): every answer equal.
    let grain = match algorithm {
        Algorithm::FixedWindow => nanos(quota.period()),
        Algorithm::SlidingWindow => {
            nanos(quota.period()).div_ceil(u64::from(tollgate::DEFAULT_SLOTS))
        }
        Algorithm::TokenBucket | Algorithm::SlidingLog => 1,
    };
    let offset = crate::clock_offset(data, grain);
    let far_clock = ManualClock::new();
    far_clock.set(Duration::from_nanos(offset));
    let far = builder.clone().build_with_clock(far_clock.clone());
    let built = builder.build_with_clock(clock.clone());
    assert_eq!(
        far.as_ref().err(),
        built.as_ref().err(),
        "the far map's build"
    );
    let live_model = LiveModel::new(algorithm, &quota);
    let twin_built = twin(algorithm, quota, &clock);
    let expected = match (spec.live, &live_model) {
        (true, None) => Some(KeyedError::NotLive),
        _ => twin_built.as_ref().err().map(|e| KeyedError::Quota(*e)),
    };
    assert_eq!(
        built.as_ref().err().copied(),
        expected,
        "{algorithm:?} map (live: {}) vs twin on {quota:?}",
        spec.live
    );
    let (Ok(keyed), Ok(far)) = (built, far) else {
        return;
    };
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
        keys: HashMap::new(),
        live: spec.live.then(HashMap::new),
        bound: bound.map(|(max_keys, when_full)| (max_keys, when_full, 0, 0)),
    };
    let mut now: u64 = 0;
    for (step, &op) in ops.iter().enumerate() {
        // Spans of the period of the map's quota in force.
        let period_ns = nanos(reference.plan_quota(&quota).period());
        match op {
            KeyedOp::Advance(span) => {
                now = now.saturating_add(span.nanos(period_ns));
                clock.set(Duration::from_nanos(now));
                far_clock.set(Duration::from_nanos(offset.saturating_add(now)));
            }
            KeyedOp::StepBack(span) => {
                // Below the start, the far clock reads before its map's origin: as the origin.
                let far_reading = step_back(&mut now, span.nanos(period_ns), offset);
                clock.set(Duration::from_nanos(now));
                far_clock.set(Duration::from_nanos(far_reading));
            }
            KeyedOp::Acquire { key, cost } => {
                let key = u64::from(key % KEYS);
                let n = cost.units();
                let got = if n == 1 {
                    keyed.try_acquire(&key)
                } else {
                    keyed.try_acquire_n(&key, n)
                };
                let far_got = if n == 1 {
                    far.try_acquire(&key)
                } else {
                    far.try_acquire_n(&key, n)
                };
                assert_eq!(
                    got, far_got,
                    "step {step}: key {key}, {n} units at {now} ns, far"
                );
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
                let far_got = far.try_acquire_with(&key, &plan);
                assert_eq!(got, far_got, "step {step}: key {key}, plan {plan:?}, far");
                let expected = reference.acquire(key, 1, plan);
                assert_eq!(
                    Outcome::from(got),
                    expected,
                    "step {step}: key {key}, plan {plan:?} at {now} ns"
                );
            }
            KeyedOp::EvictIdle => {
                let evicted = keyed.evict_idle();
                assert_eq!(
                    evicted,
                    far.evict_idle(),
                    "step {step}: evicted at {now} ns, far"
                );
                let expected = reference.sweep();
                assert_eq!(evicted, expected, "step {step}: evicted at {now} ns");
            }
            KeyedOp::SetQuota {
                plan,
                quota: choice,
            } => {
                let which = usize::from(plan) % (plans.len() + 2);
                let name = which.checked_sub(2).map_or(quota, |i| plans[i]);
                let Some(new) = choice.build(&reference.plan_quota(&name)) else {
                    continue;
                };
                let got = if which == 0 {
                    keyed.set_quota(new)
                } else {
                    keyed.set_plan_quota(&name, new)
                };
                let far_got = if which == 0 {
                    far.set_quota(new)
                } else {
                    far.set_plan_quota(&name, new)
                };
                assert_eq!(
                    got, far_got,
                    "step {step}: {name:?} changed to {new:?}, far"
                );
                let expected = reference.set_quota(name, &new);
                assert_eq!(
                    got, expected,
                    "step {step}: plan {name:?} changed to {new:?} at {now} ns"
                );
                check_quotas(&keyed, &reference, quota, &plans, step);
                // The change carried every key of the plan (or, refused, none): a zero-cost
                // request of each sees the level it left.
                let mut keys: Vec<u64> = reference.keys.keys().copied().collect();
                keys.sort_unstable();
                for key in keys {
                    let got = Outcome::from(keyed.try_acquire_n(&key, 0));
                    assert_eq!(
                        got,
                        Outcome::from(far.try_acquire_n(&key, 0)),
                        "step {step}: far"
                    );
                    let expected = reference
                        .keys
                        .get_mut(&key)
                        .expect("listed above")
                        .probe(now);
                    assert_eq!(
                        got, expected,
                        "step {step}: key {key} after {name:?} changed to {new:?} \
                         at {now} ns"
                    );
                }
            }
        }
        assert_eq!(keyed.len(), reference.keys.len(), "step {step}: len");
        assert_eq!(far.len(), keyed.len(), "step {step}: len, far");
        assert_eq!(
            keyed.is_empty(),
            reference.keys.is_empty(),
            "step {step}: is_empty"
        );
    }
}

/// `quota()` and every plan's `plan_quota()` equal to the reference's.
fn check_quotas(
    keyed: &KeyedLimiter<u64, ManualClock>,
    reference: &Reference,
    quota: Quota,
    plans: &[Quota],
    step: usize,
) {
    assert_eq!(
        keyed.quota(),
        reference.plan_quota(&quota),
        "step {step}: quota()"
    );
    for plan in plans {
        assert_eq!(
            keyed.plan_quota(plan),
            reference.plan_quota(plan),
            "step {step}: plan_quota({plan:?})"
        );
    }
}
