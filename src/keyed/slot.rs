//! A key's limiter with a state of several words (sliding window, sliding log), and the
//! protocol that lets it be evicted while requests race it. (The one-word limiters fold the
//! eviction mark into their word instead: see `word.rs`.)
//!
//! # Layout
//!
//! | field   | type     | meaning                                                          |
//! |---------|----------|------------------------------------------------------------------|
//! | `state` | `u32`    | the eviction state word (below)                                  |
//! | `core`  | the core | the sliding window's or log's state and its own parameters       |
//!
//! The slot is boxed (the map holds 8 bytes); these cores own heap rings anyway.
//!
//! | bits  | field   | meaning                                                           |
//! |-------|---------|-------------------------------------------------------------------|
//! | 0..2  | `phase` | `LIVE = 0`, `EVICTING = 1`, `EVICTED = 2`                         |
//! | 2..32 | `round` | eviction attempts on this slot so far, wrapping at 2^30           |
//!
//! # Invariant
//!
//! An admission is recorded on the limiter that stays in the map: a request whose admission
//! may sit on an evicted core sees `EVICTED` and redoes itself on the key's new limiter.
//!
//! # Orderings
//!
//! - requester RMW after an admission: `Release` (publishes its core write to the evictor);
//!   as an RMW it reads the latest state, so no `Acquire` is needed;
//! - requester cancel CAS: `Relaxed`: it only decides who wins that `EVICTING`;
//! - evictor pre-filter load: `Relaxed`: a hint, the CAS decides;
//! - evictor `LIVE → EVICTING`: `Acquire`: synchronizes with the requesters' RMWs;
//! - evictor `EVICTING → EVICTED / LIVE`: `Release`; a requester that reads `EVICTED` issues
//!   an `Acquire` fence before reading the clock again for its redo, which is then no earlier
//!   than the evictor's now (the sweep's reading less the clock's `max_skew_nanos`: a reading
//!   on another thread may lag the sweep's by that much).
//!
//! # Phases
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
//! own stale freshness check (ABA). A wrap needs 2^30 eviction attempts on one slot while one
//! evictor stalls mid-attempt.
//!
//! # Protocol
//!
//! Requester (after the map lookup, clock read once):
//! 1. the core's own request (its own lock-free step); a denial or a zero cost wrote nothing
//!    and returns at once;
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
//! limiter gave at the requester's now.
//!
//! The loom model in `loom-tests/tests/keyed_slot.rs` checks this with 2–3 threads, the map
//! replaced by a one-entry cell, and catches three planted defects (no requester check, no
//! evictor re-check, no round), each in a checked copy of this code (`slot/planted.rs`).

use core::time::Duration;

#[cfg(tollgate_loom)]
pub(crate) mod planted;

use crate::algo::{Algo, Core};
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::sync::{fence, AtomicU32, Ordering};

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

/// A request found its limiter `EVICTED`: it redoes itself through the map.
#[cold]
fn evicted() -> Attempt {
    // Acquire (with the evictor's Release): the redo's clock reading is at least the one the
    // evictor judged the limiter fresh at.
    fence(Ordering::Acquire);
    Attempt::Evicted
}

/// What a request on one slot came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The decision stands: it is recorded on the limiter that stays in the map.
    Decided(Decision),
    /// The slot was evicted under the request: remove it from the map and redo the request.
    Evicted,
}

/// One key's limiter: the eviction state word and the core (see the module docs).
#[derive(Debug)]
pub(crate) struct StateSlot<A: Algo> {
    state: AtomicU32,
    core: Core<A>,
}

impl<A: Algo> StateSlot<A> {
    /// A fresh slot for `quota`.
    pub(crate) fn new(quota: &Quota) -> Result<Self, QuotaError> {
        Ok(StateSlot {
            state: AtomicU32::new(LIVE),
            core: Core::try_new(quota)?,
        })
    }

    /// The core's own request, outside the eviction protocol.
    #[inline]
    pub(crate) fn commit(&self, now_ns: u64, n: u64) -> Decision {
        self.core.acquire(now_ns, n)
    }

