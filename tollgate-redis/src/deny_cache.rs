//! The bounded local deny cache: a key Redis denied until `t` is denied here until `t`.
//!
//! Sound for every algorithm: a denial's `retry_after` is the earliest the same cost could
//! pass if nothing else were admitted meanwhile, and other admissions only push it later, so
//! answering "denied" before it never turns away a request Redis would have admitted, and
//! never admits one. The deadline is counted from when the request was sent (no later than
//! when Redis read the time), so the local copy ends no later than Redis's own.
//!
//! Bounded: at most `max_keys` entries; when full, expired entries are swept (at most once
//! per millisecond) and a new denial that still finds no room is simply not cached.

use std::sync::Mutex;
use std::time::Duration;

use tollgate::{Decision, Quota};

/// One cached denial.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Local ns until which costs of `min_cost` or more are denied.
    until: u64,
    min_cost: u64,
    /// What Redis said was left, and when it said the limiter would be full (local ns).
    remaining: u64,
    reset_at: u64,
    /// The quota the denial was made under: another plan's call is not answered from it.
    quota: Quota,
}

pub(crate) struct DenyCache {
    map: papaya::HashMap<Box<[u8]>, Entry>,
    max_keys: usize,
    /// Local ns of the last sweep of expired entries (a mutex: touched only when full).
    last_sweep: Mutex<u64>,
}

impl DenyCache {
    pub(crate) fn new(max_keys: usize) -> Self {
        DenyCache {
            map: papaya::HashMap::with_capacity(max_keys.min(1 << 16)),
            max_keys,
            last_sweep: Mutex::new(0),
        }
    }

    /// The cached denial for `cost` on `key` at local time `now`, if there is one.
    pub(crate) fn check(&self, key: &[u8], cost: u64, quota: &Quota, now: u64) -> Option<Decision> {
        let map = self.map.pin();
        let e = map.get(key)?;
        if now >= e.until || cost < e.min_cost || e.quota != *quota {
            return None;
        }
        Some(Decision::from_parts(
            false,
            e.remaining,
            Some(Duration::from_nanos(e.until - now)),
            Duration::from_nanos(e.reset_at.saturating_sub(now)),
            false,
        ))
    }

    /// Remembers that Redis denied `cost` on `key`, asked at local time `sent`.
    pub(crate) fn remember(&self, key: &[u8], cost: u64, quota: &Quota, sent: u64, d: &Decision) {
        let Some(retry) = d.retry_after() else {
            return;
        };
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let entry = Entry {
            until: sent.saturating_add(nanos(retry)),
            min_cost: cost.max(1),
            remaining: d.remaining(),
            reset_at: sent.saturating_add(nanos(d.reset_after())),
            quota: *quota,
        };
        let map = self.map.pin();
        if map.len() >= self.max_keys && map.get(key).is_none() {
            let mut last = match self.last_sweep.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            if sent.saturating_sub(*last) < 1_000_000 {
                return;
            }
            *last = sent;
            map.retain(|_, e| e.until > sent);
            if map.len() >= self.max_keys {
                return;
            }
        }
        map.insert(key.into(), entry);
    }

    /// Forgets `key` (after a reset).
    pub(crate) fn forget(&self, key: &[u8]) {
        self.map.pin().remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry_ms: u64) -> Decision {
        Decision::from_parts(
            false,
            0,
            Some(Duration::from_millis(retry_ms)),
            Duration::from_secs(1),
            false,
        )
    }

    #[test]
    fn denies_until_the_deadline_and_not_a_nanosecond_after() {
        let q = Quota::per_second(5).unwrap();
        let c = DenyCache::new(8);
        c.remember(b"k", 1, &q, 1_000, &denied(2));
        let d = c.check(b"k", 1, &q, 1_000).unwrap();
        assert_eq!(d.retry_after(), Some(Duration::from_millis(2)));
        assert!(c.check(b"k", 1, &q, 2_000_999).is_some());
        assert!(c.check(b"k", 1, &q, 2_001_000).is_none());
        // A smaller cost than the one denied, or another plan, is asked of Redis again.
        c.remember(b"j", 3, &q, 0, &denied(2));
        assert!(c.check(b"j", 2, &q, 0).is_none());
        assert!(c.check(b"j", 3, &q, 0).is_some());
        assert!(c
            .check(b"j", 3, &Quota::per_second(6).unwrap(), 0)
            .is_none());
    }

    #[test]
    fn stays_within_its_bound() {
        let q = Quota::per_second(5).unwrap();
        let c = DenyCache::new(4);
        for i in 0..100u32 {
            c.remember(
                &i.to_be_bytes(),
                1,
                &q,
                u64::from(i) * 2_000_000,
                &denied(1),
            );
            assert!(c.len() <= 4);
        }
        // Expired entries were swept to make room for the latest.
        assert!(c.check(&99u32.to_be_bytes(), 1, &q, 198_000_000).is_some());
    }
}
