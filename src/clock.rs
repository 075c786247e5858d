//! Where limiters get the time: the [`Clock`] trait and its three clocks.
//!
//! | clock              | source                                  | cost here | steps back?            |
//! |--------------------|-----------------------------------------|-----------|------------------------|
//! | [`MonotonicClock`] | quanta's TSC read (OS clock if no TSC)  | ~14 ns    | never more than 8 µs   |
//! | [`CoarseClock`]    | a time an upkeep thread publishes       | ~1 ns     | never                  |
//! | [`ManualClock`]    | a shared counter moved by the caller    | ~1 ns     | only when `set` says so |
//!
//! Time is a `u64` of nanoseconds since the clock's zero (its creation for the first two,
//! zero for the manual clock). A limiter counts from its own start, not from the clock's zero:
//! its first reading (aligned down to its window or slot length) is its origin, and its
//! horizon of 2^58 ns runs from there. Every limiter survives a clock that steps back: it
//! never panics and never hands out capacity it did not have (see each algorithm's "time going
//! backwards"); a reading before its origin reads as the origin.

#[cfg(feature = "std")]
use crate::sync::Arc;
use crate::sync::{AtomicU64, Ordering};
use core::time::Duration;

/// A source of time for limiters: nanoseconds since the clock's own zero.
///
/// Implement it to drive limiters from your own time source (a runtime's cached clock, a
/// simulation, `SystemTime`). The zero can be anywhere: a limiter takes its first reading as
/// its own origin and counts `reading - origin` from then on, so its horizon (2^58 ns, about
/// 9.1 years, past which time stands still for it) runs from the limiter's start, and a clock
/// in ns since 1970 behaves exactly as one started with the limiter. Window limiters align
/// their origin down to a multiple of their window (or slot) length, so windows stay
/// `[k·period, (k+1)·period)` of the clock's own time. Readings should not go backwards; if
/// they do (even before the origin, which reads as the origin), limiters stay safe (no panic,
/// no extra admissions) but may deny early.
///
/// A keyed map's sweep compares its reading with those of requests on other threads: see
/// [`Clock::max_skew_nanos`] for what a clock whose threads disagree must declare.
///
/// ```
/// use tollgate::Clock;
///
/// /// A clock that always reads one second: for a test that wants a frozen instant.
/// struct OneSecond;
/// impl Clock for OneSecond {
///     fn now_nanos(&self) -> u64 { 1_000_000_000 }
/// }
/// assert_eq!(OneSecond.now().as_secs(), 1);
/// ```
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's zero (wherever that is: limiters count from their own
    /// first reading).
    fn now_nanos(&self) -> u64;

    /// The same reading as a [`Duration`].
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock};
    /// let c = ManualClock::new();
    /// c.advance(std::time::Duration::from_millis(5));
    /// assert_eq!(c.now().as_millis(), 5);
    /// ```
    fn now(&self) -> Duration {
        Duration::from_nanos(self.now_nanos())
    }

    /// How much earlier than another thread's reading a reading may be that happens after it
    /// (the other thread reads, then synchronizes with this one, which then reads): 0, the
    /// default, for a clock whose readings never go back in that order ([`ManualClock`] moved
    /// forward, [`CoarseClock`]); 8,192 ns for [`MonotonicClock`], whose cores' counters may
    /// disagree by that much. A clock whose readings on different threads disagree must say by
    /// how much: a keyed map's sweep judges keys idle at its reading less this margin, so that
    /// a request redone on another thread right after the sweep, at a reading up to this much
    /// earlier, finds the new limiter no fuller than the evicted one was then.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, MonotonicClock};
    /// assert_eq!(ManualClock::new().max_skew_nanos(), 0);
    /// assert_eq!(MonotonicClock::new().max_skew_nanos(), 8_192);
    /// ```
    fn max_skew_nanos(&self) -> u64 {
        0
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }

    fn max_skew_nanos(&self) -> u64 {
        (**self).max_skew_nanos()
    }
}

// `alloc::sync::Arc` is `std::sync::Arc`; it exists only where the target has pointer-sized CAS.
#[cfg(target_has_atomic = "ptr")]
impl<C: Clock + ?Sized> Clock for alloc::sync::Arc<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }

    fn max_skew_nanos(&self) -> u64 {
        (**self).max_skew_nanos()
    }
}

