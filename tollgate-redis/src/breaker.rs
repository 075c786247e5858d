//! The circuit breakers: after a run of failed calls, Redis is not asked for a pause, then one
//! call probes it. One breaker for a single server; on a cluster, one per primary, found by
//! the key's hash slot in a map of the slots read from `CLUSTER SLOTS` (a dead primary opens
//! its own breaker, never the other primaries').

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use redis::Value;

/// Stop asking Redis after `threshold` failures in a row, for `pause`; then one probe.
pub(crate) struct Breaker {
    threshold: u32,
    pause: u64,
    /// Set while failures are being counted or the circuit is open; lets the success path
    /// skip the lock. A stale `false` only delays a reset of the count to the next success.
    troubled: AtomicBool,
    state: Mutex<BreakerState>,
}

#[derive(Default)]
struct BreakerState {
    failures: u32,
    /// While open: when the next probe may go (each probe moves it one pause on, so a probe
    /// whose caller gave up never keeps the circuit shut).
    open_until: Option<u64>,
}

impl Breaker {
    pub(crate) fn new(threshold: u32, pause: u64) -> Breaker {
        Breaker {
            threshold,
            pause,
            troubled: AtomicBool::new(false),
            state: Mutex::new(BreakerState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BreakerState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Whether Redis may be asked now.
    pub(crate) fn allows(&self, now: u64) -> bool {
        // Relaxed: a hint; the decision is made under the lock.
        if self.threshold == 0 || !self.troubled.load(Ordering::Relaxed) {
            return true;
        }
        let mut s = self.lock();
        match s.open_until {
            None => true,
            Some(t) if now >= t => {
                s.open_until = Some(now.saturating_add(self.pause));
                true
            }
            Some(_) => false,
        }
    }

    pub(crate) fn success(&self) {
        // Relaxed: see `troubled`.
        if self.threshold == 0 || !self.troubled.load(Ordering::Relaxed) {
            return;
        }
        let mut s = self.lock();
        *s = BreakerState::default();
        // Relaxed: written under the lock; readers only take it as a hint.
        self.troubled.store(false, Ordering::Relaxed);
    }

    pub(crate) fn failure(&self, now: u64) {
        if self.threshold == 0 {
            return;
        }
        let mut s = self.lock();
        // Relaxed: written under the lock; readers only take it as a hint.
        self.troubled.store(true, Ordering::Relaxed);
        s.failures = s.failures.saturating_add(1);
        if s.failures >= self.threshold {
            s.open_until = Some(now.saturating_add(self.pause));
        }
    }
}

/// Hash slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16_384;

/// The slot of a key whose hash tag holds `tag` (the bytes between the braces): CRC16-XMODEM
/// of the tag, modulo 16384, as Redis Cluster computes it.
pub(crate) fn slot_of(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS as u16
}

/// Which primary serves each slot, and each primary's breaker.
struct NodeMap {
    /// Per slot, the index of its primary in `nodes`; `u16::MAX` for a slot no primary serves.
    slot_node: Vec<u16>,
    /// `host:port` of each primary and its breaker.
    nodes: Vec<(String, Arc<Breaker>)>,
}

/// The breakers of one limiter: one for a single server, one per primary on a cluster.
pub(crate) struct Breakers {
    threshold: u32,
    pause: u64,
    /// The single server's; on a cluster, the breaker of the slots the map does not know yet.
    shared: Arc<Breaker>,
    /// The cluster's map, `None` on a single server.
    map: Option<RwLock<Arc<NodeMap>>>,
    /// When the map was last asked for (local clock, ns); `u64::MAX` before the first time.
    asked_at: AtomicU64,
}

impl Breakers {
    /// One breaker (a single server), or one per primary once [`Breakers::read_map`] has read
    /// the cluster's slots.
    pub(crate) fn new(threshold: u32, pause: u64, cluster: bool) -> Breakers {
        Breakers {
            threshold,
            pause,
            shared: Arc::new(Breaker::new(threshold, pause)),
            map: cluster.then(|| {
                RwLock::new(Arc::new(NodeMap {
                    slot_node: vec![u16::MAX; SLOTS],
                    nodes: Vec::new(),
                }))
            }),
            asked_at: AtomicU64::new(u64::MAX),
        }
    }

    /// The breaker of the node that serves the key whose hash tag holds `tag`.
    pub(crate) fn of(&self, tag: &[u8]) -> Arc<Breaker> {
        let Some(map) = &self.map else {
            return self.shared.clone();
        };
        let map = match map.read() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        let node = map.slot_node[usize::from(slot_of(tag))];
        match map.nodes.get(usize::from(node)) {
            Some((_, b)) => b.clone(),
            None => self.shared.clone(),
        }
    }

    /// Whether the cluster's slot map should be read again now: on a cluster, when it was
    /// last asked for `every` ns ago or more (or never). Claims the read: one caller at a time.
    pub(crate) fn map_due(&self, now: u64, every: u64) -> bool {
        if self.map.is_none() {
            return false;
        }
        // Relaxed: a claim on an independent timestamp; the map itself is under its lock.
        let at = self.asked_at.load(Ordering::Relaxed);
        if at != u64::MAX && now.saturating_sub(at) < every {
            return false;
        }
        // Relaxed: only the claim's uniqueness matters, which the compare-exchange gives.
        self.asked_at
            .compare_exchange(at, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Replaces the slot map by a `CLUSTER SLOTS` reply, keeping the breaker (and its state)
    /// of every primary still in it. A reply that cannot be read changes nothing.
    pub(crate) fn read_map(&self, reply: &Value) {
        let Some(map) = &self.map else {
            return;
        };
        let Some(ranges) = slot_ranges(reply) else {
            return;
        };
        let mut guard = match map.write() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        let old: HashMap<&str, &Arc<Breaker>> =
            guard.nodes.iter().map(|(a, b)| (a.as_str(), b)).collect();
        let mut nodes: Vec<(String, Arc<Breaker>)> = Vec::new();
        let mut slot_node = vec![u16::MAX; SLOTS];
        for (start, end, addr) in ranges {
            let index = match nodes.iter().position(|(a, _)| *a == addr) {
                Some(i) => i,
                None => {
                    let breaker = old.get(addr.as_str()).map_or_else(
                        || Arc::new(Breaker::new(self.threshold, self.pause)),
                        |b| Arc::clone(b),
                    );
                    nodes.push((addr, breaker));
                    nodes.len() - 1
                }
            };
            for slot in &mut slot_node[start..=end] {
                *slot = index as u16;
            }
        }
        drop(old);
        *guard = Arc::new(NodeMap { slot_node, nodes });
    }
}

/// `(first, last, "host:port" of the primary)` of each range of a `CLUSTER SLOTS` reply.
fn slot_ranges(reply: &Value) -> Option<Vec<(usize, usize, String)>> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        let start = usize::try_from(*start).ok()?;
        let end = usize::try_from(*end).ok()?;
        if start > end || end >= SLOTS {
            return None;
        }
        let host = primary.first().and_then(text)?;
        let Some(Value::Int(port)) = primary.get(1) else {
            return None;
        };
        out.push((start, end, format!("{host}:{port}")));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_opens_after_the_threshold_and_probes_once() {
        let b = Breaker::new(2, 100);
        assert!(b.allows(0));
        b.failure(0);
        assert!(b.allows(1));
        b.failure(1);
        assert!(!b.allows(50));
        assert!(b.allows(101)); // the probe
        assert!(!b.allows(102)); // only one
        b.failure(102); // the probe failed: open again
        assert!(!b.allows(150));
        assert!(b.allows(202));
        b.success();
        assert!(b.allows(203) && b.allows(204));
    }

    #[test]
    fn slots_are_redis_clusters() {
        // Known slots (redis-cli CLUSTER KEYSLOT): "foo" 12182, "bar" 5061, "" 0.
        assert_eq!(slot_of(b"foo"), 12_182);
        assert_eq!(slot_of(b"bar"), 5_061);
        assert_eq!(slot_of(b""), 0);
        // The CRC16-XMODEM check value, 0x31C3, is below 16384.
        assert_eq!(slot_of(b"123456789"), 0x31C3);
    }

    fn node(port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(b"127.0.0.1".to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    fn range(start: i64, end: i64, port: i64) -> Value {
        Value::Array(vec![Value::Int(start), Value::Int(end), node(port)])
    }

    #[test]
    fn each_primary_has_its_own_breaker_and_keeps_it_across_maps() {
        let b = Breakers::new(1, 100, true);
        // Before any map: one shared breaker.
        assert!(Arc::ptr_eq(&b.of(b"foo"), &b.of(b"bar")));
        b.read_map(&Value::Array(vec![
            range(0, 8_191, 7000),
            range(8_192, 16_383, 7001),
        ]));
        let (bar, foo) = (b.of(b"bar"), b.of(b"foo")); // slots 5061 and 12182
        assert!(!Arc::ptr_eq(&bar, &foo));
        foo.failure(0);
        assert!(
            !foo.allows(1) && bar.allows(1),
            "one node open, the other closed"
        );
        // A reshard: slot 12182 now on 7000 too; 7001 keeps its open breaker for its slots.
        b.read_map(&Value::Array(vec![
            range(0, 12_182, 7000),
            range(12_183, 16_383, 7001),
        ]));
        assert!(Arc::ptr_eq(&b.of(b"foo"), &bar));
        let on_7001 = (0..)
            .map(|i: u32| i.to_string())
            .find(|t| slot_of(t.as_bytes()) > 12_182)
            .unwrap();
        let kept = b.of(on_7001.as_bytes());
        assert!(
            Arc::ptr_eq(&kept, &foo) && !kept.allows(2),
            "7001's breaker kept, open"
        );
        // An unreadable reply changes nothing.
        b.read_map(&Value::Nil);
        assert!(Arc::ptr_eq(&b.of(b"foo"), &bar));
    }

    #[test]
    fn the_map_is_read_by_one_caller_at_a_time() {
        let b = Breakers::new(5, 100, true);
        assert!(b.map_due(10, 1_000));
        assert!(!b.map_due(11, 1_000));
        assert!(b.map_due(1_010, 1_000));
        assert!(!Breakers::new(5, 100, false).map_due(0, 0));
    }
}
