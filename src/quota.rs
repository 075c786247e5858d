//! `Quota`: how many requests per how long, validated once so that no limiter can overflow.
//!
//! Every limiter counts time in whole nanoseconds since its clock's zero, up to [`HORIZON`]
//! (2^58 ns, about 9.1 years); past the horizon time stands still for the limiters. A quota is
//! accepted only if every algorithm can represent it over that whole range, so the limiters
//! themselves never check for overflow on the hot path beyond a clamp of `now`.

use core::fmt;
use core::time::Duration;

/// The last nanosecond the limiters count: 2^58 ns after the clock's zero (about 9.1 years).
///
/// A clock reading past it is treated as the horizon itself: time stands still for the
/// limiter, nothing overflows and nothing wraps.
pub(crate) const HORIZON: u64 = 1 << 58;

/// The largest limit or burst a quota accepts (2^48 - 1, about 2.8 × 10^14).
pub(crate) const MAX_LIMIT: u64 = (1 << 48) - 1;

/// The longest period a quota accepts: the horizon itself.
pub(crate) const MAX_PERIOD: u64 = HORIZON;

/// The token bucket counts time in ticks of `1/scale` ns; `scale` is at most this.
///
/// `HORIZON × MAX_SCALE = 2^63`, so a theoretical arrival time always fits in 64 bits.
pub(crate) const MAX_SCALE: u64 = 32;

/// Slots the sliding-window counter splits its period into unless told otherwise.
pub const DEFAULT_SLOTS: u32 = 8;

/// The most slots a sliding-window counter may have.
pub const MAX_SLOTS: u32 = 4096;

/// Why a [`Quota`] (or a limiter's setting) was refused.
///
/// ```
/// use tollgate::{Quota, QuotaError};
/// assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroLimit));
/// println!("{}", Quota::per_second(0).unwrap_err()); // "the limit must be at least 1 ..."
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// The limit was 0: nothing could ever pass.
    ZeroLimit,
    /// The period was zero.
    ZeroPeriod,
    /// The burst was 0: nothing could ever pass.
    ZeroBurst,
    /// The limit is above the largest one tollgate counts.
    LimitTooLarge {
        /// The limit asked for.
        limit: u64,
        /// The largest accepted.
        max: u64,
    },
    /// The burst is above the largest one tollgate counts.
    BurstTooLarge {
        /// The burst asked for.
        burst: u64,
        /// The largest accepted for this limit and period.
        max: u64,
    },
    /// The period is longer than the limiters' time horizon.
    PeriodTooLong {
        /// The period asked for.
        period: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// The rate is too fine to represent: too many requests in too short a period for a
    /// window's counter and its window number to share one 64-bit word over the horizon.
    RateTooHigh {
        /// The limit asked for.
        limit: u64,
        /// The period asked for.
        period: Duration,
    },
    /// A sliding-window counter was asked for a number of slots outside `1..=MAX_SLOTS`.
    InvalidSlots {
        /// The number of slots asked for.
        slots: u32,
    },
    /// A sliding log of this limit would not fit in memory (8 bytes per entry).
    LogTooLarge {
        /// The limit asked for.
        limit: u64,
    },
    /// A live window limiter was asked to change its period: its state counts windows (or
    /// slots) of the length it was made with, so only the limit can change.
    PeriodFixed {
        /// The period asked for.
        period: Duration,
        /// The period the limiter counts.
        fixed: Duration,
    },
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QuotaError::ZeroLimit => f.write_str("the limit must be at least 1 request per period"),
            QuotaError::ZeroPeriod => f.write_str("the period must be at least 1 ns"),
            QuotaError::ZeroBurst => f.write_str("the burst must be at least 1"),
            QuotaError::LimitTooLarge { limit, max } => {
                write!(
                    f,
                    "the limit {limit} is too large: at most {max} per period"
                )
            }
            QuotaError::BurstTooLarge { burst, max } => {
                write!(
                    f,
                    "the burst {burst} is too large for this rate: at most {max}"
                )
            }
            QuotaError::PeriodTooLong { period, max } => {
                write!(f, "the period {period:?} is too long: at most {max:?}")
            }
            QuotaError::RateTooHigh { limit, period } => write!(
                f,
                "{limit} per {period:?} is too fine to represent: use a longer period \
                 (fewer than about 10^9 requests per second)"
            ),
            QuotaError::InvalidSlots { slots } => {
                write!(
                    f,
                    "a sliding window needs 1 to {MAX_SLOTS} slots, not {slots}"
                )
            }
            QuotaError::LogTooLarge { limit } => write!(
                f,
                "a sliding log of {limit} entries (8 bytes each) cannot be allocated"
            ),
            QuotaError::PeriodFixed { period, fixed } => write!(
                f,
                "this limiter counts periods of {fixed:?} and cannot change to {period:?}: \
                 only its limit can change"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for QuotaError {}

/// How many requests pass per period, and how many may pass at once (the burst).
///
/// A quota is validated when it is made: every limiter built from it is free of overflow.
/// The burst is the token bucket's capacity; the window algorithms count `limit` per window.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// let q = Quota::try_new(3, Duration::from_secs(7))?.with_burst(5)?;
/// assert_eq!((q.limit(), q.period(), q.burst()), (3, Duration::from_secs(7), 5));
/// assert_eq!(Quota::per_minute(100)?.burst(), 100); // burst defaults to the limit
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    period_ns: u64,
    burst: u64,
}

/// The token bucket's view of a quota: time in ticks of `1/scale` ns, one token every
/// `interval` ticks, a capacity of `capacity` ticks (`burst × interval`). 32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraParams {
    pub(crate) interval: u64,
    pub(crate) capacity: u64,
    /// `floor(x / interval) == (x × magic) >> (62 + shift)` for every `x < 2^62`: the hot path
    /// counts tokens with a multiply instead of a 64-bit division.
    magic: u64,
    pub(crate) scale: u32,
    shift: u32,
}