/// Where a limiter's time starts: the first reading of its clock, rounded down to a multiple
/// of the limiter's grain (a window's or slot's length, so windows keep their alignment to the
/// clock's zero; 1 ns for the token bucket and the log).
///
/// Every limiter counts `reading - origin`, saturating at zero, so its horizon (2^58 ns) runs
/// from its own start whatever the clock's zero (a clock over `SystemTime` reads about 2^60
/// ns today). A reading before the origin (a clock stepped back past the start) reads as the
/// origin itself: time stands still until the clock is back, and nothing wraps. A clock that
/// reads 0 at construction gets the origin 0, and every reading is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Origin(u64);

impl Origin {
    /// The origin of a limiter made now on `clock`, aligned down to `grain` ns (at least 1).
    pub(crate) fn of<C: Clock + ?Sized>(clock: &C, grain: u64) -> Origin {
        Origin::at(clock.now_nanos(), grain)
    }

    /// The origin for a first reading `reading`, aligned down to `grain` ns (at least 1).
    pub(crate) fn at(reading: u64, grain: u64) -> Origin {
        Origin(reading - reading % grain.max(1))
    }

    /// The clock reading this origin stands at.
    #[cfg(feature = "std")]
    pub(crate) fn nanos(self) -> u64 {
        self.0
    }

    /// A clock reading in the limiter's time: ns since the origin, 0 before it.
    #[inline(always)]
    pub(crate) fn since(self, reading: u64) -> u64 {
        reading.saturating_sub(self.0)
    }

    /// `clock`'s now in the limiter's time.
    #[inline(always)]
    pub(crate) fn now<C: Clock + ?Sized>(self, clock: &C) -> u64 {
        self.since(clock.now_nanos())
    }
}

/// A clock read from an origin: what code that takes a [`Clock`] (a keyed map's request path,
/// a group's rollback) reads in a limiter's own time.
#[cfg(feature = "std")]
#[derive(Debug)]
pub(crate) struct Since<'a, C: ?Sized> {
    pub(crate) clock: &'a C,
    pub(crate) origin: Origin,
}

#[cfg(feature = "std")]
impl<C: Clock + ?Sized> Clock for Since<'_, C> {
    #[inline(always)]
    fn now_nanos(&self) -> u64 {
        self.origin.now(self.clock)
    }

    fn max_skew_nanos(&self) -> u64 {
        self.clock.max_skew_nanos()
    }
}

/// Saturating conversion: a `Duration` beyond 584 years reads as `u64::MAX` ns.
#[inline]
pub(crate) fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A clock the test moves by hand. Starts at zero; clones share one time.
///
/// Nothing sleeps: tests advance it, or `set` it anywhere, backwards included, to check that a
/// limiter survives a clock that steps back. A `&ManualClock` is a [`Clock`] too, so limiters
/// can also share one by reference.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, Limiter, ManualClock, Quota, TokenBucket};
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(shared.now(), Duration::from_secs(2));
/// shared.set(Duration::from_millis(500)); // backwards
/// assert_eq!(clock.now(), Duration::from_millis(500));
///
/// // By reference: the form that also works without the `std` feature.
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, &clock);
/// assert!(bucket.try_acquire().is_allowed());
/// assert!(!bucket.try_acquire().is_allowed());
/// clock.advance(Duration::from_secs(1));
/// assert!(bucket.try_acquire().is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// Without the `std` feature a `ManualClock` owns its counter: it is not `Clone` (a copy would
/// not share time), [`ManualClock::new`] is a `const fn`, and limiters share it by reference,
/// often from a `static`: `static CLOCK: ManualClock = ManualClock::new();` then
/// `TokenBucket::with_clock(quota, &CLOCK)` (CI links and runs exactly that on two 32-bit
/// targets, see `.ci/no-std-check`).
#[derive(Clone, Debug)]
#[cfg(feature = "std")]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

/// A clock the test moves by hand (`no_std` form: it owns its counter; share it by reference,
/// `&ManualClock` is a [`Clock`]). See the std form for the full description.
#[derive(Debug)]
#[cfg(not(feature = "std"))]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

#[cfg(feature = "std")]
impl ManualClock {
    /// A clock at zero.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock};
    /// assert_eq!(ManualClock::new().now_nanos(), 0);
    /// ```
    pub fn new() -> ManualClock {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }
}

#[cfg(not(feature = "std"))]
impl ManualClock {
    /// A clock at zero; `const`, so it can live in a `static`:
    /// `static CLOCK: ManualClock = ManualClock::new();`, shared as `&CLOCK`.
    pub const fn new() -> ManualClock {
        ManualClock {
            nanos: AtomicU64::new(0),
        }
    }
}

