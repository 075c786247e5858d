//! The canonical string of a quota, which parses back to the same quota.

use core::fmt;

use crate::quota::Quota;

/// The unit `Display` writes for a period: the longest that divides it.
const CANONICAL_UNITS: &[(&str, u64)] = &[
    ("w", 604_800_000_000_000),
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// The canonical string of a quota: the longest unit that divides the period, the count left
/// out when it is one, the burst only when it differs from the limit. It parses back to the
/// same quota.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// assert_eq!(Quota::per_second(100)?.to_string(), "100/s");
/// assert_eq!(Quota::try_new(10, Duration::from_secs(300))?.to_string(), "10/5m");
/// assert_eq!(Quota::per_hour(5000)?.with_burst(200)?.to_string(), "5000/h burst 200");
/// assert_eq!(Quota::try_new(7, Duration::from_millis(1500))?.to_string(), "7/1500ms");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.limit())?;
        write_period(f, self.period_ns())?;
        if self.burst() != self.limit() {
            write!(f, " burst {}", self.burst())?;
        }
        Ok(())
    }
}

/// `5m`, `s`, `1500ms`: the count left out when it is one.
fn write_period(f: &mut fmt::Formatter<'_>, ns: u64) -> fmt::Result {
    let &(unit, per) = CANONICAL_UNITS
        .iter()
        .find(|&&(_, per)| ns.is_multiple_of(per))
        .expect("every period is a whole number of nanoseconds");
    match ns / per {
        1 => f.write_str(unit),
        count => write!(f, "{count}{unit}"),
    }
}
