//! Quotas from the strings people write in config files, and (with the `serde` feature)
//! serde support for [`Quota`] and for a keyed map's settings.
//!
//! # Grammar
//!
//! ```text
//! quota  := limit sep period [burst] (spaces allowed between every part)
//! limit  := number
//! sep    := "/" | "per"
//! period := [number] unit            ("s" alone means one second)
//! burst  := ["," ] "burst" [":" | "="] number
//! number := digit (digit | "_")*
//! unit   := ns | us | µs | ms | s | sec | second | m | min | minute | h | hr | hour
//!         | d | day | w | week            (plurals and any letter case accepted)
//! ```
//!
//! `"100/s"`, `"5000/h burst 200"`, `"10 per 1m"`, `"10/5m"`, `"3 per 7 seconds"` and
//! `"1_000 / 250ms, burst: 50"` all parse. A malformed string is a [`ParseQuotaError`]: what is
//! wrong ([`ParseQuotaErrorKind`]) and where (a byte offset). `Display` for a [`Quota`] writes
//! the canonical form (`"10/5m"`, `"5000/h burst 200"`), which parses back to the same quota.

use core::fmt;
use core::str::FromStr;
use core::time::Duration;

use crate::quota::{Quota, QuotaError};

/// Which part of a quota string an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaPart {
    /// The number of requests, before the `/` or `per`.
    Limit,
    /// The period: an optional count and a time unit.
    Period,
    /// The number after `burst`.
    Burst,
}

impl fmt::Display for QuotaPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuotaPart::Limit => "limit",
            QuotaPart::Period => "period",
            QuotaPart::Burst => "burst",
        })
    }
}

/// What is wrong with a quota string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseQuotaErrorKind {
    /// The string is empty or only spaces.
    Empty,
    /// A number was expected here.
    ExpectedNumber(QuotaPart),
    /// The number does not fit in 64 bits.
    NumberTooLarge(QuotaPart),
    /// After the limit comes `/` or `per`.
    ExpectedSeparator,
    /// A time unit (`s`, `min`, `h`...) was expected here.
    ExpectedUnit,
    /// A word that is not a time unit tollgate knows.
    UnknownUnit,
    /// Something follows the period that is not `burst N`.
    UnexpectedInput,
    /// The string is well formed but the quota it describes is refused.
    Invalid(QuotaPart, QuotaError),
}

/// A quota string that could not be parsed: what is wrong, and at which byte offset.
///
/// ```
/// use tollgate::{ParseQuotaErrorKind, Quota, QuotaPart};
/// let err = "100/fortnight".parse::<Quota>().unwrap_err();
/// assert_eq!(err.kind(), ParseQuotaErrorKind::UnknownUnit);
/// assert_eq!(err.position(), 4);
/// assert_eq!(
///     err.to_string(),
///     "unknown time unit at byte 4 (expected ns, us, ms, s, m, h, d or w, or a name such as \
///      \"minute\")"
/// );
/// let err = "0/s".parse::<Quota>().unwrap_err();
/// assert!(matches!(err.kind(), ParseQuotaErrorKind::Invalid(QuotaPart::Limit, _)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseQuotaError {
    kind: ParseQuotaErrorKind,
    position: usize,
}

impl ParseQuotaError {
    /// What is wrong.
    ///
    /// ```
    /// use tollgate::{ParseQuotaErrorKind, Quota};
    /// let err = "".parse::<Quota>().unwrap_err();
    /// assert_eq!(err.kind(), ParseQuotaErrorKind::Empty);
    /// ```
    pub fn kind(&self) -> ParseQuotaErrorKind {
        self.kind
    }

    /// The byte offset into the string where the problem starts.
    ///
    /// ```
    /// use tollgate::Quota;
    /// assert_eq!("10 per 1m and more".parse::<Quota>().unwrap_err().position(), 10);
    /// ```
    pub fn position(&self) -> usize {
        self.position
    }
}