impl ManualClock {
    /// Moves time forward by `by` (saturating at `u64::MAX` ns).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    /// let c = ManualClock::new();
    /// c.advance(Duration::from_nanos(7));
    /// c.advance(Duration::from_nanos(3));
    /// assert_eq!(c.now_nanos(), 10);
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = duration_to_nanos(by);
        // Relaxed: the clock publishes only its own value; a CAS loop keeps concurrent
        // advances from losing each other.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets time to `since_zero`, forwards or backwards.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    /// let c = ManualClock::new();
    /// c.set(Duration::from_secs(60));
    /// c.set(Duration::from_secs(1));
    /// assert_eq!(c.now().as_secs(), 1);
    /// ```
    pub fn set(&self, since_zero: Duration) {
        // Relaxed: nothing else is published through the clock.
        self.nanos
            .store(duration_to_nanos(since_zero), Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // Relaxed: a reading is a value, not a message; limiters tolerate any order of them.
        self.nanos.load(Ordering::Relaxed)
    }
}

#[cfg(feature = "std")]
pub use self::std_clocks::{CoarseClock, MonotonicClock};

#[cfg(feature = "std")]
mod std_clocks {
    use super::Clock;
    use crate::sync::{Arc, AtomicU64, Ordering, StaticAtomicU64};
    use crossbeam_utils::CachePadded;
    use std::sync::OnceLock;
    use std::time::Duration;

    /// A reading is published to the shared high-water mark only when it is this far ahead of
    /// it, so that threads write the shared line at most once per 8 µs, not on every read.
    /// It is also the most a reading can step back across threads.
    const PUBLISH_EVERY_NS: u64 = 8_192;

    /// Readings of a raw source, made monotone up to [`PUBLISH_EVERY_NS`].
    ///
    /// quanta's TSC can step back when a thread moves to a core whose counter is behind
    /// (quanta#111, governor#299: early denials). Each reading is compared with a shared
    /// high-water mark: a reading behind it returns the mark; a reading far enough ahead
    /// raises it. The common case is one shared load of a line that is rarely written.
    #[derive(Debug)]
    struct HighWater(CachePadded<AtomicU64>);

    impl HighWater {
        fn new() -> Self {
            HighWater(CachePadded::new(AtomicU64::new(0)))
        }

        /// The reading, or the mark if the reading is behind it. The common case (a reading
        /// ahead of the mark, by less than the granule) is one load, one compare and one
        /// subtraction, with both rarer cases out of line so that nothing waits on the mark.
        #[inline]
        fn fix(&self, t: u64) -> u64 {
            // Relaxed: the mark is a lower bound on readings, not a publication of data.
            let mark = self.0.load(Ordering::Relaxed);
            if t <= mark {
                return behind(mark);
            }
            if t - mark >= PUBLISH_EVERY_NS {
                self.publish(t);
            }
            t
        }

        #[cold]
        #[inline(never)]
        fn publish(&self, t: u64) {
            // Relaxed: fetch_max keeps the mark monotone whatever the interleaving.
            self.0.fetch_max(t, Ordering::Relaxed);
        }
    }

    /// A reading behind the high-water mark reads as the mark (out of line: it is rare, and a
    /// branch to it keeps the common path from depending on the mark's value).
    #[cold]
    #[inline(never)]
    fn behind(mark: u64) -> u64 {
        mark
    }

    /// The default clock: quanta's calibrated TSC (or the OS monotonic clock where there is no
    /// usable TSC), in nanoseconds since this clock was made. Clones share the zero.
    ///
    /// Readings never step back by more than 8 µs, even when the TSCs of two cores disagree:
    /// a shared high-water mark that threads raise at most once per 8 µs absorbs the skew.
    ///
    /// ```
    /// use tollgate::{Clock, MonotonicClock};
    /// let clock = MonotonicClock::new();
    /// let a = clock.now_nanos();
    /// let b = clock.clone().now_nanos();
    /// assert!(b + 8_192 >= a);
    /// ```
    #[derive(Clone, Debug)]
    pub struct MonotonicClock {
        inner: Arc<MonotonicInner>,
    }

    #[derive(Debug)]
    struct MonotonicInner {
        clock: quanta::Clock,
        origin: u64,
        /// Nanoseconds per raw tick, times 2^32 (quanta's calibration, read once).
        per_tick: u64,
        high_water: HighWater,
    }

