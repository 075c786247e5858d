//! Planted mutants: each algorithm with a deliberately broken commit, for the loom models to
//! catch. Built only under `--cfg tollgate_loom`; not part of the API.
//!
//! Every mutant reuses the real algorithm's pure decision (`token_bucket::decide`,
//! `fixed_window::decide`, `Geometry::decide`, `LogParams::decide`) and its state layout, so
//! the arithmetic is the shipped arithmetic and only the concurrency is wrong. A model that
//! passes the real limiter and fails its mutant shows that it can see the bug class the
//! mutant plants.
//!
//! | mutant                                   | what is broken                                   |
//! |------------------------------------------|--------------------------------------------------|
//! | [`LoadStoreTokenBucket`]                 | load, decide, plain store: no compare-exchange   |
//! | [`SplitResetFixedWindow`]                | window and count in two words; a new window is   |
//! |                                          | claimed by CAS, its count reset by a later store |
//! |                                          | (the Java seed 003)                              |
//! | [`BrokenSlidingWindow`] `RelaxedHead`    | head loaded `Relaxed` (CAS `Relaxed`): ring reads|
//! |                                          | are not ordered after the mover's ring write     |
//! | [`BrokenSlidingWindow`] `RingAfterCas`   | the finished slot reaches the ring only after    |
//! |                                          | the head CAS that moves past it                  |
//! | [`BrokenSlidingLog`] `UnvalidatedRead`   | the optimistic denial is returned without        |
//! |                                          | re-checking `seq`                                |
//! | [`BrokenSlidingLog`] `NoLock`            | admissions write entries and `seq` without       |
//! |                                          | taking the lock                                  |
//!
//! The orderings below are wrong on purpose; each comment says what the mutant gets wrong.

use crate::algo::sliding_log::{self, LogParams};
use crate::algo::sliding_window::{self, Geometry};
use crate::algo::{fixed_window, token_bucket};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::quota::{GcraParams, Quota, WindowParams, DEFAULT_SLOTS};
use crate::sync::{fence, AtomicU64, Backoff, Ordering};

/// Token bucket that loads `tat`, decides, and stores the new `tat`: two racing admissions
/// both decide on the same `tat` and both pass, one of them on a token already taken.
#[derive(Debug)]
pub struct LoadStoreTokenBucket<C> {
    tat: AtomicU64,
    params: GcraParams,
    clock: C,
}

impl<C: Clock> LoadStoreTokenBucket<C> {
    /// The mutant of `TokenBucket::with_clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        LoadStoreTokenBucket {
            tat: AtomicU64::new(0),
            params: quota.gcra().expect("a validated quota has GCRA parameters"),
            clock,
        }
    }
}

impl<C: Clock> Limiter for LoadStoreTokenBucket<C> {
    fn try_acquire_n(&self, n: u64) -> Decision {
        let now_ns = self.clock.now_nanos();
        // Relaxed, as the real bucket: the ordering is not what is broken here.
        let tat = self.tat.load(Ordering::Relaxed);
        let (decision, write) = token_bucket::decide(&self.params, tat, now_ns, n);
        if let Some(new_tat) = write {
            // BROKEN: a plain store overwrites whatever was admitted since the load.
            self.tat.store(new_tat, Ordering::Relaxed);
        }
        decision
    }
}

/// Fixed window with the window number and the count in two words, as the Java seed 003:
/// the first admission of a new window claims it with a CAS on the window word, then resets
/// the count with a separate store. An admission that lands between the two (it sees the new
/// window with the old count) is overwritten by the reset: lost from the count, so the window
/// admits more than its limit.
#[derive(Debug)]
pub struct SplitResetFixedWindow<C> {
    window: AtomicU64,
    count: AtomicU64,
    params: WindowParams,
    clock: C,
}

impl<C: Clock> SplitResetFixedWindow<C> {
    /// The mutant of `FixedWindow::with_clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        SplitResetFixedWindow {
            window: AtomicU64::new(0),
            count: AtomicU64::new(0),
            params: quota
                .window(1)
                .expect("a validated quota fits a fixed window"),
            clock,
        }
    }
}

