//! Live quota changes: [`Live`], a limiter whose quota is replaced while requests run.
//!
//! # Words
//!
//! | word                   | bits    | meaning                                                 |
//! |------------------------|---------|---------------------------------------------------------|
//! | `version`              | 0..=63  | quotas published so far; the current one is in `slots[version % 2]` |
//! | `slots[i].seq`         | 0..=63  | even: slot `i` holds version `seq - 2 + i`, whole; odd: being written |
//! | `slots[i].words[0..4]` | 0..=63  | that version's parameters, packed by [`Retune::pack`]   |
//!
//! A token bucket's word (an `AtomicU128`: `tat` beside the version it is counted in) and its
//! change are in `token_bucket.rs`; the windows keep their own state (`windows.rs`).
//!
//! # Invariant
//!
//! One writer at a time (the `writer` lock) fills the slot that is not current, then moves
//! `version` on; it never writes the current slot. A reader keeps a slot's words only if its
//! `seq` was even and unchanged around them: one whole published set. It retries only when
//! two quotas were published while it read, so readers never wait for a writer (lock-free).
//!
//! # Orderings
//!
//! Writer: `seq` to odd (`Relaxed`), a `Release` fence, the words (`Relaxed`), `seq` to even
//! and `version` (`Release`); the carried word `Release`. Reader: the bucket's word `Acquire`,
//! `version` `Acquire`, `seq` `Acquire`, the words `Relaxed`, an `Acquire` fence, `seq` again
//! `Relaxed` (Boehm's seqlock, "Can seqlocks get along with programming language memory
//! models?", 2012, on two slots): a word from a later writer makes the second `seq` differ.

use core::fmt;

use crate::algo::{Algo, AlwaysFits};
use crate::clock::{Clock, Origin};
use crate::decision::Decision;
use crate::limiter::{DefaultClock, Limiter};
use crate::quota::{Quota, QuotaError};
use crate::sync::{fence, AtomicU64, Backoff, Mutex, Ordering};

/// Words a packed parameter set takes in the cell.
pub(crate) const PARAM_WORDS: usize = 4;

/// A packed parameter set.
pub(crate) type ParamWords = [u64; PARAM_WORDS];

/// An [`Algo`] whose quota can change while its state lives on: the parameters keep the
/// state's units (the token bucket's tick, a window's length and count field), so a state
/// written under one quota reads right under the next.
///
/// Implemented by the token bucket, the fixed window and the sliding-window counter. Not by
/// the sliding log: its ring holds exactly `limit` entries, indexed by the admission count
/// modulo the limit, so a new limit would need a new ring under running readers. Sealed, as
/// [`Algo`] is; its items are the crate's own: a user names it as a bound.
///
/// ```
/// use tollgate::{Clock, Limiter, Live, LiveFixedWindow, ManualClock, Quota, Retune};
///
/// /// Halves the limit of any live limiter, keeping its period.
/// fn halve<A: Retune, C: Clock>(l: &Live<A, C>) -> Result<(), tollgate::QuotaError> {
///     let q = l.quota();
///     l.set_quota(Quota::try_new((q.limit() / 2).max(1), q.period())?)
/// }
///
/// let l = LiveFixedWindow::with_clock(Quota::per_second(10)?, ManualClock::new());
/// halve(&l)?;
/// assert_eq!(l.quota(), Quota::per_second(5)?);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Retune: Algo {
    /// The parameters of a live limiter's first quota: the same decisions as
    /// [`Algo::params`], with room in the state for the quotas that may follow.
    #[doc(hidden)]
    fn live_params(quota: &Quota) -> Result<Self::Params, QuotaError>;

    /// The parameters of `to`, replacing `from` (whose parameters are `current`), in the
    /// units of `current`; or why this limiter cannot take `to`.
    #[doc(hidden)]
    fn retune(current: &Self::Params, from: &Quota, to: &Quota)
        -> Result<Self::Params, QuotaError>;

    /// The state a live limiter keeps: the algorithm's own (`plain_live_state!` says so),
    /// or one with room for the version of the parameters it is counted in.
    #[doc(hidden)]
    type LiveState: fmt::Debug + Send + Sync;

    /// A fresh live state under `params`.
    #[doc(hidden)]
    fn live_state(params: &Self::Params) -> Result<Self::LiveState, QuotaError>;

    /// Publishes `new` (replacing `old`) in `cell` and carries the state's level over at
    /// `now_ns`. The caller holds the writer lock. `plain_live_state!`'s only publishes:
    /// the state already reads right under `new`, and a request decided under `old` was
    /// decided on the state as it stood before the change.
    #[doc(hidden)]
    fn publish(
        state: &Self::LiveState,
        cell: &ParamCell,
        old: &Self::Params,
        new: &Self::Params,
        now_ns: u64,
    );

    /// One request under the cell's current parameters, committed. `plain_live_state!`'s
    /// reads the parameters once and runs [`Algo::acquire`].
    #[doc(hidden)]
    fn acquire_live(state: &Self::LiveState, cell: &ParamCell, now_ns: u64, n: u64) -> Decision;

    /// What [`Retune::acquire_live`] would decide, writing nothing.
    #[doc(hidden)]
    fn peek_live(state: &Self::LiveState, cell: &ParamCell, now_ns: u64, n: u64) -> Decision;

    /// [`Algo::refund`] under the cell's current parameters.
    #[doc(hidden)]
    fn refund_live(state: &Self::LiveState, cell: &ParamCell, now_ns: u64, n: u64) -> u64;

    /// The parameters as words.
    #[doc(hidden)]
    fn pack(params: &Self::Params) -> ParamWords;

    /// The parameters [`Retune::pack`] made `words` from.
    #[doc(hidden)]
    fn unpack(words: ParamWords) -> Self::Params;
}