    /// Raw ticks to ns at `per_tick` ns per tick × 2^32. No overflow: the product of two
    /// `u64`s fits a `u128`, and the result is the elapsed time in ns, below 2^64 for the
    /// first 584 years of a clock.
    #[inline]
    fn scale_ticks(ticks: u64, per_tick: u64) -> u64 {
        ((u128::from(ticks) * u128::from(per_tick)) >> 32) as u64
    }

    impl MonotonicClock {
        /// A clock whose zero is now. Calibrates quanta once per process.
        ///
        /// ```
        /// let clock = tollgate::MonotonicClock::new();
        /// # let _ = clock;
        /// ```
        pub fn new() -> MonotonicClock {
            let clock = quanta::Clock::new();
            // quanta's own scaling of 2^32 ticks: ns per tick in 32.32 fixed point (exactly
            // 2^32 where the source already counts ns). One multiply and shift per reading
            // then, instead of quanta's per-call dispatch on its clock kind.
            let per_tick = clock.delta_as_nanos(0, 1 << 32);
            let origin = clock.raw();
            MonotonicClock {
                inner: Arc::new(MonotonicInner {
                    clock,
                    origin,
                    per_tick,
                    high_water: HighWater::new(),
                }),
            }
        }
    }

    impl Default for MonotonicClock {
        fn default() -> Self {
            MonotonicClock::new()
        }
    }

    impl Clock for MonotonicClock {
        #[inline]
        fn now_nanos(&self) -> u64 {
            let inner = &*self.inner;
            // A raw reading behind the origin (another core's TSC) reads as the zero.
            let ticks = match inner.clock.raw().checked_sub(inner.origin) {
                Some(ticks) => ticks,
                None => behind(0),
            };
            inner.high_water.fix(scale_ticks(ticks, inner.per_tick))
        }

        /// A reading is at least the high-water mark, which is within the granule of every
        /// earlier reading: one that happens after another is at most the granule earlier.
        fn max_skew_nanos(&self) -> u64 {
            PUBLISH_EVERY_NS
        }
    }

    /// How often the upkeep thread publishes the coarse time.
    const UPKEEP_INTERVAL: Duration = Duration::from_millis(1);

    /// The coarse time: nanoseconds on the upkeep thread's `MonotonicClock`, published every
    /// [`UPKEEP_INTERVAL`]. A `static`, so a reader's load has a constant address: one load,
    /// not a pointer and then the value. It only ever grows (see [`publish`]), so a reader
    /// needs no high-water mark of its own.
    static COARSE_NOW: CachePadded<StaticAtomicU64> = CachePadded::new(StaticAtomicU64::new(0));

    /// Whether the upkeep thread started: `None` if it did, else why not.
    static COARSE_UPKEEP: OnceLock<Option<std::io::ErrorKind>> = OnceLock::new();

    /// Raises the published time to `t` (never lowers it, whoever else publishes).
    fn publish(word: &StaticAtomicU64, t: u64) {
        // Relaxed: the time is a value, not a message; fetch_max keeps it monotone.
        word.fetch_max(t, Ordering::Relaxed);
    }

    /// Starts the upkeep thread, once per process; `Some` says why it could not start.
    fn start_upkeep() -> Option<std::io::ErrorKind> {
        *COARSE_UPKEEP.get_or_init(|| {
            let clock = MonotonicClock::new();
            publish(&COARSE_NOW, clock.now_nanos());
            std::thread::Builder::new()
                .name("tollgate-coarse-clock".into())
                .spawn(move || loop {
                    std::thread::sleep(UPKEEP_INTERVAL);
                    publish(&COARSE_NOW, clock.now_nanos());
                })
                .err()
                .map(|e| e.kind())
        })
    }

    /// A cheaper, coarser clock: a time published every 1 ms by one background thread per
    /// process (`tollgate-coarse-clock`, started by the first `CoarseClock`), read with one
    /// load. Clones share the zero.
    ///
    /// Precision: a reading lags the true time by up to the 1 ms refresh interval plus the
    /// upkeep thread's scheduling delay. A token bucket on it refills in 1 ms steps; a window
    /// may open up to 1 ms late. It never reads ahead of time, so it never admits early, and
    /// it never steps back (the published time only grows). If the thread cannot be started
    /// ([`CoarseClock::try_new`] says why), the clock stands still at its first reading:
    /// limiters on it deny once their capacity is used, never admit more.
    ///
    /// ```
    /// use tollgate::{Clock, CoarseClock};
    /// let clock = CoarseClock::new();
    /// let a = clock.now_nanos();
    /// assert!(clock.now_nanos() >= a);
    /// ```
    #[derive(Clone, Debug)]
    pub struct CoarseClock {
        origin: u64,
    }

