//! The IETF rate-limit header fields (draft-ietf-httpapi-ratelimit-headers), rendered from a
//! [`Decision`].
//!
//! - `RateLimit-Policy: "<name>";q=<limit>;w=<period in s>`: fixed per policy, rendered once.
//!   For a token bucket whose burst is above its limit, the policy stated is the one the
//!   bucket enforces from full: `q=<burst>;w=<time to refill the burst>` (`--limit 10/s
//!   --burst 20` is `q=20;w=2`), so `r` is never above `q`. `qu` is added when the quota does
//!   not count requests ([`QuotaUnit`]).
//! - `RateLimit: "<name>";r=<remaining>;t=<seconds>`: per response. On an admission `t` is the
//!   time until the limiter is full again ([`Decision::reset_after`]), rounded up; on a denial
//!   it is the wait before the request would pass, the same number as `Retry-After` (as in
//!   the draft's 429 example), so `Retry-After` never points before the end of `t`.
//! - `Retry-After: <seconds>` on a denial: [`Decision::retry_after`] rounded **up** to whole
//!   seconds, so a client that waits that long is never early. Absent when retrying cannot
//!   help ([`Decision::exceeds_capacity`]).
//!
//! Both fields are Structured-Field lists; the layer appends its item to what the inner service
//! (an upstream, an inner layer) already set, never replacing it ([`RateLimitHeaders::apply`]).
//! The policy name is escaped as an sf-string. `w` is sent only for whole-second windows (the
//! draft has no sub-second window).
//!
//! Denials allocate nothing: `Retry-After` values come from a process-wide table of static
//! strings (0..4096 s) and each policy pre-renders its `RateLimit` values for `r=0` and every
//! `t` up to its period (one shared buffer, so a value's clone is a reference-count increment).
//! Admissions with headers, and waits beyond the tables, render into a stack buffer and
//! copy it into one small `HeaderValue`.

use core::fmt;
use core::time::Duration;
use std::sync::OnceLock;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::HeaderMap;
use tollgate::{Decision, Quota};

/// The `RateLimit` header name.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// The `RateLimit-Policy` header name.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// Retry-After values served from the static table: 0 ..= RETRY_TABLE - 1 seconds.
const RETRY_TABLE: u64 = 4096;
/// The most `t` values a policy pre-renders for its denials.
const DENY_TABLE_MAX: u64 = 4096;

/// What a quota counts: the `qu` parameter of `RateLimit-Policy` (absent for requests, the
/// draft's default).
///
/// ```
/// use tollgate::Quota;
/// use tollgate_tower::{PolicyHeaders, QuotaUnit};
/// let h = PolicyHeaders::try_with_unit("upload", &Quota::per_second(1 << 20)?, QuotaUnit::ContentBytes)?;
/// assert_eq!(h.policy(), "\"upload\";q=1048576;w=1;qu=\"content-bytes\"");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QuotaUnit {
    /// Requests (the default: no `qu` sent).
    #[default]
    Requests,
    /// Bytes of content (`qu="content-bytes"`), e.g. with a cost of the body length.
    ContentBytes,
    /// Requests in flight at once (`qu="concurrent-requests"`).
    ConcurrentRequests,
}

impl QuotaUnit {
    fn param(self) -> &'static [u8] {
        match self {
            QuotaUnit::Requests => b"",
            QuotaUnit::ContentBytes => b";qu=\"content-bytes\"",
            QuotaUnit::ConcurrentRequests => b";qu=\"concurrent-requests\"",
        }
    }
}

