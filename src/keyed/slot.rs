//! One key's limiter in the keyed map, and the protocol that lets it be evicted while requests
//! race it.
//!
//! # The problem
//!
//! `evict_idle` removes a key whose limiter is fresh (full capacity at the map's now). A request
//! that found the slot in the map just before the removal would otherwise record its admission
//! on the removed, orphaned limiter; the key's next request makes a new, full limiter, and the
//! admission is lost: an over-admission. The slot's state word makes every such request notice
//! the eviction and redo its admission on the new limiter.
//!
//! # Layout
//!
//! A slot is an enum over the algorithms' clock-less cores; every variant starts with the same
//! 32-bit state word, which shares the enum's first 8 bytes with the tag:
//!
//! | bytes | field   | meaning                                                          |
//! |-------|---------|------------------------------------------------------------------|
//! | 0     | tag     | which algorithm (the enum discriminant)                          |
//! | 4..8  | `state` | the eviction state word (below)                                  |
//! | 8..48 | core    | `TokenBucketCore` (40 B) or `FixedWindowCore` (32 B) inline; the  |
//! |       |         | sliding window and log, which own heap rings anyway, boxed (8 B)  |
//!
//! 48 bytes in all (checked by a unit test); the rest of the state words are the core's own.
//!
//! ## State word
//!
//! | bits  | field   | meaning                                                           |
//! |-------|---------|-------------------------------------------------------------------|
//! | 0..2  | `phase` | `LIVE = 0`, `EVICTING = 1`, `EVICTED = 2`                         |
//! | 2..32 | `round` | eviction attempts on this slot so far, wrapping at 2^30           |
//!
//! | phase      | set by                                             | means                   |
//! |------------|----------------------------------------------------|-------------------------|
//! | `LIVE`     | creation; an evictor backing off; a requester      | requests decide here    |
//! |            | cancelling an eviction                             |                         |
//! | `EVICTING` | an evictor, CAS from `LIVE`, with `round + 1`      | that evictor re-checks  |
//! | `EVICTED`  | that evictor, CAS from its own `EVICTING`          | final: being removed    |
//!
//! The round makes each `EVICTING` value unique to one evictor: without it, an evictor whose
//! attempt a requester cancelled could later complete a *newer* evictor's `EVICTING` with its
//! own stale freshness check (ABA). loom found exactly that with two sweeps and a request.
//! A wrap needs 2^30 eviction attempts on one slot while one evictor stalls mid-attempt.
//!
//! # Protocol
//!
//! Requester (after the map lookup, clock read once):
//! 1. decide on the core (its own lock-free step); a denial or a zero cost wrote nothing and
//!    returns at once;
//! 2. an admission then does `state.fetch_add(0, Release)`: an RMW, so it reads the latest
//!    state in the word's modification order, and it publishes the core write to any evictor
//!    whose CAS comes later in that order;
//! 3. `LIVE`: done. `EVICTING`: cancel that attempt by CAS to `LIVE` (same round); success, or
//!    a failure that reads anything but `EVICTED`, means the admission stays on this core (a
//!    newer attempt's CAS came after the RMW, so it sees the admission): done. `EVICTED`
//!    (read directly or by the failed cancel): the admission may be on an orphan: remove the
//!    entry (helping the evictor) and redo the whole request on the key's new limiter.
//!
//! Evictor (for each entry, at the map's now):
//! 1. pre-filter: phase `LIVE` and core fresh (read-only loads; just a hint);
//! 2. CAS `(round, LIVE) → (round + 1, EVICTING)` with `Acquire`;
//! 3. re-check freshness; fresh: CAS its `EVICTING` value to `EVICTED`, and on success remove
//!    the entry; not fresh: CAS it back to `LIVE`. A failed final CAS means a requester
//!    cancelled: the key stays.
//!
//! # Why no request is lost
//!
//! Every write to `state` after creation is an RMW, so the requester's step-2 RMW (`Release`)
//! and the evictor's step-2 CAS (`Acquire`) are ordered in the word's modification order:
//! - the RMW first: the evictor's CAS reads from the RMW's release sequence, so the
//!   requester's core write happens-before the evictor's re-check, which sees the admission
//!   (not fresh: it backs off), unless the admission has already expired at the evictor's now
//!   (then the limiter really is as good as new; the requester redoes, see below);
//! - the CAS first: the requester's RMW reads that attempt's `EVICTING` (or `EVICTED`) and
//!   either cancels it or redoes its admission on the new limiter.
//!
//! So an admission is always recorded on the limiter that stays in the map. At one instant it
//! is recorded exactly once. Across instants, a request that raced the eviction of a key whose
//! admissions had all expired by the evictor's now may be counted a second time on the new
//! limiter: a conservative error (a unit taken, never one handed out), only in that double race.
//! Denials write nothing, so they need no check: a denial by an orphan is a denial the key's
//! limiter gave at the requester's now (a requester that redoes never returns to the orphan:
//! it removes it from the map first).
//!
//! The loom model in `loom-tests/tests/keyed_slot.rs` checks this with 2–3 threads, with the map
//! replaced by a one-entry cell, and catches three planted broken variants (no requester
//! check, no evictor re-check, no round).
//!
//! # Orderings
//!
//! - requester RMW: `Release` (publishes its core write); its value is the latest by RMW
//!   atomicity, so no `Acquire` is needed: nothing is read through it.
//! - requester cancel CAS: `Relaxed`: it only decides who wins that `EVICTING`.
//! - evictor pre-filter load: `Relaxed`: a hint, the CAS decides.
//! - evictor `LIVE → EVICTING`: `Acquire` on success: synchronizes with the requesters' RMWs.
//! - evictor `EVICTING → EVICTED / LIVE`: `Relaxed`: they publish nothing; the entry's removal
//!   is published by the map.