impl fmt::Display for ParseQuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.position;
        match self.kind {
            ParseQuotaErrorKind::Empty => {
                f.write_str("empty quota (expected something like \"100/s\")")
            }
            ParseQuotaErrorKind::ExpectedNumber(part) => {
                write!(f, "expected the {part} (a whole number) at byte {at}")
            }
            ParseQuotaErrorKind::NumberTooLarge(part) => {
                write!(f, "the {part} at byte {at} does not fit in 64 bits")
            }
            ParseQuotaErrorKind::ExpectedSeparator => {
                write!(f, "expected \"/\" or \"per\" after the limit, at byte {at}")
            }
            ParseQuotaErrorKind::ExpectedUnit => {
                write!(f, "expected a time unit (s, m, h, d, ms...) at byte {at}")
            }
            ParseQuotaErrorKind::UnknownUnit => write!(
                f,
                "unknown time unit at byte {at} (expected ns, us, ms, s, m, h, d or w, or a name \
                 such as \"minute\")"
            ),
            ParseQuotaErrorKind::UnexpectedInput => write!(
                f,
                "unexpected text at byte {at} (only \"burst N\" may follow the period)"
            ),
            ParseQuotaErrorKind::Invalid(part, err) => {
                write!(f, "the {part} at byte {at} is refused: {err}")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ParseQuotaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ParseQuotaErrorKind::Invalid(_, err) => Some(err),
            _ => None,
        }
    }
}

/// Nanoseconds in each unit, longest names first within a letter so that `min` is not read
/// as `m` followed by garbage (the whole word is matched, so order only documents intent).
const UNITS: &[(&str, u64)] = &[
    ("ns", 1),
    ("nsec", 1),
    ("nanosecond", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("usec", 1_000),
    ("microsecond", 1_000),
    ("ms", 1_000_000),
    ("msec", 1_000_000),
    ("millisecond", 1_000_000),
    ("s", 1_000_000_000),
    ("sec", 1_000_000_000),
    ("second", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("minute", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("hr", 3_600_000_000_000),
    ("hour", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
    ("day", 86_400_000_000_000),
    ("w", 604_800_000_000_000),
    ("week", 604_800_000_000_000),
];

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

fn unit_nanos(word: &str) -> Option<u64> {
    // A plural `s` is accepted on the names of two letters or more ("mins", "hours"), not on
    // the one-letter units, where "ms" is milliseconds and "hs" nothing.
    let singular = match word.len() {
        3.. => word.strip_suffix(['s', 'S']).unwrap_or(word),
        _ => word,
    };
    UNITS.iter().find_map(|&(name, ns)| {
        (name.eq_ignore_ascii_case(word) || (name.len() > 1 && name.eq_ignore_ascii_case(singular)))
            .then_some(ns)
    })
}

/// A cursor over the input, all offsets in bytes.
struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.at..]
    }

    fn skip_spaces(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, token: &str) -> bool {
        let rest = self.rest();
        if rest.len() >= token.len()
            && rest.is_char_boundary(token.len())
            && rest[..token.len()].eq_ignore_ascii_case(token)
        {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    /// A whole word (`per`, `burst`): the token not followed by another letter.
    fn eat_word(&mut self, word: &str) -> bool {
        let start = self.at;
        if self.eat(word) && !self.rest().starts_with(|c: char| c.is_alphabetic()) {
            return true;
        }
        self.at = start;
        false
    }

    fn error(&self, kind: ParseQuotaErrorKind) -> ParseQuotaError {
        ParseQuotaError {
            kind,
            position: self.at,
        }
    }

    /// Digits with `_` between them; `None` (nothing eaten) when no digit is here.
    fn number(&mut self, part: QuotaPart) -> Result<Option<u64>, ParseQuotaError> {
        let start = self.at;
        let rest = self.rest();
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Ok(None);
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        let mut value: u64 = 0;
        for b in rest[..len].bytes().filter(|&b| b != b'_') {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(b - b'0')))
                .ok_or(ParseQuotaError {
                    kind: ParseQuotaErrorKind::NumberTooLarge(part),
                    position: start,
                })?;
        }
        self.at += len;
        Ok(Some(value))
    }

    fn required_number(&mut self, part: QuotaPart) -> Result<u64, ParseQuotaError> {
        self.number(part)?
            .ok_or_else(|| self.error(ParseQuotaErrorKind::ExpectedNumber(part)))
    }

    /// `[count] unit`: the period, as a duration.
    fn period(&mut self) -> Result<Duration, ParseQuotaError> {
        let start = self.at;
        let count = self.number(QuotaPart::Period)?.unwrap_or(1);
        self.skip_spaces();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(rest.len());
        if len == 0 {
            return Err(self.error(ParseQuotaErrorKind::ExpectedUnit));
        }
        let ns =
            unit_nanos(&rest[..len]).ok_or_else(|| self.error(ParseQuotaErrorKind::UnknownUnit))?;
        self.at += len;
        let total = u128::from(count) * u128::from(ns);
        let secs = u64::try_from(total / 1_000_000_000).map_err(|_| ParseQuotaError {
            kind: ParseQuotaErrorKind::NumberTooLarge(QuotaPart::Period),
            position: start,
        })?;
        Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
    }
}

fn parse(s: &str) -> Result<Quota, ParseQuotaError> {
    let mut c = Cursor { s, at: 0 };
    c.skip_spaces();
    if c.rest().is_empty() {
        return Err(c.error(ParseQuotaErrorKind::Empty));
    }
    let limit_at = c.at;
    let limit = c.required_number(QuotaPart::Limit)?;
    c.skip_spaces();
    if !(c.eat("/") || c.eat_word("per")) {
        return Err(c.error(ParseQuotaErrorKind::ExpectedSeparator));
    }
    c.skip_spaces();
    let period_at = c.at;
    let period = c.period()?;
    let invalid = |part, at, err: QuotaError| ParseQuotaError {
        kind: ParseQuotaErrorKind::Invalid(part, err),
        position: at,
    };
    let quota = Quota::new(limit, period).map_err(|err| match err {
        QuotaError::ZeroLimit | QuotaError::LimitTooLarge { .. } => {
            invalid(QuotaPart::Limit, limit_at, err)
        }
        _ => invalid(QuotaPart::Period, period_at, err),
    })?;
    c.skip_spaces();
    if c.rest().is_empty() {
        return Ok(quota);
    }
    let burst_word = c.at;
    if c.eat(",") {
        c.skip_spaces();
    }
    if !c.eat_word("burst") {
        c.at = burst_word;
        return Err(c.error(ParseQuotaErrorKind::UnexpectedInput));
    }
    c.skip_spaces();
    if c.eat(":") || c.eat("=") {
        c.skip_spaces();
    }
    let burst_at = c.at;
    let burst = c.required_number(QuotaPart::Burst)?;
    let quota = quota
        .with_burst(burst)
        .map_err(|err| invalid(QuotaPart::Burst, burst_at, err))?;
    c.skip_spaces();
    if !c.rest().is_empty() {
        return Err(c.error(ParseQuotaErrorKind::UnexpectedInput));
    }
    Ok(quota)
}

/// Parses the strings people write: `"100/s"`, `"5000/h burst 200"`, `"10 per 1m"`,
/// `"10/5m"` (see the grammar in this module's docs).
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// let q: Quota = "5000/h burst 200".parse()?;
/// assert_eq!((q.limit(), q.period(), q.burst()), (5000, Duration::from_secs(3600), 200));
/// assert_eq!("10 per 1m".parse::<Quota>()?, Quota::per_minute(10)?);
/// assert_eq!("10/5m".parse::<Quota>()?.period(), Duration::from_secs(300));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl FromStr for Quota {
    type Err = ParseQuotaError;

    fn from_str(s: &str) -> Result<Quota, ParseQuotaError> {
        parse(s)
    }
}