impl<C: Clock> Limiter for SplitResetFixedWindow<C> {
    fn try_acquire_n(&self, n: u64) -> Decision {
        let now_ns = self.clock.now_nanos();
        let bits = self.params.count_bits;
        let mask = (1u64 << bits) - 1;
        loop {
            // SeqCst everywhere: the split into two words is the bug, not the orderings.
            let window = self.window.load(Ordering::SeqCst);
            let count = self.count.load(Ordering::SeqCst);
            let word = window << bits | count;
            let (decision, write) = fixed_window::decide(&self.params, word, now_ns, n);
            let Some(new_word) = write else {
                return decision;
            };
            let (new_window, new_count) = (new_word >> bits, new_word & mask);
            if new_window != window {
                // SeqCst: see above.
                if self
                    .window
                    .compare_exchange(window, new_window, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    // BROKEN: the reset is a second, separate store.
                    self.count.store(new_count, Ordering::SeqCst);
                    return decision;
                }
            } else if self
                .count
                .compare_exchange(count, new_count, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return decision;
            }
        }
    }
}

/// Which ordering bug a [`BrokenSlidingWindow`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlidingWindowFlaw {
    /// The head is loaded (and the CAS fails) `Relaxed` instead of `Acquire`: a thread can
    /// see the head past a slot and still read that slot's ring entry from before the mover
    /// wrote it.
    RelaxedHead,
    /// The mover swaps the head first and writes the finished slot to the ring after: a
    /// thread that sees the new head in between reads the slot as empty.
    RingAfterCas,
}

/// Sliding-window counter with one ordering bug (see [`SlidingWindowFlaw`]); otherwise the
/// real head + ring protocol over the real `Geometry::decide`.
#[derive(Debug)]
pub struct BrokenSlidingWindow<C> {
    head: AtomicU64,
    ring: Box<[AtomicU64]>,
    geometry: Geometry,
    flaw: SlidingWindowFlaw,
    clock: C,
}

impl<C: Clock> BrokenSlidingWindow<C> {
    /// The mutant of `SlidingWindow::with_slots`.
    pub fn with_slots(quota: Quota, slots: u32, clock: C, flaw: SlidingWindowFlaw) -> Self {
        let geometry = Geometry::new(&quota, slots).expect("a quota that fits its slots");
        BrokenSlidingWindow {
            head: AtomicU64::new(0),
            ring: (0..geometry.ring_len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            geometry,
            flaw,
            clock,
        }
    }

    /// The mutant of `SlidingWindow::with_clock` (8 slots).
    pub fn with_clock(quota: Quota, clock: C, flaw: SlidingWindowFlaw) -> Self {
        Self::with_slots(quota, DEFAULT_SLOTS, clock, flaw)
    }
}

impl<C: Clock> Limiter for BrokenSlidingWindow<C> {
    fn try_acquire_n(&self, n: u64) -> Decision {
        let now_ns = self.clock.now_nanos();
        let relaxed_head = self.flaw == SlidingWindowFlaw::RelaxedHead;
        let ring_late = self.flaw == SlidingWindowFlaw::RingAfterCas;
        // BROKEN under RelaxedHead: Relaxed does not synchronize with the mover's Release.
        let load = if relaxed_head {
            Ordering::Relaxed
        } else {
            Ordering::Acquire
        };
        let mut head = self.head.load(load);
        loop {
            // Relaxed, as the real limiter (correct only after an Acquire head load).
            let ring = |i: usize| self.ring[i].load(Ordering::Relaxed);
            let (decision, write) = sliding_window::decide(&self.geometry, head, ring, now_ns, n);
            let Some(write) = write else { return decision };
            if !ring_late {
                if let Some((i, word)) = write.finished {
                    // Relaxed, as the real limiter: published by the Release CAS below.
                    self.ring[i].fetch_max(word, Ordering::Relaxed);
                }
            }
            // Release on success, as the real limiter; BROKEN under RelaxedHead on failure.
            match self
                .head
                .compare_exchange_weak(head, write.head, Ordering::Release, load)
            {
                Ok(_) => {
                    if ring_late {
                        if let Some((i, word)) = write.finished {
                            // BROKEN: the slot reaches the ring after the head moved past it.
                            self.ring[i].fetch_max(word, Ordering::Relaxed);
                        }
                    }
                    return decision;
                }
                Err(current) => head = current,
            }
        }
    }
}

/// Which seqlock bug a [`BrokenSlidingLog`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlidingLogFlaw {
    /// The optimistic read returns its denial without re-checking `seq`: it may have decided
    /// on a torn ring (old count, entries an admission was overwriting).
    UnvalidatedRead,
    /// Admissions skip the lock: load `seq`, decide, write the entries, store `seq`. Two
    /// racing admissions both decide on the same count.
    NoLock,
}