use core::time::Duration;

use crate::algo::fixed_window::FixedWindowCore;
use crate::algo::sliding_log::SlidingLogCore;
use crate::algo::sliding_window::SlidingWindowCore;
use crate::algo::token_bucket::TokenBucketCore;
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::sync::{AtomicU32, Ordering};

use super::Algorithm;

const LIVE: u32 = 0;
const EVICTING: u32 = 1;
const EVICTED: u32 = 2;
const PHASE: u32 = 0b11;
const ROUND: u32 = 1 << 2;

#[inline]
fn phase(state: u32) -> u32 {
    state & PHASE
}

/// The same round in another phase.
#[inline]
fn with_phase(state: u32, phase: u32) -> u32 {
    state & !PHASE | phase
}

/// One key's limiter: the slot state word and the algorithm's core (see the module docs).
#[derive(Debug)]
pub(crate) enum Slot {
    TokenBucket(AtomicU32, TokenBucketCore),
    FixedWindow(AtomicU32, FixedWindowCore),
    SlidingWindow(AtomicU32, Box<SlidingWindowCore>),
    SlidingLog(AtomicU32, Box<SlidingLogCore>),
}

/// What a request on one slot came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The decision stands: it is recorded on the limiter that stays in the map.
    Decided(Decision),
    /// The slot was evicted under the request: remove it from the map and redo the request.
    Evicted,
}

impl Slot {
    /// A fresh slot for `algorithm` under `quota`.
    pub(crate) fn new(algorithm: Algorithm, quota: &Quota) -> Result<Slot, QuotaError> {
        let live = || AtomicU32::new(LIVE);
        Ok(match algorithm {
            Algorithm::TokenBucket => Slot::TokenBucket(live(), TokenBucketCore::new(quota)),
            Algorithm::FixedWindow => Slot::FixedWindow(live(), FixedWindowCore::new(quota)),
            Algorithm::SlidingWindow => {
                Slot::SlidingWindow(live(), Box::new(SlidingWindowCore::new(quota)))
            }
            Algorithm::SlidingLog => {
                Slot::SlidingLog(live(), Box::new(SlidingLogCore::try_new(quota)?))
            }
        })
    }

    #[inline]
    fn state(&self) -> &AtomicU32 {
        match self {
            Slot::TokenBucket(s, _)
            | Slot::FixedWindow(s, _)
            | Slot::SlidingWindow(s, _)
            | Slot::SlidingLog(s, _) => s,
        }
    }