impl GcraParams {
    /// Tokens in `ticks` of capacity: `ticks / interval`, for `ticks ≤ capacity < 2^62`.
    ///
    /// Granlund–Montgomery: with `l = ceil(log2 interval)` and
    /// `magic = ceil(2^(62+l) / interval)`, `magic × interval - 2^(62+l) < interval ≤ 2^l`,
    /// which makes the product's top bits the exact quotient for every 62-bit dividend.
    #[inline]
    pub(crate) fn tokens(&self, ticks: u64) -> u64 {
        debug_assert!(ticks < 1 << 62);
        ((u128::from(ticks) * u128::from(self.magic)) >> (62 + self.shift)) as u64
    }

    /// The parameters as four words, for a live bucket's parameter cell.
    #[cfg(feature = "std")]
    pub(crate) fn to_words(self) -> [u64; 4] {
        [
            self.interval,
            self.capacity,
            self.magic,
            u64::from(self.scale) << 32 | u64::from(self.shift),
        ]
    }

    /// The parameters [`GcraParams::to_words`] made `w` from.
    #[cfg(feature = "std")]
    pub(crate) fn from_words(w: [u64; 4]) -> GcraParams {
        GcraParams {
            interval: w[0],
            capacity: w[1],
            magic: w[2],
            scale: (w[3] >> 32) as u32,
            shift: w[3] as u32,
        }
    }

    /// Whether a cost of `n` is above the burst (`n × interval > capacity`, with no overflow).
    #[inline]
    pub(crate) fn exceeds(&self, n: u64) -> bool {
        u128::from(n) * u128::from(self.interval) > u128::from(self.capacity)
    }
}

/// How a window algorithm packs (window number, count) into one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowParams {
    /// Window (or slot) length in ns.
    pub len: u64,
    /// Bits of the word that hold the count; the window number takes the rest.
    pub count_bits: u32,
    /// Admissions per window.
    pub limit: u64,
}

const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// The token bucket's ticks per unit of time for `limit` per `period` units: the reduced
/// denominator of `period / limit`, at most `MAX_SCALE`.
const fn scale_of(limit: u64, period: u64) -> u64 {
    let reduced = limit / gcd(limit, period);
    if reduced < MAX_SCALE {
        reduced
    } else {
        MAX_SCALE
    }
}