/// The quota and window (`q`, `w` in whole seconds if it is one) stated for `quota`: the limit
/// per period, or, for a burst above the limit, the burst per the time its refill takes.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate_tower::stated_policy;
/// assert_eq!(stated_policy(&Quota::per_second(10)?), (10, Some(1)));
/// assert_eq!(stated_policy(&Quota::per_second(10)?.with_burst(20)?), (20, Some(2)));
/// assert_eq!(stated_policy(&Quota::per_second(10)?.with_burst(15)?), (15, None)); // 1.5 s
/// assert_eq!(stated_policy(&Quota::per_second(10)?.with_burst(2)?), (10, Some(1)));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub fn stated_policy(quota: &Quota) -> (u64, Option<u64>) {
    let whole = |ns: u128| {
        ns.is_multiple_of(1_000_000_000)
            .then_some((ns / 1_000_000_000) as u64)
    };
    let period = quota.period().as_nanos();
    if quota.burst() <= quota.limit() {
        return (quota.limit(), whole(period));
    }
    // The time a drained bucket takes to refill `burst`: burst × period / limit.
    let refill = period * u128::from(quota.burst());
    let w = refill
        .is_multiple_of(u128::from(quota.limit()))
        .then(|| refill / u128::from(quota.limit()))
        .and_then(whole);
    (quota.burst(), w)
}

/// A policy name that cannot be written as a Structured-Field string.
///
/// ```
/// use tollgate::Quota;
/// use tollgate_tower::PolicyHeaders;
/// let err = PolicyHeaders::try_new("tab\there", &Quota::per_second(5)?).unwrap_err();
/// assert_eq!(err.to_string(), "policy name byte 0x09 at 3 is not printable ASCII");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyNameError {
    /// The offending byte.
    pub byte: u8,
    /// Its position in the name.
    pub at: usize,
}

impl fmt::Display for PolicyNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy name byte {:#04x} at {} is not printable ASCII",
            self.byte, self.at
        )
    }
}

impl std::error::Error for PolicyNameError {}

/// One policy's header values: `RateLimit-Policy` rendered once, `RateLimit` for denials
/// pre-rendered, and [`PolicyHeaders::render`] for any [`Decision`]. This is the helper for
/// servers other than tower (pingora, actix): take the values' bytes into your response.
///
/// ```
/// use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
/// use tollgate_tower::PolicyHeaders;
///
/// let quota = Quota::per_minute(2)?;
/// let headers = PolicyHeaders::try_new("default", &quota)?;
/// assert_eq!(headers.policy(), "\"default\";q=2;w=60");
///
/// let users = KeyedLimiter::<&str, _>::try_with_clock(Algorithm::FixedWindow, quota, ManualClock::new())?;
/// let ok = headers.render(&users.try_acquire(&"ann"));
/// assert_eq!(ok.ratelimit, "\"default\";r=1;t=60");
/// assert!(ok.retry_after.is_none());
/// let _ = users.try_acquire(&"ann");
/// let no = headers.render(&users.try_acquire(&"ann"));
/// assert_eq!(no.ratelimit, "\"default\";r=0;t=60");
/// assert_eq!(no.retry_after.unwrap(), "60");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct PolicyHeaders {
    name: Box<str>,
    quota: Quota,
    unit: QuotaUnit,
    /// The `q` stated: `r` is never sent above it.
    q: u64,
    policy: HeaderValue,
    /// `"<name>";r=` (the name escaped), the prefix of every `RateLimit` value.
    prefix: Box<[u8]>,
    /// `RateLimit` for `r=0`, indexed by `t`.
    denied: Box<[HeaderValue]>,
}

/// The header values for one response (see [`PolicyHeaders::render`]).
///
/// ```
/// use http::HeaderMap;
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
/// use tollgate_tower::PolicyHeaders;
/// let headers = PolicyHeaders::try_new("api", &Quota::per_second(1)?)?;
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
/// let mut map = HeaderMap::new();
/// headers.render(&bucket.try_acquire()).apply(&mut map);
/// assert_eq!(map["ratelimit"], "\"api\";r=0;t=1");
/// assert_eq!(map["ratelimit-policy"], "\"api\";q=1;w=1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct RateLimitHeaders {
    /// `RateLimit-Policy`.
    pub policy: HeaderValue,
    /// `RateLimit`.
    pub ratelimit: HeaderValue,
    /// `Retry-After`, on a denial that a retry can pass.
    pub retry_after: Option<HeaderValue>,
    /// The legacy `X-RateLimit-*` fields, when asked for ([`RateLimitHeaders::with_legacy`]).
    pub legacy: Option<Box<LegacyHeaders>>,
}

