//! `Leased` against `MutexTokenBucket` on the same stream, with up to 4 virtual threads.
//!
//! A virtual thread is an OS thread that runs one request at a time when the target hands it
//! one and waits for the answer: the stream stays one deterministic sequence while every
//! thread keeps its own thread-local lease, as in production. Ending one gives its lease back.
//!
//! Checked on every step:
//! - each admission of `Leased` keeps `admitted[a, b] ≤ burst + rate·(b − a) + max_overshoot()`
//!   over every stretch of non-decreasing clock readings (a bucket whose clock steps back
//!   forgets by design); the twin keeps the exact bound ([`Bound::Bucket`]);
//! - a cost above the burst is refused as such by both;
//! - a give-back never lifts the bucket above its burst;
//! - at a frozen instant from a full bucket, at most the burst is admitted.

use std::sync::Arc;
use std::time::Duration;

use arbitrary::Arbitrary;
use tollgate::baseline::MutexTokenBucket;
use tollgate::{Clock, Lease, Leased, Limiter, ManualClock, TokenBucket};

mod harness;

use self::harness::{Cmd, Envelope, Worker};
use crate::invariants::{Bound, Ledger};
use crate::{Cost, Num, QuotaSpec, Span};

/// Virtual threads: at most this many.
pub const MAX_THREADS: u8 = 4;

/// One step.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum LeasedOp {
    /// Virtual thread `thread % threads` asks for a cost.
    Acquire {
        /// Which thread.
        thread: u8,
        /// The cost.
        cost: Cost,
    },
    /// The clock moves forward.
    Advance(Span),
    /// The clock moves backward (saturating at zero).
    StepBack(Span),
    /// A thread gives its lease back now.
    GiveBack {
        /// Which thread.
        thread: u8,
    },
    /// A thread exits (its lease goes back) and a fresh one takes its place.
    Exit {
        /// Which thread.
        thread: u8,
    },
}

/// The lease policy as numbers, before validation.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct LeaseSpec {
    /// Tokens per lease.
    pub tokens: Num,
    /// Time to live in ns.
    pub ttl: Span,
    /// The cap on parked tokens, if set.
    pub cap: Option<Num>,
    /// Spends between clock reads, `1 + v % 16` if set.
    pub clock_every: Option<u8>,
    /// Virtual threads, `1 + v % MAX_THREADS`.
    pub threads: u8,
}

/// Decodes the quota, the lease policy and up to [`MAX_OPS`](crate::MAX_OPS) steps; `None` if
/// the bytes run out before the policy is complete.
pub fn decode(data: &[u8]) -> Option<((QuotaSpec, LeaseSpec), Vec<LeasedOp>)> {
    crate::settings_and_ops(data)
}

impl LeaseSpec {
    /// The policy, if `Lease` accepts these numbers (errors are typed, never a panic).
    fn build(&self, period_ns: u64) -> Option<Lease> {
        let tokens = self.tokens.get();
        let ttl = Duration::from_nanos(self.ttl.nanos(period_ns));
        let mut lease = match Lease::try_new(tokens, ttl) {
            Ok(lease) => lease,
            Err(e) => {
                assert!(
                    tokens == 0 || ttl.is_zero(),
                    "refused {tokens}, {ttl:?}: {e}"
                );
                return None;
            }
        };
        if let Some(cap) = self.cap {
            lease = lease.with_max_parked(cap.get()).ok()?;
        }
        if let Some(every) = self.clock_every {
            lease = lease
                .with_clock_every(1 + u32::from(every) % 16)
                .expect("at least 1");
        }
        Some(lease)
    }
}

/// The target.
pub fn run(data: &[u8]) {
    let Some(((quota, lease_spec), ops)) = decode(data) else {
        return;
    };
    let Some(quota) = quota.build() else {
        return;
    };
    let period_ns = u64::try_from(quota.period().as_nanos()).expect("a quota's period fits");
    let Some(lease) = lease_spec.build(period_ns) else {
        return;
    };
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(quota, clock.clone());
    let limiter = match Leased::try_new(bucket, lease) {
        Ok(l) => Arc::new(l),
        Err(_) => {
            assert!(lease.max_tokens() > quota.burst());
            let bucket = TokenBucket::with_clock(quota, clock.clone());
            Arc::new(Leased::new(bucket, lease))
        }
    };
    let twin = MutexTokenBucket::with_clock(quota, clock.clone());
    let mut envelope = Envelope::new(&quota, limiter.max_overshoot());
    let mut exact = Ledger::new(Bound::Bucket, &quota);
    let threads = 1 + lease_spec.threads % MAX_THREADS;
    let mut workers: Vec<Worker> = (0..threads)
        .map(|_| Worker::spawn(limiter.clone()))
        .collect();
    // Units admitted since the clock last moved, while it has never moved: a fresh bucket at
    // one instant gives at most its burst, leases or not.
    let mut frozen = Some(0u64);
    for op in ops {
        let now = clock.now_nanos();
        match op {
            LeasedOp::Acquire { thread, cost } => {
                let n = cost.units();
                let w = usize::from(thread) % workers.len();
                let (got, _) = workers[w].run(Cmd::Acquire(n));
                let reference = twin.try_acquire_n(n);
                assert_eq!(got.exceeds_capacity(), reference.exceeds_capacity());
                if got.is_allowed() && n > 0 {
                    if let Err(e) = envelope.admit(now, n) {
                        panic!("Leased: {e}");
                    }
                    if let Some(f) = frozen.as_mut() {
                        *f += n;
                        assert!(*f <= quota.burst(), "{f} admitted at one instant");
                    }
                }
                if reference.is_allowed() {
                    exact.admitted(now, n);
                }
            }
            LeasedOp::Advance(span) => {
                clock.advance(Duration::from_nanos(span.nanos(period_ns)));
                frozen = frozen.filter(|_| clock.now_nanos() == now);
            }
            LeasedOp::StepBack(span) => {
                clock.set(Duration::from_nanos(
                    now.saturating_sub(span.nanos(period_ns)),
                ));
                frozen = frozen.filter(|_| clock.now_nanos() == now);
            }
            LeasedOp::GiveBack { thread } => {
                let w = usize::from(thread) % workers.len();
                let (level, credited) = workers[w].run(Cmd::GiveBack);
                assert!(
                    level.remaining() + credited <= quota.burst(),
                    "give-back of {credited} to a bucket of {} lifted it above the burst {}",
                    level.remaining(),
                    quota.burst()
                );
            }
            LeasedOp::Exit { thread } => {
                let w = usize::from(thread) % workers.len();
                workers.swap_remove(w).exit();
                workers.push(Worker::spawn(limiter.clone()));
            }
        }
    }
    for w in workers {
        w.exit();
    }
    exact.check();
}