    impl CoarseClock {
        /// A coarse clock whose zero is now; starts the upkeep thread if none runs.
        ///
        /// ```
        /// let clock = tollgate::CoarseClock::new();
        /// # let _ = clock;
        /// ```
        pub fn new() -> CoarseClock {
            let _ = start_upkeep();
            CoarseClock::starting_now()
        }

        /// Like [`CoarseClock::new`], but an error if the upkeep thread could not be started
        /// (the clock would stand still).
        ///
        /// ```
        /// let clock = tollgate::CoarseClock::try_new().expect("the upkeep thread runs");
        /// # let _ = clock;
        /// ```
        pub fn try_new() -> Result<CoarseClock, std::io::Error> {
            match start_upkeep() {
                None => Ok(CoarseClock::starting_now()),
                Some(kind) => Err(std::io::Error::from(kind)),
            }
        }

        fn starting_now() -> CoarseClock {
            CoarseClock {
                // Relaxed: a value; the upkeep thread's later raises are seen in order.
                origin: COARSE_NOW.load(Ordering::Relaxed),
            }
        }
    }

    impl Default for CoarseClock {
        fn default() -> Self {
            CoarseClock::new()
        }
    }

    impl Clock for CoarseClock {
        #[inline]
        fn now_nanos(&self) -> u64 {
            // Relaxed: a value, not a message. The published time only grows and this clock's
            // origin was read from it earlier, so a reading is never below the origin; were it
            // ever, it would read as the zero (out of line, so no select waits on it).
            match COARSE_NOW.load(Ordering::Relaxed).checked_sub(self.origin) {
                Some(t) => t,
                None => behind(0),
            }
        }
    }

    #[cfg(all(test, not(miri)))]
    mod tests {
        use super::*;

        #[test]
        fn a_reading_behind_the_mark_returns_the_mark() {
            let hw = HighWater::new();
            assert_eq!(hw.fix(100_000), 100_000); // publishes: 100 µs ahead of 0
            assert_eq!(hw.fix(90_000), 100_000); // a core whose TSC is 10 µs behind
            assert_eq!(hw.fix(100_001), 100_001);
        }

        #[test]
        fn readings_step_back_at_most_the_publishing_granule() {
            let hw = HighWater::new();
            let _ = hw.fix(1_000_000);
            let ahead = hw.fix(1_000_000 + PUBLISH_EVERY_NS - 1); // not published
            let behind = hw.fix(990_000);
            assert_eq!(behind, 1_000_000);
            assert!(ahead - behind < PUBLISH_EVERY_NS);
            let published = hw.fix(1_000_000 + PUBLISH_EVERY_NS);
            assert_eq!(hw.fix(0), published);
        }

        #[test]
        fn the_coarse_time_only_moves_forward() {
            let word = StaticAtomicU64::new(0);
            publish(&word, 5_000_000);
            publish(&word, 4_000_000); // a reading behind the published time
            assert_eq!(word.load(Ordering::Relaxed), 5_000_000);
            publish(&word, 6_000_000);
            assert_eq!(word.load(Ordering::Relaxed), 6_000_000);
        }

        #[test]
        fn a_coarse_clock_counts_from_its_own_zero() {
            let clock = CoarseClock::try_new().expect("the upkeep thread runs");
            // Relaxed: values only.
            let before = COARSE_NOW.load(Ordering::Relaxed);
            let read = clock.now_nanos();
            let after = COARSE_NOW.load(Ordering::Relaxed);
            assert!(before - clock.origin <= read && read <= after - clock.origin);
            assert!(clock.clone().now_nanos() >= read);
        }

        #[test]
        fn ticks_scale_at_the_calibrated_rate() {
            // 2^32 × per_tick / 2^32 = per_tick: 2^32 ticks read as quanta's 2^32 ticks.
            assert_eq!(scale_ticks(1 << 32, 1_500_000_000), 1_500_000_000);
            // A source already in ns (per_tick = 2^32) reads unchanged, to the last ns.
            assert_eq!(scale_ticks(1 << 58, 1 << 32), 1 << 58);
            assert_eq!(scale_ticks(12_345, 1 << 32), 12_345);
        }

        #[test]
        fn the_monotonic_clock_never_reads_backwards_on_one_thread() {
            let clock = MonotonicClock::new();
            let mut last = clock.now_nanos();
            for _ in 0..10_000 {
                let now = clock.now_nanos();
                assert!(now + PUBLISH_EVERY_NS > last);
                last = last.max(now);
            }
        }
    }
}
