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

mod display;
mod error;
mod grammar;
#[cfg(feature = "serde")]
mod serde_quota;
#[cfg(all(feature = "serde", feature = "std"))]
mod settings;

pub use error::{ParseQuotaError, ParseQuotaErrorKind, QuotaPart};
#[cfg(all(feature = "serde", feature = "std"))]
pub use settings::{KeyedSettings, SettingsError};