/// The canonical string of a quota: the longest unit that divides the period, the count left
/// out when it is one, the burst only when it differs from the limit. It parses back to the
/// same quota.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// assert_eq!(Quota::per_second(100)?.to_string(), "100/s");
/// assert_eq!(Quota::new(10, Duration::from_secs(300))?.to_string(), "10/5m");
/// assert_eq!(Quota::per_hour(5000)?.with_burst(200)?.to_string(), "5000/h burst 200");
/// assert_eq!(Quota::new(7, Duration::from_millis(1500))?.to_string(), "7/1500ms");
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

#[cfg(all(feature = "serde", feature = "std"))]
pub use self::serde_impls::{KeyedSettings, SettingsError};

#[cfg(feature = "serde")]
mod serde_impls {
    use super::*;
    use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
    use serde::ser::{Serialize, Serializer};

    /// As its canonical string (`"100/s"`, `"5000/h burst 200"`); see [`Quota`]'s `Display`.
    ///
    /// ```
    /// use tollgate::Quota;
    /// let json = serde_json::to_string(&Quota::per_minute(60)?).unwrap();
    /// assert_eq!(json, r#""60/m""#);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    impl Serialize for Quota {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_str(self)
        }
    }

    /// From a quota string (`"100/s"`) or a map `{ limit, period, burst }`, where `period` is
    /// a duration string (`"1s"`, `"5m"`, `"250 ms"`) and `burst` is optional. Errors say
    /// which field is wrong and why.
    ///
    /// ```
    /// use tollgate::Quota;
    /// let a: Quota = serde_json::from_str(r#""5000/h burst 200""#).unwrap();
    /// let b: Quota = serde_json::from_str(r#"{"limit": 5000, "period": "1h", "burst": 200}"#).unwrap();
    /// assert_eq!(a, b);
    /// let err = serde_json::from_str::<Quota>(r#"{"limit": 5, "period": "1 fortnight"}"#).unwrap_err();
    /// assert!(err.to_string().starts_with("period: unknown time unit at byte 2"));
    /// ```
    impl<'de> Deserialize<'de> for Quota {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Quota, D::Error> {
            if deserializer.is_human_readable() {
                deserializer.deserialize_any(QuotaVisitor)
            } else {
                deserializer.deserialize_str(QuotaVisitor)
            }
        }
    }

    struct QuotaVisitor;

    /// The fields of a quota map.
    enum QuotaField {
        Limit,
        Period,
        Burst,
    }

    const QUOTA_FIELDS: &[&str] = &["limit", "period", "burst"];

    impl<'de> Deserialize<'de> for QuotaField {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct FieldVisitor;
            impl Visitor<'_> for FieldVisitor {
                type Value = QuotaField;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("`limit`, `period` or `burst`")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<QuotaField, E> {
                    match v {
                        "limit" => Ok(QuotaField::Limit),
                        "period" => Ok(QuotaField::Period),
                        "burst" => Ok(QuotaField::Burst),
                        _ => Err(E::unknown_field(v, QUOTA_FIELDS)),
                    }
                }
            }
            deserializer.deserialize_identifier(FieldVisitor)
        }
    }

    /// A period string, `[count] unit`, deserialized on its own.
    struct Period(Duration);

    impl<'de> Deserialize<'de> for Period {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct PeriodVisitor;
            impl Visitor<'_> for PeriodVisitor {
                type Value = Period;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a duration with its unit, such as \"1s\", \"5m\" or \"250ms\"")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Period, E> {
                    parse_period(v).map(Period).map_err(E::custom)
                }
            }
            deserializer.deserialize_str(PeriodVisitor)
        }
    }

    /// A period alone: `"5m"`, `"1 hour"`, `"s"`.
    fn parse_period(s: &str) -> Result<Duration, ParseQuotaError> {
        let mut c = Cursor { s, at: 0 };
        c.skip_spaces();
        if c.rest().is_empty() {
            return Err(c.error(ParseQuotaErrorKind::ExpectedUnit));
        }
        let period = c.period()?;
        c.skip_spaces();
        if !c.rest().is_empty() {
            return Err(c.error(ParseQuotaErrorKind::UnexpectedInput));
        }
        Ok(period)
    }

    impl<'de> Visitor<'de> for QuotaVisitor {
        type Value = Quota;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(
                "a quota string such as \"100/s\" or a map with `limit`, `period` and an \
                 optional `burst`",
            )
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Quota, E> {
            v.parse().map_err(E::custom)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Quota, A::Error> {
            let (mut limit, mut period, mut burst) = (None, None, None);
            while let Some(field) = map.next_key::<QuotaField>()? {
                match field {
                    QuotaField::Limit => set_once(&mut limit, "limit", map.next_value::<u64>())?,
                    QuotaField::Period => {
                        set_once(&mut period, "period", map.next_value::<Period>())?
                    }
                    QuotaField::Burst => set_once(&mut burst, "burst", map.next_value::<u64>())?,
                }
            }
            let limit = limit.ok_or_else(|| de::Error::missing_field("limit"))?;
            let Period(period) = period.ok_or_else(|| de::Error::missing_field("period"))?;
            let quota = Quota::new(limit, period).map_err(|err| match err {
                QuotaError::ZeroLimit | QuotaError::LimitTooLarge { .. } => {
                    de::Error::custom(format_args!("limit: {err}"))
                }
                _ => de::Error::custom(format_args!("period: {err}")),
            })?;
            match burst {
                None => Ok(quota),
                Some(burst) => quota
                    .with_burst(burst)
                    .map_err(|err| de::Error::custom(format_args!("burst: {err}"))),
            }
        }
    }

    /// Stores a field's value, naming the field in its error; a field given twice is an error.
    pub(super) fn set_once<T, E: de::Error>(
        slot: &mut Option<T>,
        name: &'static str,
        value: Result<T, E>,
    ) -> Result<(), E> {
        if slot.is_some() {
            return Err(E::duplicate_field(name));
        }
        *slot = Some(value.map_err(|err| E::custom(format_args!("{name}: {err}")))?);
        Ok(())
    }

    #[cfg(feature = "std")]
    pub use self::keyed::{KeyedSettings, SettingsError};

    #[cfg(feature = "std")]
    mod keyed {
        use super::*;
        use crate::clock::Clock;
        use crate::keyed::{Algorithm, KeyedBuilder, KeyedLimiter, WhenFull};
        use core::hash::Hash;
        use core::num::NonZeroUsize;
        use serde::ser::SerializeMap;
        use std::collections::BTreeMap;
        use std::string::String;

        /// A keyed map's settings as a config file gives them: the algorithm, the default
        /// quota, named plans, an optional bound on the number of keys, and whether its
        /// quotas can change while it runs.
        ///
        /// Deserialized from a map with the fields `algorithm` (`"token_bucket"`,
        /// `"fixed_window"`, `"sliding_window"`, `"sliding_log"`), `quota`, `plans` (a map
        /// from plan name to quota, optional), `max_keys` (optional, at least 1),
        /// `when_full` (`"deny"` or `"admit_untracked"`, only with `max_keys`) and `live`
        /// (`true` or `false`, optional: see [`KeyedBuilder::live`]). Unknown fields are
        /// refused, so a misspelt setting is an error, not a silent default.
        ///
        /// ```
        /// use tollgate::{KeyedSettings, ManualClock};
        /// let settings: KeyedSettings = serde_json::from_str(r#"{
        ///     "algorithm": "token_bucket",
        ///     "quota": "5/s",
        ///     "plans": { "pro": "50/s burst 100" },
        ///     "max_keys": 100000,
        ///     "when_full": "deny"
        /// }"#).unwrap();
        /// let users = settings.build_with_clock::<String, _>(ManualClock::new()).unwrap();
        /// let pro = settings.plan("pro").unwrap();
        /// assert!(users.try_acquire_with("carol", pro).is_allowed());
        ///
        /// let err = serde_json::from_str::<KeyedSettings>(r#"{"algorithm": "gcra", "quota": "5/s"}"#)
        ///     .unwrap_err();
        /// assert!(err.to_string().starts_with("algorithm: unknown variant `gcra`"));
        /// ```
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct KeyedSettings {
            /// The algorithm every key's limiter runs.
            pub algorithm: Algorithm,
            /// The quota of a key that has no plan.
            pub quota: Quota,
            /// Quotas by plan name, for [`KeyedLimiter::try_acquire_with`].
            pub plans: BTreeMap<String, Quota>,
            /// A bound on the number of keys and what to do when it is reached.
            pub max_keys: Option<(NonZeroUsize, WhenFull)>,
            /// Whether the map's quotas can change while it runs ([`KeyedBuilder::live`]).
            pub live: bool,
        }

        /// Settings that cannot make a keyed map: which field, and why.
        ///
        /// ```
        /// use tollgate::{KeyedSettings, ManualClock};
        /// let settings: KeyedSettings = serde_json::from_str(
        ///     r#"{"algorithm": "sliding_log", "quota": "5/s", "plans": {"huge": "140737488355328/d"}}"#,
        /// ).unwrap();
        /// let err = settings.build_with_clock::<u64, _>(ManualClock::new()).unwrap_err();
        /// assert_eq!(err.field(), "plans.huge");
        /// ```
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct SettingsError {
            field: String,
            error: QuotaError,
        }

        impl SettingsError {
            /// The field at fault: `quota`, `plans.NAME`, or `live` (an algorithm with no live
            /// keyed form).
            ///
            /// ```
            /// use tollgate::{KeyedSettings, ManualClock};
            /// let s: KeyedSettings = serde_json::from_str(
            ///     r#"{"algorithm": "sliding_log", "quota": "140737488355328/d"}"#,
            /// ).unwrap();
            /// assert_eq!(s.build_with_clock::<u64, _>(ManualClock::new()).unwrap_err().field(), "quota");
            /// ```
            pub fn field(&self) -> &str {
                &self.field
            }

            /// Why the algorithm refused the field's quota.
            ///
            /// ```
            /// use tollgate::{KeyedSettings, ManualClock, QuotaError};
            /// let s: KeyedSettings = serde_json::from_str(
            ///     r#"{"algorithm": "sliding_log", "quota": "140737488355328/d"}"#,
            /// ).unwrap();
            /// let err = s.build_with_clock::<u64, _>(ManualClock::new()).unwrap_err();
            /// assert!(matches!(err.error(), QuotaError::LogTooLarge { .. }));
            /// ```
            pub fn error(&self) -> QuotaError {
                self.error
            }
        }

        impl fmt::Display for SettingsError {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}: {}", self.field, self.error)
            }
        }

        impl std::error::Error for SettingsError {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.error)
            }
        }

        impl KeyedSettings {
            /// Settings with no plans and no bound.
            ///
            /// ```
            /// use tollgate::{Algorithm, KeyedSettings, Quota};
            /// let s = KeyedSettings::new(Algorithm::FixedWindow, Quota::per_second(10)?);
            /// assert!(s.plans.is_empty() && s.max_keys.is_none());
            /// # Ok::<(), tollgate::QuotaError>(())
            /// ```
            pub fn new(algorithm: Algorithm, quota: Quota) -> KeyedSettings {
                KeyedSettings {
                    algorithm,
                    quota,
                    plans: BTreeMap::new(),
                    max_keys: None,
                    live: false,
                }
            }

            /// The quota of the plan called `name`.
            ///
            /// ```
            /// use tollgate::{Algorithm, KeyedSettings, Quota};
            /// let mut s = KeyedSettings::new(Algorithm::TokenBucket, Quota::per_second(5)?);
            /// s.plans.insert("pro".into(), Quota::per_second(50)?);
            /// assert_eq!(s.plan("pro"), Some(&Quota::per_second(50)?));
            /// assert_eq!(s.plan("gold"), None);
            /// # Ok::<(), tollgate::QuotaError>(())
            /// ```
            pub fn plan(&self, name: &str) -> Option<&Quota> {
                self.plans.get(name)
            }

            /// A builder with these settings (algorithm, quota, bound, live), to pick a hasher or a
            /// capacity before building. Plans are not checked here: see
            /// [`KeyedSettings::build_with_clock`].
            ///
            /// ```
            /// use tollgate::{Algorithm, KeyedSettings, ManualClock, Quota};
            /// let s = KeyedSettings::new(Algorithm::TokenBucket, Quota::per_second(5)?);
            /// let map = s.builder::<u64>().capacity(1024).build_with_clock(ManualClock::new())?;
            /// assert!(map.try_acquire(&1).is_allowed());
            /// # Ok::<(), tollgate::QuotaError>(())
            /// ```
            pub fn builder<K>(&self) -> KeyedBuilder<K>
            where
                K: Hash + Eq,
            {
                let mut builder = KeyedLimiter::<K>::builder(self.algorithm, self.quota);
                if self.live {
                    builder = builder.live();
                }
                match self.max_keys {
                    Some((max, when_full)) => builder.max_keys(max, when_full),
                    None => builder,
                }
            }

            /// The keyed map, after checking that its algorithm can run the default quota and
            /// every plan's.
            ///
            /// # Errors
            /// A [`SettingsError`] naming the quota (`quota` or `plans.NAME`) the algorithm
            /// refuses, and why.
            ///
            /// ```
            /// use tollgate::{Algorithm, KeyedSettings, ManualClock, Quota};
            /// let s = KeyedSettings::new(Algorithm::SlidingWindow, Quota::per_second(5)?);
            /// let map = s.build_with_clock::<&str, _>(ManualClock::new())?;
            /// assert!(map.try_acquire(&"alice").is_allowed());
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            pub fn build_with_clock<K, C>(
                &self,
                clock: C,
            ) -> Result<KeyedLimiter<K, C>, SettingsError>
            where
                K: Hash + Eq,
                C: Clock,
            {
                let map = self
                    .builder::<K>()
                    .build_with_clock(clock)
                    .map_err(|error| SettingsError {
                        field: if error == QuotaError::NotLive {
                            "live"
                        } else {
                            "quota"
                        }
                        .into(),
                        error,
                    })?;
                for (name, quota) in &self.plans {
                    map.check_quota(quota).map_err(|error| SettingsError {
                        field: std::format!("plans.{name}"),
                        error,
                    })?;
                }
                Ok(map)
            }
        }

        const ALGORITHMS: &[&str] = &[
            "token_bucket",
            "fixed_window",
            "sliding_window",
            "sliding_log",
        ];

        fn algorithm_name(a: Algorithm) -> &'static str {
            match a {
                Algorithm::TokenBucket => ALGORITHMS[0],
                Algorithm::FixedWindow => ALGORITHMS[1],
                Algorithm::SlidingWindow => ALGORITHMS[2],
                Algorithm::SlidingLog => ALGORITHMS[3],
            }
        }

        /// As `"token_bucket"`, `"fixed_window"`, `"sliding_window"` or `"sliding_log"`
        /// (`-` may stand for `_` when read).
        ///
        /// ```
        /// use tollgate::Algorithm;
        /// assert_eq!(serde_json::to_string(&Algorithm::SlidingLog).unwrap(), r#""sliding_log""#);
        /// let a: Algorithm = serde_json::from_str(r#""token-bucket""#).unwrap();
        /// assert_eq!(a, Algorithm::TokenBucket);
        /// ```
        impl Serialize for Algorithm {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(algorithm_name(*self))
            }
        }

        /// See `Serialize for Algorithm`.
        impl<'de> Deserialize<'de> for Algorithm {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = Algorithm;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("an algorithm name such as \"token_bucket\"")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<Algorithm, E> {
                        Algorithm::ALL
                            .into_iter()
                            .find(|&a| same_name(algorithm_name(a), v))
                            .ok_or_else(|| E::unknown_variant(v, ALGORITHMS))
                    }
                }
                deserializer.deserialize_str(V)
            }
        }

        const WHEN_FULL: &[&str] = &["deny", "admit_untracked"];

        /// As `"deny"` or `"admit_untracked"` (`-` may stand for `_` when read).
        ///
        /// ```
        /// use tollgate::WhenFull;
        /// assert_eq!(serde_json::to_string(&WhenFull::AdmitUntracked).unwrap(), r#""admit_untracked""#);
        /// ```
        impl Serialize for WhenFull {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(match self {
                    WhenFull::Deny => WHEN_FULL[0],
                    WhenFull::AdmitUntracked => WHEN_FULL[1],
                })
            }
        }

        /// See `Serialize for WhenFull`.
        impl<'de> Deserialize<'de> for WhenFull {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = WhenFull;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("\"deny\" or \"admit_untracked\"")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<WhenFull, E> {
                        if same_name(WHEN_FULL[0], v) {
                            Ok(WhenFull::Deny)
                        } else if same_name(WHEN_FULL[1], v) {
                            Ok(WhenFull::AdmitUntracked)
                        } else {
                            Err(E::unknown_variant(v, WHEN_FULL))
                        }
                    }
                }
                deserializer.deserialize_str(V)
            }
        }

        /// `token_bucket` matches `token_bucket`, `token-bucket` and `Token_Bucket`.
        fn same_name(name: &str, given: &str) -> bool {
            name.len() == given.len()
                && name
                    .bytes()
                    .zip(given.bytes())
                    .all(|(a, b)| a.eq_ignore_ascii_case(&b) || (a == b'_' && b == b'-'))
        }

        const SETTINGS_FIELDS: &[&str] = &[
            "algorithm",
            "quota",
            "plans",
            "max_keys",
            "when_full",
            "live",
        ];

        /// As a map with the fields described on [`KeyedSettings`]; `plans` is left out when
        /// empty, `max_keys` and `when_full` when there is no bound, `live` when false.
        impl Serialize for KeyedSettings {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let len = 2
                    + usize::from(!self.plans.is_empty())
                    + 2 * usize::from(self.max_keys.is_some())
                    + usize::from(self.live);
                let mut map = serializer.serialize_map(Some(len))?;
                map.serialize_entry("algorithm", &self.algorithm)?;
                map.serialize_entry("quota", &self.quota)?;
                if !self.plans.is_empty() {
                    map.serialize_entry("plans", &self.plans)?;
                }
                if let Some((max, when_full)) = self.max_keys {
                    map.serialize_entry("max_keys", &max.get())?;
                    map.serialize_entry("when_full", &when_full)?;
                }
                if self.live {
                    map.serialize_entry("live", &true)?;
                }
                map.end()
            }
        }

        /// See [`KeyedSettings`] for the fields; every error names its field.
        impl<'de> Deserialize<'de> for KeyedSettings {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_map(SettingsVisitor)
            }
        }

        struct SettingsVisitor;

        /// A plan map whose errors name the plan (`pro: ...`).
        struct Plans(BTreeMap<String, Quota>);

        impl<'de> Deserialize<'de> for Plans {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = Plans;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a map from plan name to quota")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Plans, A::Error> {
                        let mut plans = BTreeMap::new();
                        while let Some(name) = map.next_key::<String>()? {
                            let quota = map
                                .next_value::<Quota>()
                                .map_err(|err| de::Error::custom(format_args!("{name}: {err}")))?;
                            if plans.insert(name, quota).is_some() {
                                return Err(de::Error::custom("a plan is given twice"));
                            }
                        }
                        Ok(Plans(plans))
                    }
                }
                deserializer.deserialize_map(V)
            }
        }

        impl<'de> Visitor<'de> for SettingsVisitor {
            type Value = KeyedSettings;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a map with `algorithm`, `quota` and optionally `plans`, `max_keys`, \
                     `when_full`, `live`",
                )
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyedSettings, A::Error> {
                let mut algorithm = None;
                let mut quota = None;
                let mut plans = None;
                let mut max_keys = None;
                let mut when_full = None;
                let mut live = None;
                while let Some(key) = map.next_key::<SettingsKey>()? {
                    match key {
                        SettingsKey::Algorithm => {
                            set_once(&mut algorithm, "algorithm", map.next_value())?
                        }
                        SettingsKey::Quota => set_once(&mut quota, "quota", map.next_value())?,
                        SettingsKey::Plans => {
                            set_once(&mut plans, "plans", map.next_value::<Plans>())?
                        }
                        SettingsKey::MaxKeys => {
                            set_once(&mut max_keys, "max_keys", map.next_value::<u64>())?
                        }
                        SettingsKey::WhenFull => {
                            set_once(&mut when_full, "when_full", map.next_value())?
                        }
                        SettingsKey::Live => set_once(&mut live, "live", map.next_value())?,
                    }
                }
                let algorithm = algorithm.ok_or_else(|| de::Error::missing_field("algorithm"))?;
                let quota = quota.ok_or_else(|| de::Error::missing_field("quota"))?;
                let max_keys = match (max_keys, when_full) {
                    (None, None) => None,
                    (None, Some(_)) => {
                        return Err(de::Error::custom(
                            "when_full: has no effect without max_keys",
                        ))
                    }
                    (Some(max), when_full) => {
                        let max = usize::try_from(max)
                            .ok()
                            .and_then(NonZeroUsize::new)
                            .ok_or_else(|| {
                                de::Error::custom(format_args!(
                                    "max_keys: must be between 1 and {}, not {max}",
                                    usize::MAX
                                ))
                            })?;
                        Some((max, when_full.unwrap_or_default()))
                    }
                };
                Ok(KeyedSettings {
                    algorithm,
                    quota,
                    plans: plans.map(|Plans(p)| p).unwrap_or_default(),
                    max_keys,
                    live: live.unwrap_or(false),
                })
            }
        }

        enum SettingsKey {
            Algorithm,
            Quota,
            Plans,
            MaxKeys,
            WhenFull,
            Live,
        }

        impl<'de> Deserialize<'de> for SettingsKey {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = SettingsKey;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a keyed-map setting")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<SettingsKey, E> {
                        Ok(match v {
                            "algorithm" => SettingsKey::Algorithm,
                            "quota" => SettingsKey::Quota,
                            "plans" => SettingsKey::Plans,
                            "max_keys" => SettingsKey::MaxKeys,
                            "when_full" => SettingsKey::WhenFull,
                            "live" => SettingsKey::Live,
                            _ => return Err(E::unknown_field(v, SETTINGS_FIELDS)),
                        })
                    }
                }
                deserializer.deserialize_identifier(V)
            }
        }
    }
}