/// The legacy fields many clients (and tower_governor's `use_headers`) know, beside the IETF
/// ones: `X-RateLimit-Limit` (the stated quota), `X-RateLimit-Remaining`, `X-RateLimit-Reset`
/// (seconds), and on a denial `X-RateLimit-After` (seconds to wait).
///
/// ```
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
/// let q = Quota::per_second(4)?;
/// let h = tollgate_tower::PolicyHeaders::try_new("default", &q)?;
/// let b = TokenBucket::with_clock(q, ManualClock::new());
/// let mut map = http::HeaderMap::new();
/// h.render(&b.try_acquire()).with_legacy(&h).apply(&mut map);
/// assert_eq!(map["x-ratelimit-limit"], "4");
/// assert_eq!(map["x-ratelimit-remaining"], "3");
/// assert_eq!(map["x-ratelimit-reset"], "1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct LegacyHeaders {
    /// `X-RateLimit-Limit`.
    pub limit: HeaderValue,
    /// `X-RateLimit-Remaining`.
    pub remaining: HeaderValue,
    /// `X-RateLimit-Reset`.
    pub reset: HeaderValue,
    /// `X-RateLimit-After`, on a denial a retry can pass.
    pub after: Option<HeaderValue>,
}

static X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
static X_AFTER: HeaderName = HeaderName::from_static("x-ratelimit-after");

impl RateLimitHeaders {
    /// Adds the values to `headers`: `RateLimit-Policy` and `RateLimit` are lists, so our item
    /// is appended to any the response already has (from an upstream or an inner layer);
    /// `Retry-After` is set only if the response has none.
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// # let headers = tollgate_tower::PolicyHeaders::try_new("a", &Quota::per_second(1)?)?;
    /// # let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// let mut map = http::HeaderMap::new();
    /// headers.render(&bucket.try_acquire()).apply(&mut map);
    /// assert_eq!(map.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply(self, headers: &mut HeaderMap) {
        headers.append(RATELIMIT_POLICY, self.policy);
        headers.append(RATELIMIT, self.ratelimit);
        let set = |headers: &mut HeaderMap, name: &HeaderName, v: HeaderValue| {
            if let http::header::Entry::Vacant(e) = headers.entry(name) {
                e.insert(v);
            }
        };
        if let Some(r) = self.retry_after {
            set(headers, &RETRY_AFTER, r);
        }
        if let Some(l) = self.legacy {
            let l = *l;
            set(headers, &X_LIMIT, l.limit);
            set(headers, &X_REMAINING, l.remaining);
            set(headers, &X_RESET, l.reset);
            if let Some(a) = l.after {
                set(headers, &X_AFTER, a);
            }
        }
    }

    /// Adds the partition key `pk=:<base64 of key>:` to both items.
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// # let q = Quota::per_second(2)?;
    /// # let h = tollgate_tower::PolicyHeaders::try_new("default", &q)?;
    /// # let b = TokenBucket::with_clock(q, ManualClock::new());
    /// let v = h.render(&b.try_acquire()).with_partition_key(b"acme");
    /// assert_eq!(v.ratelimit, "\"default\";r=1;t=1;pk=:YWNtZQ==:");
    /// assert_eq!(v.policy, "\"default\";q=2;w=1;pk=:YWNtZQ==:");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_partition_key(mut self, key: &[u8]) -> Self {
        let mut param = Vec::with_capacity(6 + key.len().div_ceil(3) * 4);
        param.extend_from_slice(b";pk=:");
        base64(key, &mut param);
        param.push(b':');
        let with = |v: &HeaderValue| {
            let mut b = Vec::with_capacity(v.len() + param.len());
            b.extend_from_slice(v.as_bytes());
            b.extend_from_slice(&param);
            HeaderValue::from_bytes(&b).unwrap_or_else(|_| unreachable_value())
        };
        self.ratelimit = with(&self.ratelimit);
        self.policy = with(&self.policy);
        self
    }

    /// Adds the legacy `X-RateLimit-*` values of `policy` ([`LegacyHeaders`]), read from
    /// these values: `r` and `t` of `RateLimit`, the wait of `Retry-After`.
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// # let q = Quota::per_second(1)?;
    /// # let h = tollgate_tower::PolicyHeaders::try_new("default", &q)?;
    /// # let b = TokenBucket::with_clock(q, ManualClock::new());
    /// let _ = b.try_acquire();
    /// let no = h.render(&b.try_acquire()).with_legacy(&h);
    /// assert_eq!(no.legacy.unwrap().after.unwrap(), "1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_legacy(mut self, policy: &PolicyHeaders) -> Self {
        let text = self.ratelimit.as_bytes();
        let param = |name: &[u8]| -> HeaderValue {
            let at = text
                .windows(name.len())
                .rposition(|w| w == name)
                .map_or(text.len(), |i| i + name.len());
            let end = text[at..]
                .iter()
                .position(|b| !b.is_ascii_digit())
                .map_or(text.len(), |n| at + n);
            HeaderValue::from_bytes(&text[at..end]).unwrap_or_else(|_| unreachable_value())
        };
        self.legacy = Some(Box::new(LegacyHeaders {
            limit: HeaderValue::from(policy.q),
            remaining: param(b";r="),
            reset: param(b";t="),
            after: self.retry_after.clone(),
        }));
        self
    }
}