/// The live part of a [`Retune`] whose state reads right under every quota it may take (the
/// windows' counts): the algorithm's own state, a change that only publishes, requests that
/// read the parameters once and run the algorithm.
macro_rules! plain_live_state {
    () => {
        type LiveState = <Self as $crate::algo::Algo>::State;

        fn live_state(params: &Self::Params) -> Result<Self::LiveState, $crate::quota::QuotaError> {
            <Self as $crate::algo::Algo>::state(params)
        }

        fn publish(
            _: &Self::LiveState,
            cell: &$crate::live::ParamCell,
            _: &Self::Params,
            new: &Self::Params,
            _: u64,
        ) {
            cell.write(Self::pack(new));
        }

        #[inline]
        fn acquire_live(
            state: &Self::LiveState,
            cell: &$crate::live::ParamCell,
            now_ns: u64,
            n: u64,
        ) -> $crate::decision::Decision {
            <Self as $crate::algo::Algo>::acquire(state, &Self::unpack(cell.read()), now_ns, n)
        }

        #[inline]
        fn peek_live(
            state: &Self::LiveState,
            cell: &$crate::live::ParamCell,
            now_ns: u64,
            n: u64,
        ) -> $crate::decision::Decision {
            <Self as $crate::algo::Algo>::peek(state, &Self::unpack(cell.read()), now_ns, n)
        }

        fn refund_live(
            state: &Self::LiveState,
            cell: &$crate::live::ParamCell,
            now_ns: u64,
            n: u64,
        ) -> u64 {
            <Self as $crate::algo::Algo>::refund(state, &Self::unpack(cell.read()), now_ns, n)
        }
    };
}
pub(crate) use plain_live_state;

pub(crate) mod token_bucket;
mod windows;

#[derive(Debug)]
struct Slot<const N: usize> {
    seq: AtomicU64,
    words: [AtomicU64; N],
}

impl<const N: usize> Slot<N> {
    fn new(seq: u64, words: [u64; N]) -> Self {
        Slot {
            seq: AtomicU64::new(seq),
            words: words.map(AtomicU64::new),
        }
    }
}