    /// Whether the limiter is at full capacity at `now_ns`: as good as a new one.
    ///
    /// A zero-cost request is read-only for every core and reports, in `reset_after`, how long
    /// until full capacity: zero exactly when no admission is live. (The sliding log's
    /// zero-cost request may take its per-limiter lock if it races a writer; that changes
    /// nothing it stores.)
    #[inline]
    fn is_fresh(&self, now_ns: u64) -> bool {
        self.core.acquire(now_ns, 0).reset_after() == Duration::ZERO
    }

    /// A request of cost `n` at `now_ns` (see the module's protocol).
    #[inline]
    pub(crate) fn acquire(&self, now_ns: u64, n: u64) -> Attempt {
        let decision = self.core.acquire(now_ns, n);
        if n == 0 || !decision.is_allowed() {
            // Nothing was written: nothing can be lost.
            return Attempt::Decided(decision);
        }
        // Release: publishes the core write to an evictor whose CAS follows in the word's
        // modification order; as an RMW it reads the latest state, so no Acquire is needed.
        let state = self.state.fetch_add(0, Ordering::Release);
        match phase(state) {
            LIVE => Attempt::Decided(decision),
            EVICTING => self.cancel_eviction(state, decision),
            _ => evicted(),
        }
    }

    #[cold]
    fn cancel_eviction(&self, evicting: u32, decision: Decision) -> Attempt {
        // Relaxed: it only decides whether that evictor or this requester wins its attempt.
        match self.state.compare_exchange(
            evicting,
            with_phase(evicting, LIVE),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Err(now) if phase(now) == EVICTED => evicted(),
            // Cancelled, backed off, or a newer attempt that began after our RMW (it sees us).
            _ => Attempt::Decided(decision),
        }
    }

    /// The evictor's steps: true if the slot is now `EVICTED` and its entry must be removed.
    #[inline]
    pub(crate) fn try_evict(&self, now_ns: u64) -> bool {
        let state = &self.state;
        // Relaxed: a cheap pre-filter; the CAS below decides.
        let live = state.load(Ordering::Relaxed);
        if phase(live) != LIVE || !self.is_fresh(now_ns) {
            return false;
        }
        let round = live.wrapping_add(ROUND);
        let evicting = with_phase(round, EVICTING);
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
        // Release: a requester that reads `EVICTED` and acquires it reads the clock again
        // no earlier than `now_ns`. Failure means a requester cancelled this attempt.
        let done = state
            .compare_exchange(evicting, next, Ordering::Release, Ordering::Relaxed)
            .is_ok();
        evicted && done
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::algo::sliding_log::Log;
    use crate::algo::sliding_window::Sliding;

    /// A request (`false`) or an eviction (`true`) at a time: (allowed or evicted, flag).
    type Probe = Box<dyn Fn(u64, bool) -> (bool, bool)>;

    fn slots(quota: &Quota) -> [Probe; 2] {
        fn one<A: Algo + 'static>(quota: &Quota) -> Probe {
            let slot = StateSlot::<A>::new(quota).unwrap();
            Box::new(move |now, evict| {
                if evict {
                    (slot.try_evict(now), slot.is_fresh(now))
                } else {
                    match slot.acquire(now, 1) {
                        Attempt::Decided(d) => (d.is_allowed(), false),
                        Attempt::Evicted => (false, true),
                    }
                }
            })
        }
        [one::<Sliding>(quota), one::<Log>(quota)]
    }

    #[test]
    fn every_core_is_kept_while_used_and_evicted_once_idle() {
        let quota = Quota::per_second(2).unwrap();
        for slot in slots(&quota) {
            assert_eq!(slot(0, false), (true, false), "admitted");
            assert_eq!(slot(0, true), (false, false), "a used limiter stays");
            // Two periods later both have forgotten the admission.
            assert_eq!(slot(2_500_000_000, true), (true, true), "evicted");
            // Once evicted, an admission on it must be redone on a new limiter.
            assert_eq!(slot(2_500_000_000, false), (false, true));
        }
    }

    #[test]
    fn a_requester_cancels_an_eviction_in_progress() {
        let slot = StateSlot::<Sliding>::new(&Quota::per_second(1).unwrap()).unwrap();
        slot.state.store(ROUND | EVICTING, Ordering::Relaxed);
        // The evictor's re-check has not run: the requester keeps its admission by cancelling.
        assert!(matches!(slot.acquire(0, 1), Attempt::Decided(d) if d.is_allowed()));
        assert_eq!(slot.state.load(Ordering::Relaxed), ROUND | LIVE);
    }
}