    /// The core's own decision, with no slot protocol: static dispatch over the enum.
    #[inline]
    pub(crate) fn decide(&self, now_ns: u64, n: u64) -> Decision {
        match self {
            Slot::TokenBucket(_, core) => core.acquire(now_ns, n),
            Slot::FixedWindow(_, core) => core.acquire(now_ns, n),
            Slot::SlidingWindow(_, core) => core.acquire(now_ns, n),
            Slot::SlidingLog(_, core) => core.acquire(now_ns, n),
        }
    }

    /// Whether the limiter is at full capacity at `now_ns`: as good as a new one.
    ///
    /// A zero-cost request is read-only for every core and reports, in `reset_after`, how long
    /// until full capacity: zero exactly when the limiter is full (token bucket: `tat ≤ now`;
    /// fixed window: nothing counted; sliding window and log: no live admission). (The
    /// sliding log's zero-cost request may take its per-limiter lock if it races a writer;
    /// that changes nothing it stores.)
    #[inline]
    pub(crate) fn is_fresh(&self, now_ns: u64) -> bool {
        self.decide(now_ns, 0).reset_after() == Duration::ZERO
    }

    /// A request of cost `n` at `now_ns` (see the module's protocol).
    #[inline]
    pub(crate) fn acquire(&self, now_ns: u64, n: u64) -> Attempt {
        let decision = self.decide(now_ns, n);
        if n == 0 || !decision.is_allowed() {
            // Nothing was written: nothing can be lost.
            return Attempt::Decided(decision);
        }
        self.confirm(decision)
    }

    /// Step 2–3 of the requester: is the admission just written on the map's limiter?
    #[inline]
    fn confirm(&self, decision: Decision) -> Attempt {
        // Release: publishes the core write to an evictor whose CAS follows in the word's
        // modification order; as an RMW it reads the latest state, so no Acquire is needed.
        let state = self.state().fetch_add(0, Ordering::Release);
        match phase(state) {
            LIVE => Attempt::Decided(decision),
            EVICTING => self.cancel_eviction(state, decision),
            _ => Attempt::Evicted,
        }
    }

    #[cold]
    fn cancel_eviction(&self, evicting: u32, decision: Decision) -> Attempt {
        // Relaxed: it only decides whether that evictor or this requester wins its attempt.
        match self.state().compare_exchange(
            evicting,
            with_phase(evicting, LIVE),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Err(now) if phase(now) == EVICTED => Attempt::Evicted,
            // Cancelled, backed off, or a newer attempt that began after our RMW (it sees us).
            _ => Attempt::Decided(decision),
        }
    }