/// Two slots of `N` packed parameter words and the version that says which is current.
///
/// Slot `i` holds version `seq - 2 + i` (its `seq` moves on by 2 per write, and a writer of
/// version `v` writes slot `v % 2`): a reader knows which version it read from the slot alone.
#[derive(Debug)]
pub struct ParamCell<const N: usize = PARAM_WORDS> {
    version: AtomicU64,
    slots: [Slot<N>; 2],
}

impl<const N: usize> ParamCell<N> {
    /// A cell holding `words`, version 0.
    pub(crate) fn new(words: [u64; N]) -> Self {
        ParamCell {
            version: AtomicU64::new(0),
            slots: [Slot::new(2, words), Slot::new(0, [0; N])],
        }
    }

    /// The current parameter set, whole.
    #[inline]
    pub(crate) fn read(&self) -> [u64; N] {
        self.read_versioned().1
    }

    /// The current parameter set and its version (a newer one if quotas were published
    /// while it was read).
    #[inline]
    pub(crate) fn read_versioned(&self) -> (u64, [u64; N]) {
        let backoff = Backoff::new();
        loop {
            // Acquire: pairs with the writer's `version` store, after which the slot's words
            // and even `seq` are visible.
            let version = self.version.load(Ordering::Acquire);
            if let Some(read) = self.read_slot((version & 1) as usize) {
                return read;
            }
            // Two quotas were published while this read ran: read the newer one.
            backoff.snooze();
        }
    }

    /// The parameter set of `version`, if its slot still holds it.
    #[inline]
    pub(crate) fn read_version(&self, version: u64) -> Option<[u64; N]> {
        match self.read_slot((version & 1) as usize) {
            Some((v, words)) if v == version => Some(words),
            _ => None,
        }
    }

    /// Slot `i`'s version and words, if no writer wrote it during the read.
    #[inline]
    fn read_slot(&self, i: usize) -> Option<(u64, [u64; N])> {
        let slot = &self.slots[i];
        // Acquire: a later writer's odd `seq` is seen before that writer's words.
        let seq = slot.seq.load(Ordering::Acquire);
        if seq & 1 == 1 {
            return None;
        }
        // Relaxed: validated by the `seq` reload below.
        let words = core::array::from_fn(|w| slot.words[w].load(Ordering::Relaxed));
        let version = (seq + i as u64).wrapping_sub(2);
        // Acquire fence: pairs with the writer's Release fence, so a word from a later writer
        // makes the reload see its odd `seq`.
        fence(Ordering::Acquire);
        // Relaxed: ordered after the word loads by the fence.
        (slot.seq.load(Ordering::Relaxed) == seq).then_some((version, words))
    }

    /// Publishes `words`; returns their version. The caller holds the writer lock (one
    /// writer at a time).
    pub(crate) fn write(&self, words: [u64; N]) -> u64 {
        // Relaxed: only writers store `version`, and they hold the writer lock.
        let version = self.version.load(Ordering::Relaxed);
        let slot = &self.slots[((version + 1) & 1) as usize];
        // Relaxed: only writers store `seq`, under the lock.
        let seq = slot.seq.load(Ordering::Relaxed);
        // Relaxed: the Release fence below orders it before the words.
        slot.seq.store(seq + 1, Ordering::Relaxed);
        // Release fence: pairs with the reader's Acquire fence (see the module's orderings).
        fence(Ordering::Release);
        for (word, value) in slot.words.iter().zip(words) {
            // Relaxed: a reader validates them with `seq`.
            word.store(value, Ordering::Relaxed);
        }
        // Release: a reader that sees the even `seq` sees these words.
        slot.seq.store(seq + 2, Ordering::Release);
        // Release: a reader that sees the new version sees the filled slot.
        self.version.store(version + 1, Ordering::Release);
        version + 1
    }
}