/// `period / limit` in ticks of `1/scale` unit, rounded up (exact when `scale` is the reduced
/// denominator); `None` when more than `scale` requests per unit would round it up by a whole
/// factor, unless `or_slower` (then one per tick).
fn interval_of(period: u64, limit: u64, scale: u64, or_slower: bool) -> Option<u128> {
    let ticks = u128::from(period) * u128::from(scale);
    if !or_slower && ticks < u128::from(limit) {
        return None;
    }
    Some(ticks.div_ceil(u128::from(limit)))
}

/// Bits needed to hold `v`.
pub(crate) const fn bits(v: u64) -> u32 {
    u64::BITS - v.leading_zeros()
}

impl Quota {
    /// `limit` requests per `period`, with a burst equal to the limit.
    ///
    /// # Errors
    /// [`QuotaError::ZeroLimit`], [`QuotaError::ZeroPeriod`], [`QuotaError::LimitTooLarge`],
    /// [`QuotaError::PeriodTooLong`] or [`QuotaError::RateTooHigh`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, QuotaError};
    /// assert!(Quota::try_new(10, Duration::from_millis(100)).is_ok());
    /// assert_eq!(Quota::try_new(5, Duration::ZERO), Err(QuotaError::ZeroPeriod));
    /// assert!(matches!(
    ///     Quota::try_new(u64::MAX, Duration::from_nanos(1)),
    ///     Err(QuotaError::LimitTooLarge { .. })
    /// ));
    /// ```
    pub fn try_new(limit: u64, period: Duration) -> Result<Quota, QuotaError> {
        if limit == 0 {
            return Err(QuotaError::ZeroLimit);
        }
        if period.is_zero() {
            return Err(QuotaError::ZeroPeriod);
        }
        if limit > MAX_LIMIT {
            return Err(QuotaError::LimitTooLarge {
                limit,
                max: MAX_LIMIT,
            });
        }
        if period.as_nanos() > u128::from(MAX_PERIOD) {
            return Err(QuotaError::PeriodTooLong {
                period,
                max: Duration::from_nanos(MAX_PERIOD),
            });
        }
        let quota = Quota {
            limit,
            period_ns: period.as_nanos() as u64,
            burst: limit,
        };
        // Every algorithm must fit: the fixed window, the sliding window with its default
        // slots, and the token bucket (whose capacity check is the burst's).
        if quota.window(1).is_none() || quota.window(DEFAULT_SLOTS).is_none() {
            return Err(QuotaError::RateTooHigh { limit, period });
        }
        quota
            .gcra()
            .ok_or(QuotaError::RateTooHigh { limit, period })?;
        Ok(quota)
    }

    /// `limit` requests per second.
    ///
    /// # Errors
    /// As [`Quota::try_new`].
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(5)?.limit(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_second(limit: u64) -> Result<Quota, QuotaError> {
        Quota::try_new(limit, Duration::from_secs(1))
    }

    /// `limit` requests per minute.
    ///
    /// # Errors
    /// As [`Quota::try_new`].
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_minute(60)?.period().as_secs(), 60);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_minute(limit: u64) -> Result<Quota, QuotaError> {
        Quota::try_new(limit, Duration::from_secs(60))
    }

