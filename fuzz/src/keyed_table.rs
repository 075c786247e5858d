//! The keyed table target: a stream of requests over 300 keys and clock moves, applied to a
//! [`KeyedTable`] (token bucket or fixed window, made for 1 to 170 keys, either
//! [`WhenFull`]) of 256 slots, every key's whole search, so that the keys compete for all of
//! them: keys find their slot, take unused ones, take idle ones over, and find none.
//!
//! The reference is written for clarity: the 256 slots, each empty or holding a key and its
//! mutex twin (`tollgate::baseline`), searched by each key from its home bucket (the table's
//! rule: its tag mixed by murmur3's finalizer, scaled to the 64 buckets of 4), with the
//! table's rules spelled out. A key with a slot is decided by its twin. A key without one: a zero cost, or a request a fresh
//! limiter would not admit, is answered by a fresh twin and takes nothing; otherwise it takes, once the table
//! holds the keys it was made for, the first slot whose twin is back to full capacity before
//! the first empty slot, else that empty slot, else the first full-capacity one; with none,
//! [`WhenFull`] decides. Checked on every step: the decision equal to the reference's (all
//! fields), `len()` equal to the slots ever filled, and the same table on a clock whose zero
//! is far before its start answering the same.

use std::time::Duration;

use arbitrary::Arbitrary;
use tollgate::{Algorithm, Clock, KeyedTable, Limiter, ManualClock, Quota, WhenFull};
use tollgate_test_support::BuildShifted;

use crate::keyed::twin;
use crate::{step_back, Cost, Outcome, QuotaSpec, Span};

/// Buckets of 4 slots in a table made for at most 170 keys: every key's whole search.
const BUCKETS: usize = 64;

/// Keys are `0..KEYS`, asked as `key + 2` (under the identity hash, 0 and 1 would share a tag).
const KEYS: u16 = 300;

/// Where `tag`'s search starts: the table's rule, spelled out.
fn home(tag: u64) -> usize {
    let mut h = tag;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    ((u128::from(h) * BUCKETS as u128) >> 64) as usize
}

/// One step of a table scenario.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum TableOp {
    /// The clock moves forward (saturating), by a span of the quota's period.
    Advance(Span),
    /// The clock moves backward (saturating at zero).
    StepBack(Span),
    /// Ask for `cost` units for key `key % KEYS` (`try_acquire` for one unit, else
    /// `try_acquire_n`).
    Acquire {
        /// The key, mod [`KEYS`].
        key: u16,
        /// The cost.
        cost: Cost,
    },
}

/// The table's settings, decoded first.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct TableSpec {
    /// Fixed window if odd, token bucket if even.
    pub window: bool,
    /// The quota.
    pub quota: QuotaSpec,
    /// Made for `1 + keys % 170` keys.
    pub keys: u8,
    /// `AdmitUntracked` if true, `Deny` if false.
    pub admit_untracked: bool,
}

/// Decodes the settings and up to [`MAX_OPS`](crate::MAX_OPS) operations.
pub fn decode(data: &[u8]) -> Option<(TableSpec, Vec<TableOp>)> {
    crate::settings_and_ops(data)
}

/// The reference: the region's slots in scan order.
struct Reference {
    algorithm: Algorithm,
    quota: Quota,
    clock: ManualClock,
    when_full: WhenFull,
    made_for: usize,
    slots: Vec<Option<(u64, Box<dyn Limiter>)>>,
    filled: usize,
}

impl Reference {
    /// A fresh twin reading the table's time (its zero is the table's start).
    fn fresh(&self) -> Box<dyn Limiter> {
        twin(self.algorithm, self.quota, &self.clock).expect("both algorithms take every quota")
    }

    /// Whether slot `i`'s limiter is back to full capacity: a zero-cost request whose
    /// `reset_after` is zero.
    fn idle(&self, i: usize) -> bool {
        self.slots[i]
            .as_ref()
            .is_some_and(|(_, twin)| twin.try_acquire_n(0).reset_after().is_zero())
    }

