//! A keyed map's settings as a config file gives them ([`KeyedSettings`]), with serde.

use core::fmt;

use super::serde_quota::{set_once, Refusal, StrVisitor};
use crate::quota::Quota;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, Serializer};

use crate::clock::Clock;
use crate::keyed::{Algorithm, KeyedBuilder, KeyedError, KeyedLimiter, WhenFull};
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
    error: KeyedError,
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

    /// Why the field was refused: the algorithm refused its quota, or (`live`) it has no live
    /// keyed form.
    ///
    /// ```
    /// use tollgate::{KeyedError, KeyedSettings, ManualClock, QuotaError};
    /// let s: KeyedSettings = serde_json::from_str(
    ///     r#"{"algorithm": "sliding_log", "quota": "140737488355328/d"}"#,
    /// ).unwrap();
    /// let err = s.build_with_clock::<u64, _>(ManualClock::new()).unwrap_err();
    /// assert!(matches!(err.error(), KeyedError::Quota(QuotaError::LogTooLarge { .. })));
    /// ```
    pub fn error(&self) -> KeyedError {
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
    /// # Ok::<(), tollgate::KeyedError>(())
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
    pub fn build_with_clock<K, C>(&self, clock: C) -> Result<KeyedLimiter<K, C>, SettingsError>
    where
        K: Hash + Eq,
        C: Clock,
    {
        let map = self
            .builder::<K>()
            .build_with_clock(clock)
            .map_err(|error| SettingsError {
                field: if error == KeyedError::NotLive {
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
                error: error.into(),
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
        deserializer.deserialize_str(StrVisitor {
            expecting: "an algorithm name such as \"token_bucket\"",
            parse: |v| {
                Algorithm::ALL
                    .into_iter()
                    .find(|&a| same_name(algorithm_name(a), v))
                    .ok_or(Refusal::UnknownVariant(ALGORITHMS))
            },
        })
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
        deserializer.deserialize_str(StrVisitor {
            expecting: "\"deny\" or \"admit_untracked\"",
            parse: |v| {
                if same_name(WHEN_FULL[0], v) {
                    Ok(WhenFull::Deny)
                } else if same_name(WHEN_FULL[1], v) {
                    Ok(WhenFull::AdmitUntracked)
                } else {
                    Err(Refusal::UnknownVariant(WHEN_FULL))
                }
            },
        })
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
                SettingsKey::Algorithm => set_once(&mut algorithm, "algorithm", map.next_value())?,
                SettingsKey::Quota => set_once(&mut quota, "quota", map.next_value())?,
                SettingsKey::Plans => set_once(&mut plans, "plans", map.next_value::<Plans>())?,
                SettingsKey::MaxKeys => {
                    set_once(&mut max_keys, "max_keys", map.next_value::<u64>())?
                }
                SettingsKey::WhenFull => set_once(&mut when_full, "when_full", map.next_value())?,
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
        deserializer.deserialize_identifier(StrVisitor {
            expecting: "a keyed-map setting",
            parse: |v| {
                Ok(match v {
                    "algorithm" => SettingsKey::Algorithm,
                    "quota" => SettingsKey::Quota,
                    "plans" => SettingsKey::Plans,
                    "max_keys" => SettingsKey::MaxKeys,
                    "when_full" => SettingsKey::WhenFull,
                    "live" => SettingsKey::Live,
                    _ => return Err(Refusal::UnknownField(SETTINGS_FIELDS)),
                })
            },
        })
    }
}
