//! Replies read: the scripts' integers as a [`Decision`], a Redis error as an [`Error`] of
//! its class, the server's version from `INFO`.

use std::time::Duration;

use redis::{ErrorKind, RedisError, Value};
use tollgate::Decision;

use crate::error::Error;
use crate::params::Unit;

/// `(major, minor)` from an `INFO server` reply's `redis_version`.
pub(crate) fn server_version(info: &Value) -> Option<(u32, u32)> {
    let text = match info {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))?;
    let mut parts = v.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// The server error codes that say Redis cannot serve now, not that the script is wrong.
const OUTAGE_CODES: [&str; 7] = [
    "LOADING",
    "BUSY",
    "OOM",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
];

/// An outage (the connection's, or a server that cannot serve now), or a script's own error
/// (a server error reply), or a reply that is not the script's.
pub(crate) fn classify(e: RedisError) -> Error {
    if e.code().is_some_and(|c| OUTAGE_CODES.contains(&c)) {
        return Error::Unavailable(e);
    }
    match e.kind() {
        ErrorKind::Server(_) | ErrorKind::Extension => Error::Script(e),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Error::BadReply(e.to_string()),
        _ => Error::Connection(e),
    }
}

/// The script's integers as a decision, times converted from the script's unit to ns, and
/// the units taken after an admission with a lease. An admission is two integers,
/// `remaining reset_after`, and a third, the units taken, when a lease was asked; any other
/// answer is five, `allowed remaining retry_after reset_after exceeds` (retry_after -1 =
/// none). The scripts reply with one string of space-separated integers; an array of
/// integers is read the same.
pub(crate) fn decision(reply: &Value, unit: Unit) -> Result<(Decision, Option<u64>), Error> {
    let bad = || Error::BadReply(format!("{reply:?}"));
    let mut v = [0i64; 6];
    let mut len = 0;
    match reply {
        Value::BulkString(bytes) => {
            let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
            for word in text.split(' ') {
                let slot = v.get_mut(len).ok_or_else(bad)?;
                *slot = word.parse().map_err(|_| bad())?;
                len += 1;
            }
        }
        Value::Array(items) if items.len() <= 6 => {
            for (slot, item) in v.iter_mut().zip(items) {
                let Value::Int(i) = item else {
                    return Err(bad());
                };
                *slot = *i;
            }
            len = items.len();
        }
        _ => return Err(bad()),
    }
    let [allowed, remaining, retry, reset, exceeds, taken] = match len {
        2 | 3 => [1, v[0], -1, v[1], 0, v[2]],
        5 => v,
        _ => return Err(bad()),
    };
    let taken_sent = len == 3;
    if remaining < 0 || reset < 0 || retry < -1 || taken < 0 {
        return Err(bad());
    }
    let ns = |units: i64| Duration::from_nanos((units as u64).saturating_mul(unit.nanos()));
    let d = Decision::from_parts(
        allowed == 1,
        remaining as u64,
        (retry >= 0).then(|| ns(retry)),
        ns(reset),
        exceeds == 1,
    );
    Ok((d, taken_sent.then_some(taken as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_map_onto_decisions_in_nanoseconds() {
        let reply = Value::Array(vec![
            Value::Int(0),
            Value::Int(2),
            Value::Int(1_500),
            Value::Int(3_000),
            Value::Int(0),
        ]);
        let (d, taken) = decision(&reply, Unit::Micros).unwrap();
        assert_eq!(taken, None);
        let text = Value::BulkString(b"0 2 1500 3000 0".to_vec());
        assert_eq!(decision(&text, Unit::Micros).unwrap(), (d, None));
        // An admission in short: remaining and reset_after, then the units taken.
        let (a, taken) = decision(&Value::BulkString(b"7 250".to_vec()), Unit::Micros).unwrap();
        assert_eq!(taken, None);
        assert!(a.is_allowed() && !a.exceeds_capacity());
        assert_eq!((a.remaining(), a.retry_after()), (7, None));
        assert_eq!(a.reset_after(), Duration::from_micros(250));
        let leased = Value::BulkString(b"7 250 4".to_vec());
        assert_eq!(decision(&leased, Unit::Micros).unwrap(), (a, Some(4)));
        assert!(!d.is_allowed() && !d.exceeds_capacity());
        assert_eq!(d.remaining(), 2);
        assert_eq!(d.retry_after(), Some(Duration::from_micros(1_500)));
        assert_eq!(d.reset_after(), Duration::from_millis(3));
    }

    #[test]
    fn malformed_replies_are_typed_errors() {
        for reply in [
            Value::Nil,
            Value::Array(vec![Value::Int(1); 4]),
            Value::Array(vec![Value::Int(-5); 5]),
            Value::Array(vec![Value::Nil; 5]),
            Value::BulkString(b"1".to_vec()),
            Value::BulkString(b"1 2 3 4".to_vec()),
            Value::BulkString(b"1 2 3 4 5 6".to_vec()),
            Value::BulkString(b"-1 2".to_vec()),
            Value::BulkString(b"1 2 -3".to_vec()),
            Value::BulkString(b"1 2 x 4 5".to_vec()),
            Value::BulkString(b"1 -2 3 4 5".to_vec()),
            Value::BulkString(b"1 2 3 4 5 6 7".to_vec()),
        ] {
            assert!(matches!(
                decision(&reply, Unit::Nanos),
                Err(Error::BadReply(_))
            ));
        }
    }

    #[test]
    fn server_versions_are_read_from_info() {
        let info = |v: &str| {
            Value::BulkString(
                format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n").into_bytes(),
            )
        };
        assert_eq!(server_version(&info("7.0.15")), Some((7, 0)));
        assert_eq!(server_version(&info("4.0.9")), Some((4, 0)));
        assert_eq!(server_version(&Value::Nil), None);
    }
}