/// A limiter whose quota can be replaced while it runs, with [`Live::set_quota`].
///
/// Readers never wait: a request reads the current parameters from a two-slot cell (a few
/// loads more than the fixed-quota [`RateLimiter`](crate::RateLimiter), and nothing else);
/// a change writes the other slot and publishes it. Limiters that never change their quota
/// are the plain [`RateLimiter`](crate::RateLimiter)s and pay nothing for this.
///
/// What a change does, by algorithm:
///
/// | limiter | on `set_quota` |
/// |---|---|
/// | token bucket | the tokens used carry over, counted in tokens: a bucket that had used `u` tokens has used `min(u, new burst)` of the new one (a fraction of a token carries too). Full stays full, empty stays empty. |
/// | fixed window | the window's count carries over; the new limit applies to it at once. The period cannot change ([`QuotaError::PeriodFixed`]). |
/// | sliding window | the slots' counts carry over; the new limit applies to their sum at once. The period cannot change. |
///
/// So a loosened quota takes effect at once, a tightened one never lets a client through that
/// the new quota would deny once a period has passed (until then, what was used under the old
/// quota is counted, up to the new burst), and a change never refills anything. A request
/// that races a change is judged either under the old quota on the state before the change or
/// under the new quota on the carried state.
///
/// A live token bucket keeps the tick of its first quota (see [`Quota::is_exact`]): a later
/// quota whose interval is not a whole number of those ticks is rounded up to one, so it runs
/// slow by less than one tick per token, never fast; its tick is at most 1/16 ns, so a first
/// quota above 16 per ns runs at 16 per ns. Its word is 128 bits: the `tat` beside the
/// version of the quota it is counted in. A later quota of more than one token per tick is refused
/// ([`QuotaError::RateTooHigh`]), as is one whose capacity in ticks would reach 2^62
/// ([`QuotaError::BurstTooLarge`]). A live window gives its count every bit the window
/// number leaves over, so every valid quota of its period fits.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, LiveTokenBucket, ManualClock, Quota};
///
/// let clock = ManualClock::new();
/// let bucket = LiveTokenBucket::with_clock(Quota::per_second(10)?, clock.clone());
/// assert!(bucket.try_acquire_n(10).is_allowed()); // drained
///
/// bucket.set_quota(Quota::per_second(100)?)?; // loosened: at once
/// assert!(bucket.try_acquire_n(90).is_allowed()); // 10 of 100 used
/// assert!(!bucket.try_acquire().is_allowed());
///
/// bucket.set_quota(Quota::per_second(1)?)?; // tightened: empty under the new quota
/// assert_eq!(bucket.try_acquire().retry_after(), Some(Duration::from_secs(1)));
/// assert_eq!(bucket.quota(), Quota::per_second(1)?);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct Live<A: Retune, C = DefaultClock> {
    state: A::LiveState,
    params: ParamCell,
    /// The current quota, and the lock that makes one change at a time.
    writer: Mutex<Quota>,
    clock: C,
    /// Where its time starts: its first reading, aligned to the algorithm's grain (a window's
    /// length never changes, so neither does the alignment).
    origin: Origin,
}

impl<A: Retune, C: fmt::Debug> fmt::Debug for Live<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Live")
            .field("quota", &self.quota())
            .field("state", &self.state)
            .field("clock", &self.clock)
            .finish()
    }
}

/// A live token bucket: a [`TokenBucket`](crate::TokenBucket) whose quota can change.
pub type LiveTokenBucket<C = DefaultClock> = Live<crate::algo::token_bucket::Gcra, C>;
/// A live fixed window: a [`FixedWindow`](crate::FixedWindow) whose limit can change.
pub type LiveFixedWindow<C = DefaultClock> = Live<crate::algo::fixed_window::Fixed, C>;
/// A live sliding-window counter: a [`SlidingWindow`](crate::SlidingWindow) of the default
/// slots whose limit can change.
pub type LiveSlidingWindow<C = DefaultClock> = Live<crate::algo::sliding_window::Sliding, C>;

impl<A: Retune + AlwaysFits> Live<A> {
    /// A live limiter on the default [`MonotonicClock`](crate::MonotonicClock).
    ///
    /// ```
    /// use tollgate::{Limiter, LiveTokenBucket, Quota};
    /// let bucket = LiveTokenBucket::new(Quota::per_second(100)?);
    /// assert!(bucket.try_acquire().is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        Self::with_clock(quota, crate::MonotonicClock::new())
    }
}

