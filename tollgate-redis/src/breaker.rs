//! The circuit breaker: after a run of failed calls, Redis is not asked for a pause, then one
//! call probes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Stop asking Redis after `threshold` failures in a row, for `pause`; then one probe.
pub(crate) struct Breaker {
    pub(crate) threshold: u32,
    pub(crate) pause: u64,
    /// Set while failures are being counted or the circuit is open; lets the success path
    /// skip the lock. A stale `false` only delays a reset of the count to the next success.
    pub(crate) troubled: AtomicBool,
    pub(crate) state: Mutex<BreakerState>,
}

#[derive(Default)]
pub(crate) struct BreakerState {
    failures: u32,
    /// While open: when the next probe may go (each probe moves it one pause on, so a probe
    /// whose caller gave up never keeps the circuit shut).
    open_until: Option<u64>,
}

impl Breaker {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_opens_after_the_threshold_and_probes_once() {
        let b = Breaker {
            threshold: 2,
            pause: 100,
            troubled: AtomicBool::new(false),
            state: Mutex::new(BreakerState::default()),
        };
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
}
