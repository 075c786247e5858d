//! What is wrong with a quota string, and where.

use core::fmt;

use crate::quota::QuotaError;

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
    pub(super) kind: ParseQuotaErrorKind,
    pub(super) position: usize,
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