const LOCKED: u64 = 1;

/// Sliding log with one seqlock bug (see [`SlidingLogFlaw`]); otherwise the real protocol
/// over the real `LogParams::decide`.
#[derive(Debug)]
pub struct BrokenSlidingLog<C> {
    seq: AtomicU64,
    entries: Box<[AtomicU64]>,
    params: LogParams,
    flaw: SlidingLogFlaw,
    clock: C,
}

impl<C: Clock> BrokenSlidingLog<C> {
    /// The mutant of `SlidingLog::with_clock`.
    pub fn with_clock(quota: Quota, clock: C, flaw: SlidingLogFlaw) -> Self {
        let limit = quota.limit();
        BrokenSlidingLog {
            seq: AtomicU64::new(0),
            entries: (0..limit).map(|_| AtomicU64::new(0)).collect(),
            params: LogParams {
                limit,
                period: quota.period_ns(),
            },
            flaw,
            clock,
        }
    }

    fn time(&self, j: u64) -> u64 {
        // Relaxed, as the real log.
        self.entries[(j % self.params.limit) as usize].load(Ordering::Relaxed)
    }

    fn acquire_locked(&self, now_ns: u64, n: u64) -> Decision {
        let backoff = Backoff::new();
        let seq = loop {
            // Relaxed hint, Acquire CAS, as the real log.
            let seq = self.seq.load(Ordering::Relaxed);
            if seq & LOCKED == 0
                && self
                    .seq
                    .compare_exchange_weak(seq, seq | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                break seq;
            }
            backoff.snooze();
        };
        // Release fence, as the real log.
        fence(Ordering::Release);
        self.commit(seq, now_ns, n)
    }

    /// Decides on `seq`'s count and writes the admission, unlocking with the new `seq`.
    fn commit(&self, seq: u64, now_ns: u64, n: u64) -> Decision {
        let count = seq >> 1;
        let (decision, write) =
            sliding_log::decide(&self.params, count, |j| self.time(j), now_ns, n);
        let new_seq = match write {
            Some(time) => {
                for j in count..count + n {
                    // Relaxed, as the real log: published by the Release store below.
                    self.entries[(j % self.params.limit) as usize].store(time, Ordering::Relaxed);
                }
                (count + n) << 1
            }
            None => seq & !LOCKED,
        };
        // Release, as the real log's unlock.
        self.seq.store(new_seq, Ordering::Release);
        decision
    }
}

impl<C: Clock> Limiter for BrokenSlidingLog<C> {
    fn try_acquire_n(&self, n: u64) -> Decision {
        let now_ns = self.clock.now_nanos();
        // Acquire, as the real log.
        let seq = self.seq.load(Ordering::Acquire);
        match self.flaw {
            SlidingLogFlaw::UnvalidatedRead => {
                if seq & LOCKED == 0 {
                    let (decision, write) =
                        sliding_log::decide(&self.params, seq >> 1, |j| self.time(j), now_ns, n);
                    // BROKEN: no fence, no second read of seq: a torn read is returned.
                    if write.is_none() {
                        return decision;
                    }
                }
                self.acquire_locked(now_ns, n)
            }
            SlidingLogFlaw::NoLock => {
                if seq & LOCKED != 0 {
                    return self.acquire_locked(now_ns, n);
                }
                // BROKEN: decides and writes without holding the lock.
                self.commit(seq, now_ns, n)
            }
        }
    }
}