/// `d` in whole seconds, rounded up.
///
/// ```
/// # use std::time::Duration;
/// assert_eq!(tollgate_tower::ceil_secs(Duration::from_millis(1001)), 2);
/// assert_eq!(tollgate_tower::ceil_secs(Duration::from_secs(3)), 3);
/// assert_eq!(tollgate_tower::ceil_secs(Duration::ZERO), 0);
/// ```
#[inline]
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl PolicyHeaders {
    /// The headers of the policy `name` over `quota`.
    ///
    /// # Errors
    /// [`PolicyNameError`] when `name` has a byte outside printable ASCII (`"` and `\` are
    /// escaped, not refused).
    ///
    /// ```
    /// use tollgate::Quota;
    /// let h = tollgate_tower::PolicyHeaders::try_new("say \"hi\"", &Quota::per_hour(7)?)?;
    /// assert_eq!(h.policy(), r#""say \"hi\"";q=7;w=3600"#);
    /// let sub = tollgate_tower::PolicyHeaders::try_new("fast", &Quota::try_new(5, std::time::Duration::from_millis(500))?)?;
    /// assert_eq!(sub.policy(), "\"fast\";q=5"); // no whole-second window to state
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_new(name: &str, quota: &Quota) -> Result<PolicyHeaders, PolicyNameError> {
        Self::try_with_unit(name, quota, QuotaUnit::Requests)
    }

    /// As [`PolicyHeaders::try_new`], for a quota counted in `unit`.
    ///
    /// # Errors
    /// As [`PolicyHeaders::try_new`].
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_tower::{PolicyHeaders, QuotaUnit};
    /// let h = PolicyHeaders::try_with_unit("db", &Quota::per_second(4)?, QuotaUnit::ConcurrentRequests)?;
    /// assert_eq!(h.policy(), "\"db\";q=4;w=1;qu=\"concurrent-requests\"");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_with_unit(
        name: &str,
        quota: &Quota,
        unit: QuotaUnit,
    ) -> Result<PolicyHeaders, PolicyNameError> {
        let mut prefix = Vec::with_capacity(name.len() + 8);
        prefix.push(b'"');
        for (at, &byte) in name.as_bytes().iter().enumerate() {
            if !(0x20..=0x7e).contains(&byte) {
                return Err(PolicyNameError { byte, at });
            }
            if byte == b'"' || byte == b'\\' {
                prefix.push(b'\\');
            }
            prefix.push(byte);
        }
        prefix.push(b'"');
        let mut policy = prefix.clone();
        let (q, w) = stated_policy(quota);
        policy.extend_from_slice(b";q=");
        policy.extend_from_slice(itoa::Buffer::new().format(q).as_bytes());
        if let Some(w) = w {
            policy.extend_from_slice(b";w=");
            policy.extend_from_slice(itoa::Buffer::new().format(w).as_bytes());
        }
        policy.extend_from_slice(unit.param());
        let period = quota.period();
        prefix.extend_from_slice(b";r=");

        // All denial values in one buffer; each value is a slice of it.
        let entries = (ceil_secs(period) + 2).min(DENY_TABLE_MAX);
        let mut buf = Vec::new();
        let mut ends = Vec::with_capacity(entries as usize);
        for t in 0..entries {
            buf.extend_from_slice(&prefix);
            buf.extend_from_slice(b"0;t=");
            buf.extend_from_slice(itoa::Buffer::new().format(t).as_bytes());
            ends.push(buf.len());
        }
        let buf = Bytes::from(buf);
        let mut start = 0;
        let denied = ends
            .into_iter()
            .map(|end| {
                let v = shared_value(buf.slice(start..end));
                start = end;
                v
            })
            .collect();
        Ok(PolicyHeaders {
            name: name.into(),
            quota: *quota,
            unit,
            q,
            policy: shared_value(Bytes::from(policy)),
            prefix: prefix.into_boxed_slice(),
            denied,
        })
    }

    /// The policy's name, unescaped.
    ///
    /// ```
    /// # use tollgate::Quota;
    /// let h = tollgate_tower::PolicyHeaders::try_new("x", &Quota::per_second(3)?)?;
    /// assert_eq!((h.name(), h.quota()), ("x", Quota::per_second(3)?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The quota the values were rendered for.
    ///
    /// ```
    /// # use tollgate::Quota;
    /// let h = tollgate_tower::PolicyHeaders::try_new("x", &Quota::per_second(3)?)?;
    /// assert_eq!(h.quota().limit(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// What the quota counts.
    ///
    /// ```
    /// # use tollgate::Quota;
    /// let h = tollgate_tower::PolicyHeaders::try_new("x", &Quota::per_second(3)?)?;
    /// assert_eq!(h.unit(), tollgate_tower::QuotaUnit::Requests);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn unit(&self) -> QuotaUnit {
        self.unit
    }

    /// The `RateLimit-Policy` value.
    ///
    /// ```
    /// # use tollgate::Quota;
    /// let h = tollgate_tower::PolicyHeaders::try_new("x", &Quota::per_second(3)?)?;
    /// assert_eq!(h.policy(), "\"x\";q=3;w=1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(&self) -> &HeaderValue {
        &self.policy
    }

    /// The three header values for `decision` (see the module docs for what each says); `r`
    /// is never above the stated `q`.
    /// Allocation-free for a denial with nothing remaining and a wait within the tables.
    ///
    /// ```
    /// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// let q = Quota::per_second(4)?;
    /// let h = tollgate_tower::PolicyHeaders::try_new("default", &q)?;
    /// let b = TokenBucket::with_clock(q, ManualClock::new());
    /// assert_eq!(h.render(&b.try_acquire_n(3)).ratelimit, "\"default\";r=1;t=1"); // 750 ms up
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn render(&self, decision: &Decision) -> RateLimitHeaders {
        let (t, retry_after) = match decision.retry_after() {
            Some(wait) if !decision.is_allowed() => {
                let secs = ceil_secs(wait);
                (secs, Some(retry_after_value(secs)))
            }
            _ => (ceil_secs(decision.reset_after()), None),
        };
        RateLimitHeaders {
            policy: self.policy.clone(),
            ratelimit: self.ratelimit(decision.remaining().min(self.q), t),
            retry_after,
            legacy: None,
        }
    }

    fn ratelimit(&self, r: u64, t: u64) -> HeaderValue {
        if r == 0
            && let Some(v) = usize::try_from(t).ok().and_then(|t| self.denied.get(t))
        {
            return v.clone();
        }
        let mut r_buf = itoa::Buffer::new();
        let mut t_buf = itoa::Buffer::new();
        let (r, t) = (r_buf.format(r).as_bytes(), t_buf.format(t).as_bytes());
        let len = self.prefix.len() + r.len() + 3 + t.len();
        let mut stack = [0u8; 256];
        let mut heap;
        let out: &mut [u8] = if len <= stack.len() {
            &mut stack[..len]
        } else {
            heap = vec![0u8; len];
            &mut heap
        };
        let (p, rest) = out.split_at_mut(self.prefix.len());
        p.copy_from_slice(&self.prefix);
        let (rr, rest) = rest.split_at_mut(r.len());
        rr.copy_from_slice(r);
        let (sep, tt) = rest.split_at_mut(3);
        sep.copy_from_slice(b";t=");
        tt.copy_from_slice(t);
        HeaderValue::from_bytes(out).unwrap_or_else(|_| unreachable_value())
    }
}