    /// The evictor's steps: true if the slot is now `EVICTED` and its entry must be removed.
    pub(crate) fn try_evict(&self, now_ns: u64) -> bool {
        let state = self.state();
        // Relaxed: a cheap pre-filter; the CAS below decides.
        let live = state.load(Ordering::Relaxed);
        if phase(live) != LIVE || !self.is_fresh(now_ns) {
            return false;
        }
        let evicting = with_phase(live.wrapping_add(ROUND), EVICTING);
        // Acquire: reads from the release sequence of the requesters' RMWs that precede it,
        // so their core writes are visible to the re-check below.
        if state
            .compare_exchange(live, evicting, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        let (next, evicted) = if self.is_fresh(now_ns) {
            (with_phase(evicting, EVICTED), true)
        } else {
            (with_phase(evicting, LIVE), false)
        };
        // Relaxed: publishes nothing (a requester that loses retries through the map);
        // failure means a requester cancelled this attempt.
        let done = state
            .compare_exchange(evicting, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        evicted && done
    }
}

/// The slot protocol for loom models (`loom-tests/tests/keyed_slot.rs`): a slot over a token
/// bucket, the correct protocol and three planted broken variants. Only under `--cfg tollgate_loom`.
#[cfg(tollgate_loom)]
pub mod loom_model {
    use super::*;

    /// Which protocol a model thread runs.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Variant {
        /// The protocol of the module docs.
        Correct,
        /// Broken: the requester trusts its admission without the state RMW.
        RequesterSkipsCheck,
        /// Broken: the evictor marks `EVICTED` on its pre-check alone, with no re-check.
        EvictorSkipsRecheck,
        /// Broken: the evictor's `EVICTING` does not bump the round (the ABA loom found).
        EvictorWithoutRound,
    }

    /// A keyed slot over a token bucket of `limit` per second.
    #[derive(Debug)]
    pub struct ModelSlot(Slot);

    impl ModelSlot {
        /// A fresh slot: a token bucket of `limit` per second.
        pub fn token_bucket(limit: u64) -> ModelSlot {
            let quota = Quota::per_second(limit).expect("a valid limit");
            ModelSlot(Slot::new(Algorithm::TokenBucket, &quota).expect("a token bucket"))
        }

        /// A request of cost 1 at `now_ns`: `Some(allowed)`, or `None` if the slot was
        /// evicted under it (remove it from the map and redo the request).
        pub fn acquire(&self, now_ns: u64, variant: Variant) -> Option<bool> {
            if variant == Variant::RequesterSkipsCheck {
                return Some(self.0.decide(now_ns, 1).is_allowed());
            }
            match self.0.acquire(now_ns, 1) {
                Attempt::Decided(d) => Some(d.is_allowed()),
                Attempt::Evicted => None,
            }
        }

        /// The evictor: true if the slot is now evicted and must be removed from the map.
        pub fn try_evict(&self, now_ns: u64, variant: Variant) -> bool {
            let state = self.0.state();
            match variant {
                Variant::EvictorSkipsRecheck => {
                    // Relaxed: as the real pre-filter.
                    let live = state.load(Ordering::Relaxed);
                    if phase(live) != LIVE || !self.0.is_fresh(now_ns) {
                        return false;
                    }
                    // Acquire: as the real mark; but nothing is checked after it.
                    state
                        .compare_exchange(
                            live,
                            with_phase(live, EVICTED),
                            Ordering::Acquire,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                }
                Variant::EvictorWithoutRound => {
                    // The real steps with the same orderings, but `EVICTING` keeps the round.
                    let live = state.load(Ordering::Relaxed);
                    if phase(live) != LIVE || !self.0.is_fresh(now_ns) {
                        return false;
                    }
                    let evicting = with_phase(live, EVICTING);
                    if state
                        .compare_exchange(live, evicting, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                    {
                        return false;
                    }
                    let fresh = self.0.is_fresh(now_ns);
                    let next = with_phase(evicting, if fresh { EVICTED } else { LIVE });
                    let done = state
                        .compare_exchange(evicting, next, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok();
                    fresh && done
                }
                _ => self.0.try_evict(now_ns),
            }
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_48_bytes() {
        assert_eq!(core::mem::size_of::<Slot>(), 48);
    }

    #[test]
    fn every_core_is_fresh_until_used_and_again_once_idle() {
        let quota = Quota::per_second(2).unwrap();
        for algorithm in Algorithm::ALL {
            let slot = Slot::new(algorithm, &quota).unwrap();
            assert!(slot.is_fresh(0), "{algorithm:?}");
            assert!(matches!(slot.acquire(0, 1), Attempt::Decided(d) if d.is_allowed()));
            assert!(!slot.is_fresh(0), "{algorithm:?}");
            assert!(!slot.try_evict(0), "{algorithm:?}: a used limiter stays");
            // Two periods later every algorithm has forgotten the admission.
            assert!(slot.is_fresh(2_500_000_000), "{algorithm:?}");
            assert!(slot.try_evict(2_500_000_000), "{algorithm:?}");
            // Once evicted, an admission on it must be redone on a new limiter.
            assert_eq!(slot.acquire(2_500_000_000, 1), Attempt::Evicted);
        }
    }

    #[test]
    fn a_requester_cancels_an_eviction_in_progress() {
        let slot = Slot::new(Algorithm::TokenBucket, &Quota::per_second(1).unwrap()).unwrap();
        slot.state().store(ROUND | EVICTING, Ordering::Relaxed);
        // The evictor's re-check has not run: the requester keeps its admission by cancelling.
        assert!(matches!(slot.acquire(0, 1), Attempt::Decided(d) if d.is_allowed()));
        assert_eq!(slot.state().load(Ordering::Relaxed), ROUND | LIVE);
    }
}