    /// `limit` requests per hour.
    ///
    /// # Errors
    /// As [`Quota::try_new`].
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_hour(1000)?.period().as_secs(), 3600);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_hour(limit: u64) -> Result<Quota, QuotaError> {
        Quota::try_new(limit, Duration::from_secs(3600))
    }

    /// The same rate with another burst: the token bucket's capacity, how many requests may
    /// pass at once after an idle spell. The window algorithms ignore it.
    ///
    /// # Errors
    /// [`QuotaError::ZeroBurst`] or [`QuotaError::BurstTooLarge`].
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(10)?.with_burst(1)?; // smooth: no bursts at all
    /// assert_eq!(q.burst(), 1);
    /// assert!(tollgate::Quota::per_second(10)?.with_burst(0).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_burst(self, burst: u64) -> Result<Quota, QuotaError> {
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        let quota = Quota { burst, ..self };
        match quota.gcra() {
            Some(_) if burst <= MAX_LIMIT => Ok(quota),
            _ => Err(QuotaError::BurstTooLarge {
                burst,
                max: self.max_burst(),
            }),
        }
    }

    /// Requests per period.
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(7)?.limit(), 7);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The period.
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_hour(7)?.period().as_secs(), 3600);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The token bucket's capacity (the limit unless set by [`Quota::with_burst`]).
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(7)?.with_burst(2)?.burst(), 2);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn burst(&self) -> u64 {
        self.burst
    }

    pub(crate) fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Whether the token bucket refills this quota with no rounding at all: true when
    /// `limit / gcd(limit, period in ns)` is at most 32 (3 per 7 s, 1000 per second, 7 per 3 s,
    /// 100 per minute...). Otherwise the interval between tokens is rounded up to the next
    /// 1/32 ns: the bucket runs slow by less than one part in 32 × (period/limit in ns), never fast.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// assert!(Quota::try_new(3, Duration::from_secs(7))?.is_exact());
    /// assert!(!Quota::per_second(999)?.is_exact()); // 999 = 27 × 37 shares nothing with 10^9
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_exact(&self) -> bool {
        self.limit / gcd(self.limit, self.period_ns) <= MAX_SCALE
    }

    fn max_burst(&self) -> u64 {
        match self.gcra_with(1) {
            Some(p) => (((1u64 << 62) - 1) / p.interval).min(MAX_LIMIT),
            None => 0,
        }
    }

    /// The token bucket's parameters; `None` if they cannot be represented.
    pub(crate) fn gcra(&self) -> Option<GcraParams> {
        self.gcra_with(self.burst)
    }

    fn gcra_with(&self, burst: u64) -> Option<GcraParams> {
        self.gcra_scaled(burst, scale_of(self.limit, self.period_ns), false)
    }

    /// The token bucket's refill with time counted in `unit`s, as `(interval, scale)`: one
    /// token every `interval` ticks of `1/scale` unit. `scale` is `limit / gcd(limit, period
    /// in units)`, at most 32, and `interval` is `period × scale / limit` rounded up: exact
    /// when that reduced denominator is at most 32, otherwise slower than the quota by less
    /// than one tick, never faster. The in-process token bucket counts in nanoseconds (a unit
    /// of 1 ns); a limiter on another clock (a server's, in microseconds) asks in its own unit
    /// and decides as the in-process one would at that resolution.
    ///
    /// `None` if `unit` is zero, the period is not a whole number of units, or the rate is
    /// above `scale` tokens per unit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// let q = Quota::try_new(3, Duration::from_secs(7))?; // a token every 7/3 s
    /// assert_eq!(q.token_interval(Duration::from_nanos(1)), Some((7_000_000_000, 3)));
    /// assert_eq!(q.token_interval(Duration::from_micros(1)), Some((7_000_000, 3)));
    /// let fine = Quota::try_new(1, Duration::from_nanos(1_500))?;
    /// assert_eq!(fine.token_interval(Duration::from_micros(1)), None); // 1.5 µs
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn token_interval(&self, unit: Duration) -> Option<(u64, u32)> {
        let unit = u64::try_from(unit.as_nanos()).ok().filter(|&u| u > 0)?;
        if !self.period_ns.is_multiple_of(unit) {
            return None;
        }
        let period = self.period_ns / unit;
        let scale = scale_of(self.limit, period);
        let interval = interval_of(period, self.limit, scale, false)?;
        // period < 2^59 and scale ≤ 32: the interval is below 2^64.
        Some((interval as u64, scale as u32))
    }

    /// The token bucket's parameters in ticks of `1/scale` ns (`1 ≤ scale ≤ MAX_SCALE`): how a
    /// live bucket, whose ticks are fixed by its first quota, takes a later one.
    #[cfg(feature = "std")]
    pub(crate) fn gcra_at_scale(&self, scale: u32) -> Option<GcraParams> {
        self.gcra_scaled(self.burst, u64::from(scale), false)
    }

    /// [`Quota::gcra_at_scale`], but a rate above one token per tick runs at one per tick
    /// (slower, never faster): how a live bucket takes a first quota finer than its tick.
    #[cfg(feature = "std")]
    pub(crate) fn gcra_at_scale_or_slower(&self, scale: u32) -> Option<GcraParams> {
        self.gcra_scaled(self.burst, u64::from(scale), true)
    }

    fn gcra_scaled(&self, burst: u64, scale: u64, or_slower: bool) -> Option<GcraParams> {
        debug_assert!((1..=MAX_SCALE).contains(&scale));
        let interval = interval_of(self.period_ns, self.limit, scale, or_slower)?;
        let capacity = interval.checked_mul(u128::from(burst))?;
        // HORIZON × scale ≤ 2^63 and capacity < 2^62: a theoretical arrival time plus one
        // more admission never exceeds 2^64 - 1 (see algo/token_bucket.rs).
        if capacity >= 1 << 62 {
            return None;
        }
        let interval = interval as u64;
        // interval ≤ capacity < 2^62, so shift ≤ 62 and magic < 2^63.
        let shift = u64::BITS - (interval - 1).leading_zeros();
        let magic = (1u128 << (62 + shift)).div_ceil(u128::from(interval)) as u64;
        Some(GcraParams {
            interval,
            capacity: capacity as u64,
            magic,
            scale: scale as u32,
            shift,
        })
    }

    /// The packing of a window algorithm whose period is split into `slots` slots; `None` if
    /// (slot number up to the horizon, count up to the limit) does not fit in 64 bits.
    pub(crate) fn window(&self, slots: u32) -> Option<WindowParams> {
        let len = self.period_ns.div_ceil(u64::from(slots)).max(1);
        let count_bits = bits(self.limit);
        // The largest window number plus one more in the head's look-ahead must fit.
        if bits(HORIZON / len + 1) + count_bits > u64::BITS {
            return None;
        }
        Some(WindowParams {
            len,
            count_bits,
            limit: self.limit,
        })
    }

    /// [`Quota::window`] with every bit the window number leaves over given to the count, so
    /// that a live limiter can later take a larger limit in the same word.
    #[cfg(feature = "std")]
    pub(crate) fn window_roomy(&self, slots: u32) -> Option<WindowParams> {
        let p = self.window(slots)?;
        Some(WindowParams {
            count_bits: (u64::BITS - bits(HORIZON / p.len + 1)).min(bits(MAX_LIMIT)),
            ..p
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_of_three_per_seven_seconds_is_exact() {
        let q = Quota::try_new(3, Duration::from_secs(7)).unwrap();
        let p = q.gcra().unwrap();
        assert_eq!(p.scale, 3);
        assert_eq!(p.interval, 7_000_000_000); // 7/3 s in ticks of 1/3 ns
        assert_eq!(p.capacity, 3 * 7_000_000_000);
        assert!(q.is_exact());
    }

    #[test]
    fn gcra_of_round_rates_needs_no_scale() {
        let p = Quota::per_second(1000).unwrap().gcra().unwrap();
        assert_eq!((p.scale, p.interval), (1, 1_000_000));
    }

    #[test]
    fn inexact_rates_round_the_interval_up() {
        let q = Quota::per_second(999).unwrap();
        let p = q.gcra().unwrap();
        assert_eq!(u64::from(p.scale), MAX_SCALE);
        // 10^9 × 32 / 999 = 32032032.03…, rounded up.
        assert_eq!(p.interval, 32_032_033);
        assert!(!q.is_exact());
    }

    #[test]
    fn tokens_divide_exactly_by_multiplication() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for (limit, period) in [
            (1, 1),
            (3, 7_000_000_000),
            (999, 1_000_000_000),
            (7, 3),
            (1, 1 << 40),
        ] {
            let q = Quota::try_new(limit, Duration::from_nanos(period)).unwrap();
            let p = q.gcra().unwrap();
            let edges = [
                0,
                1,
                p.interval - 1,
                p.interval,
                p.interval + 1,
                p.capacity,
                (1 << 62) - 1,
            ];
            for ticks in edges
                .into_iter()
                .chain((0..if cfg!(miri) { 500 } else { 10_000 }).map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    x >> 2
                }))
            {
                assert_eq!(
                    p.tokens(ticks),
                    ticks / p.interval,
                    "{ticks} / {}",
                    p.interval
                );
            }
        }
    }

    #[test]
    fn window_packing_fits_a_nanosecond_rate() {
        let q = Quota::try_new(1, Duration::from_nanos(1)).unwrap();
        let w = q.window(1).unwrap();
        assert_eq!((w.len, w.count_bits), (1, 1));
    }
}