/// Standard base64 with padding (RFC 4648 §4), as an sf-binary's content.
fn base64(bytes: &[u8], out: &mut Vec<u8>) {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in bytes.chunks(3) {
        let n = chunk.len();
        let w = u32::from(chunk[0]) << 16
            | u32::from(*chunk.get(1).unwrap_or(&0)) << 8
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= n {
                out.push(ABC[(w >> (18 - 6 * i) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

/// A value made of bytes already checked to be printable ASCII.
fn shared_value(b: Bytes) -> HeaderValue {
    HeaderValue::from_maybe_shared(b).unwrap_or_else(|_| unreachable_value())
}

/// Never reached: every rendered value is printable ASCII (checked names, digits, `";=`).
#[cold]
fn unreachable_value() -> HeaderValue {
    HeaderValue::from_static("\"invalid\"")
}

/// `Retry-After: secs`, from the static table when `secs < 4096`.
fn retry_after_value(secs: u64) -> HeaderValue {
    static TABLE: OnceLock<Box<[HeaderValue]>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        // One string for the whole process, never freed: its slices back `from_static` values,
        // whose clones copy a pointer (no allocation, no reference count).
        let mut text = String::new();
        let mut ends = Vec::with_capacity(RETRY_TABLE as usize);
        for s in 0..RETRY_TABLE {
            text.push_str(itoa::Buffer::new().format(s));
            ends.push(text.len());
        }
        let text: &'static str = Box::leak(text.into_boxed_str());
        let mut start = 0;
        ends.into_iter()
            .map(|end| {
                let v = HeaderValue::from_static(&text[start..end]);
                start = end;
                v
            })
            .collect()
    });
    match usize::try_from(secs).ok().and_then(|s| table.get(s)) {
        Some(v) => v.clone(),
        None => HeaderValue::from(secs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_never_early() {
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_nanos(999_999_999)), 1);
        assert_eq!(ceil_secs(Duration::new(4, 1)), 5);
        assert_eq!(retry_after_value(0), "0");
        assert_eq!(retry_after_value(4095), "4095");
        assert_eq!(retry_after_value(4096), "4096");
        assert_eq!(retry_after_value(u64::MAX), "18446744073709551615");
    }

    #[test]
    fn table_and_rendered_values_agree() {
        let h = PolicyHeaders::try_new("p\\q", &Quota::per_second(3).unwrap()).unwrap();
        assert_eq!(h.denied.len(), 3);
        for t in 0..6 {
            assert_eq!(h.ratelimit(0, t), format!("\"p\\\\q\";r=0;t={t}"));
        }
        assert_eq!(
            h.ratelimit(u64::MAX, u64::MAX),
            format!("\"p\\\\q\";r={0};t={0}", u64::MAX)
        );
        let long = "n".repeat(300);
        let h = PolicyHeaders::try_new(&long, &Quota::per_second(3).unwrap()).unwrap();
        assert_eq!(h.ratelimit(7, 9), format!("\"{long}\";r=7;t=9"));
    }

    #[test]
    fn refuses_unprintable_names() {
        let q = Quota::per_second(1).unwrap();
        assert_eq!(
            PolicyHeaders::try_new("ok\u{e9}", &q).unwrap_err(),
            PolicyNameError { byte: 0xc3, at: 2 }
        );
        assert!(PolicyHeaders::try_new("", &q).is_ok());
    }
}
