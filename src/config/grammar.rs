//! The quota grammar (see the module docs): units, the cursor, the parser and `FromStr`.

use core::str::FromStr;
use core::time::Duration;

use crate::quota::{Quota, QuotaError};

use super::error::{ParseQuotaError, ParseQuotaErrorKind, QuotaPart};

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
pub(super) struct Cursor<'a> {
    pub(super) s: &'a str,
    pub(super) at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn rest(&self) -> &'a str {
        &self.s[self.at..]
    }

    pub(super) fn skip_spaces(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    pub(super) fn eat(&mut self, token: &str) -> bool {
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
    pub(super) fn eat_word(&mut self, word: &str) -> bool {
        let start = self.at;
        if self.eat(word) && !self.rest().starts_with(|c: char| c.is_alphabetic()) {
            return true;
        }
        self.at = start;
        false
    }

    pub(super) fn error(&self, kind: ParseQuotaErrorKind) -> ParseQuotaError {
        ParseQuotaError {
            kind,
            position: self.at,
        }
    }

    /// Digits with `_` between them; `None` (nothing eaten) when no digit is here.
    pub(super) fn number(&mut self, part: QuotaPart) -> Result<Option<u64>, ParseQuotaError> {
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

    pub(super) fn required_number(&mut self, part: QuotaPart) -> Result<u64, ParseQuotaError> {
        self.number(part)?
            .ok_or_else(|| self.error(ParseQuotaErrorKind::ExpectedNumber(part)))
    }

    /// `[count] unit`: the period, as a duration.
    pub(super) fn period(&mut self) -> Result<Duration, ParseQuotaError> {
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
    let quota = Quota::try_new(limit, period).map_err(|err| match err {
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
