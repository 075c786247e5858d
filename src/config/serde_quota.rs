//! serde for [`Quota`]: as its canonical string, from a string or a map.

use core::fmt;
use core::time::Duration;

use crate::quota::{Quota, QuotaError};

use super::error::{ParseQuotaError, ParseQuotaErrorKind};
use super::grammar::Cursor;
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
        deserializer.deserialize_identifier(StrVisitor {
            expecting: "`limit`, `period` or `burst`",
            parse: |v| match v {
                "limit" => Ok(QuotaField::Limit),
                "period" => Ok(QuotaField::Period),
                "burst" => Ok(QuotaField::Burst),
                _ => Err(Refusal::UnknownField(QUOTA_FIELDS)),
            },
        })
    }
}

/// A value read from one string by `parse`: the visitor of every string-shaped item (field
/// names, periods, names of algorithms and policies), with what it expected for the error.
pub(super) struct StrVisitor<T> {
    pub(super) expecting: &'static str,
    pub(super) parse: fn(&str) -> Result<T, Refusal>,
}

/// Why a string was refused, as the serde error it becomes.
pub(super) enum Refusal {
    /// `unknown field`, expected one of these.
    UnknownField(&'static [&'static str]),
    /// `unknown variant`, expected one of these (the keyed settings' names, std only).
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    UnknownVariant(&'static [&'static str]),
    /// Malformed, for this reason.
    Invalid(ParseQuotaError),
}

impl<T> Visitor<'_> for StrVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(|refusal| match refusal {
            Refusal::UnknownField(expected) => E::unknown_field(v, expected),
            Refusal::UnknownVariant(expected) => E::unknown_variant(v, expected),
            Refusal::Invalid(err) => E::custom(err),
        })
    }
}

/// A period string, `[count] unit`, deserialized on its own.
struct Period(Duration);

impl<'de> Deserialize<'de> for Period {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(StrVisitor {
            expecting: "a duration with its unit, such as \"1s\", \"5m\" or \"250ms\"",
            parse: |v| parse_period(v).map(Period).map_err(Refusal::Invalid),
        })
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
                QuotaField::Period => set_once(&mut period, "period", map.next_value::<Period>())?,
                QuotaField::Burst => set_once(&mut burst, "burst", map.next_value::<u64>())?,
            }
        }
        let limit = limit.ok_or_else(|| de::Error::missing_field("limit"))?;
        let Period(period) = period.ok_or_else(|| de::Error::missing_field("period"))?;
        let quota = Quota::try_new(limit, period).map_err(|err| match err {
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