    fn acquire(&mut self, key: u64, n: u64) -> Outcome {
        if let Some((_, twin)) = self.slots.iter().flatten().find(|(k, _)| *k == key) {
            return Outcome::from(twin.try_acquire_n(n));
        }
        let fresh = self.fresh();
        let first = fresh.try_acquire_n(n);
        if n == 0 || !first.is_allowed() {
            return Outcome::from(first);
        }
        // The key's search: every slot, from its home bucket on.
        let start = home(key) * 4;
        let order: Vec<usize> = (0..4 * BUCKETS)
            .map(|i| (start + i) % (4 * BUCKETS))
            .collect();
        let unused = order.iter().position(|&i| self.slots[i].is_none());
        let before_unused = &order[..unused.unwrap_or(order.len())];
        let idle = before_unused.iter().copied().find(|&i| self.idle(i));
        let holds_its_keys = self.filled >= self.made_for;
        let take = match (unused, idle) {
            (Some(_), Some(i)) if holds_its_keys => Some(i),
            (Some(u), _) => {
                self.filled += 1;
                Some(order[u])
            }
            (None, idle) => idle,
        };
        match take {
            Some(i) => {
                self.slots[i] = Some((key, fresh));
                Outcome::from(first)
            }
            None => match self.when_full {
                WhenFull::Deny => {
                    let now = self.clock.now_nanos();
                    let period = u64::try_from(self.quota.period().as_nanos()).unwrap();
                    Outcome::denied(0, now, now.saturating_add(period), 0)
                }
                WhenFull::AdmitUntracked => Outcome::from(first),
            },
        }
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((spec, ops)) = decode(data) else {
        return;
    };
    let Some(quota) = spec.quota.build() else {
        return;
    };
    let (algorithm, grain) = if spec.window {
        let period = u64::try_from(quota.period().as_nanos()).unwrap();
        (Algorithm::FixedWindow, period)
    } else {
        (Algorithm::TokenBucket, 1)
    };
    let when_full = if spec.admit_untracked {
        WhenFull::AdmitUntracked
    } else {
        WhenFull::Deny
    };
    let made_for = 1 + usize::from(spec.keys % 170);
    let table_on = |clock: &ManualClock| {
        KeyedTable::<u64, _>::try_with_clock(
            algorithm,
            quota,
            std::num::NonZeroUsize::new(made_for).unwrap(),
            clock.clone(),
        )
        .expect("both algorithms take every quota")
        .with_hasher(BuildShifted::<0>::default())
        .when_full(when_full)
    };
    let clock = ManualClock::new();
    let table = table_on(&clock);
    // The same table on a clock whose zero is far before its start (whole windows earlier).
    let offset = crate::clock_offset(data, grain);
    let far_clock = ManualClock::new();
    far_clock.set(Duration::from_nanos(offset));
    let far = table_on(&far_clock);
    let mut reference = Reference {
        algorithm,
        quota,
        clock: clock.clone(),
        when_full,
        made_for,
        slots: (0..4 * BUCKETS).map(|_| None).collect(),
        filled: 0,
    };
    let period_ns = u64::try_from(quota.period().as_nanos()).unwrap();
    let mut now: u64 = 0;
    for (step, &op) in ops.iter().enumerate() {
        match op {
            TableOp::Advance(span) => {
                now = now.saturating_add(span.nanos(period_ns));
                clock.set(Duration::from_nanos(now));
                far_clock.set(Duration::from_nanos(offset.saturating_add(now)));
            }
            TableOp::StepBack(span) => {
                let far_reading = step_back(&mut now, span.nanos(period_ns), offset);
                clock.set(Duration::from_nanos(now));
                far_clock.set(Duration::from_nanos(far_reading));
            }
            TableOp::Acquire { key, cost } => {
                let k = u64::from(key % KEYS) + 2;
                let n = cost.units();
                let (got, far_got) = if n == 1 {
                    (table.try_acquire(&k), far.try_acquire(&k))
                } else {
                    (table.try_acquire_n(&k, n), far.try_acquire_n(&k, n))
                };
                assert_eq!(
                    got, far_got,
                    "step {step}: key {k}, {n} units at {now} ns, far"
                );
                let expected = reference.acquire(k, n);
                assert_eq!(
                    Outcome::from(got),
                    expected,
                    "step {step}: key {k}, {n} units at {now} ns"
                );
                assert_eq!(table.len(), reference.filled, "step {step}: len");
            }
        }
    }
}
