//! Leases: the token bucket's script takes up to `size` tokens in one call when a request
//! passes, and this process spends them itself, without a round trip, until they run out or
//! the lease ends.
//!
//! Never more than the script granted: every token spent locally was taken from the shared
//! bucket first, by one admission of the script. What a lease changes is *when* a token is
//! spent: up to `lifetime` after Redis counted it. So the admissions of any span `[t0, t1]`
//! are at most what the bucket admits in `[t0 - lifetime, t1]`; tokens left when a lease ends
//! lapse (the bucket is not refunded: fewer admissions, never more). The price is fairness:
//! tokens one instance holds are not available to the others until spent or lapsed.
//!
//! The leases sit behind one mutex (a map lookup and a subtraction under it). Bookkeeping is
//! O(1) per call, amortized: ended leases are swept only when the map has doubled since the
//! last sweep.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tollgate::Decision;

#[derive(Clone, Copy, Debug)]
struct Lease {
    left: u64,
    /// Local ns when the lease ends.
    ends: u64,
    /// Local ns when Redis said the bucket would be full again.
    reset_at: u64,
}

pub(crate) struct Leases {
    pub(crate) size: u64,
    lifetime: u64,
    map: Mutex<Map>,
}

struct Map {
    leases: HashMap<Box<[u8]>, Lease>,
    /// The map's size after the last sweep: the next one waits until it has doubled.
    swept: usize,
}

impl Leases {
    pub(crate) fn new(size: u64, lifetime: Duration) -> Self {
        Leases {
            size,
            lifetime: u64::try_from(lifetime.as_nanos()).unwrap_or(u64::MAX),
            map: Mutex::new(Map {
                leases: HashMap::new(),
                swept: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Map> {
        match self.map.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Spends `n` leased tokens of `key` at local time `now`, if a live lease holds them.
    pub(crate) fn take(&self, key: &[u8], n: u64, now: u64) -> Option<Decision> {
        let mut map = self.lock();
        let lease = map.leases.get_mut(key)?;
        if now >= lease.ends {
            map.leases.remove(key);
            return None;
        }
        if lease.left < n {
            return None;
        }
        lease.left -= n;
        Some(Decision::from_parts(
            true,
            lease.left,
            None,
            Duration::from_nanos(lease.reset_at.saturating_sub(now)),
            false,
        ))
    }

    /// Keeps `extra` tokens the script granted beyond the request, asked at local time `sent`.
    pub(crate) fn keep(&self, key: &[u8], extra: u64, sent: u64, d: &Decision) {
        if extra == 0 {
            return;
        }
        let reset = u64::try_from(d.reset_after().as_nanos()).unwrap_or(u64::MAX);
        let mut map = self.lock();
        // Bounded like the tokens themselves: a key holds a lease only while it has tokens.
        // Swept when doubled since the last sweep: O(1) per call, amortized.
        if map.leases.len() >= (2 * map.swept).max(64) {
            map.leases.retain(|_, l| l.ends > sent && l.left > 0);
            map.swept = map.leases.len();
        }
        let lease = map.leases.entry(key.into()).or_insert(Lease {
            left: 0,
            ends: 0,
            reset_at: 0,
        });
        // Tokens of an earlier, still live lease stay until that lease's end; the sooner end
        // is kept for all (never spending a token later than its own lease allows).
        let ends = sent.saturating_add(self.lifetime);
        lease.ends = if lease.left > 0 {
            lease.ends.min(ends)
        } else {
            ends
        };
        lease.left += extra;
        lease.reset_at = sent.saturating_add(reset);
    }
}

impl Leases {
    /// Drops the lease of `key` (its tokens lapse): after a reset, nothing counted before it
    /// is spent.
    pub(crate) fn forget(&self, key: &[u8]) {
        self.lock().leases.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted() -> Decision {
        Decision::from_parts(true, 0, None, Duration::from_secs(1), false)
    }

    #[test]
    fn spends_what_was_granted_and_no_more_and_lapses_at_the_end() {
        let l = Leases::new(10, Duration::from_nanos(1_000));
        l.keep(b"k", 3, 0, &granted());
        for left in (0..3).rev() {
            assert_eq!(l.take(b"k", 1, 10).unwrap().remaining(), left);
        }
        assert!(l.take(b"k", 1, 10).is_none());
        l.keep(b"k", 5, 100, &granted());
        assert!(l.take(b"k", 6, 200).is_none(), "more than the lease holds");
        assert!(l.take(b"k", 5, 200).is_some());
        l.keep(b"k", 5, 2_000, &granted());
        assert!(l.take(b"k", 1, 3_000).is_none(), "lapsed at its end");
    }
}