impl<A: Retune + AlwaysFits, C: Clock> Live<A, C> {
    /// A live limiter that reads time from `clock`.
    ///
    /// ```
    /// use tollgate::{LiveFixedWindow, ManualClock, Quota};
    /// let window = LiveFixedWindow::with_clock(Quota::per_minute(60)?, ManualClock::new());
    /// # let _ = window;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        match Self::try_with_clock(quota, clock) {
            Ok(live) => live,
            Err(_) => unreachable!("a validated quota fits every `AlwaysFits` algorithm"),
        }
    }
}

impl<A: Retune, C: Clock> Live<A, C> {
    /// A live limiter that reads time from `clock`, or why `quota` does not fit.
    ///
    /// # Errors
    /// A [`QuotaError`] where the algorithm's fixed-quota limiter refuses `quota`; the three
    /// live algorithms take every validated quota.
    ///
    /// ```
    /// use tollgate::{LiveSlidingWindow, ManualClock, Quota};
    /// assert!(LiveSlidingWindow::try_with_clock(Quota::per_second(5)?, ManualClock::new()).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_with_clock(quota: Quota, clock: C) -> Result<Self, QuotaError> {
        let params = A::live_params(&quota)?;
        Ok(Live {
            state: A::live_state(&params)?,
            params: ParamCell::new(A::pack(&params)),
            writer: Mutex::new(quota),
            origin: Origin::of(&clock, A::grain(&params)),
            clock,
        })
    }

    /// Replaces the quota. Requests that read the parameters after this returns are decided
    /// under `quota`; what the state has counted carries over (see [`Live`]). Changes are made
    /// one at a time; requests never wait for one.
    ///
    /// # Errors
    /// Why this limiter cannot take `quota` (a window's new period; a token bucket quota whose
    /// rate or capacity does not fit the bucket's tick): the limiter keeps its quota.
    ///
    /// ```
    /// use tollgate::{Limiter, LiveFixedWindow, ManualClock, Quota, QuotaError};
    /// let window = LiveFixedWindow::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// assert!(window.try_acquire_n(5).is_allowed());
    /// window.set_quota(Quota::per_second(8)?)?; // the 5 counted stay counted
    /// assert_eq!(window.try_acquire().remaining(), 2);
    /// assert!(matches!(
    ///     window.set_quota(Quota::per_minute(8)?),
    ///     Err(QuotaError::PeriodFixed { .. })
    /// ));
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), QuotaError> {
        let mut current = self.lock();
        let old = A::unpack(self.params.read());
        let new = A::retune(&old, &current, &quota)?;
        A::publish(
            &self.state,
            &self.params,
            &old,
            &new,
            self.origin.now(&self.clock),
        );
        *current = quota;
        Ok(())
    }
}

impl<A: Retune, C> Live<A, C> {
    /// The quota in force.
    ///
    /// ```
    /// use tollgate::{LiveTokenBucket, ManualClock, Quota};
    /// let bucket = LiveTokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// bucket.set_quota(Quota::per_minute(7)?)?;
    /// assert_eq!(bucket.quota(), Quota::per_minute(7)?);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        *self.lock()
    }

    fn lock(&self) -> crate::sync::MutexGuard<'_, Quota> {
        // A panic while holding the lock leaves the quota as it was or as set: never torn.
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<A: Retune, C: Clock> Limiter for Live<A, C> {
    #[inline]
    fn try_acquire_n(&self, n: u64) -> Decision {
        A::acquire_live(&self.state, &self.params, self.origin.now(&self.clock), n)
    }

    #[inline]
    fn peek(&self, n: u64) -> Decision {
        A::peek_live(&self.state, &self.params, self.origin.now(&self.clock), n)
    }

    fn refund(&self, n: u64) -> u64 {
        A::refund_live(&self.state, &self.params, self.origin.now(&self.clock), n)
    }
}

/// The parameter cell and the live token bucket for the loom models
/// (`loom-tests/tests/live.rs`), sound and planted.
#[cfg(tollgate_loom)]
pub(crate) mod loom_model;
#[cfg(tollgate_loom)]
mod planted;
