//! The fixed window as documented: at most `limit` admissions per window
//! `[k·period, (k+1)·period)`, windows counted from the clock's zero. A reading in a window
//! before that of the newest admission counts against the newest admission's window (time
//! stands still for the limiter until the clock is back).
//!
//! A live window (`Live`'s documentation) keeps its counts when its limit changes, and the
//! new limit applies to them at once: a lowered limit may find more counted than it allows,
//! and then denies every cost above zero until the window ends. Its period never changes.
//! A refund (`Limiter::refund`) lowers the count of the newest admission's window by up to
//! `n` when its reading falls in that window, and gives nothing when it falls in another: a
//! later one (the window has moved on) or an earlier one (a reading older than the newest
//! admission's: the window moved on after the refund read the clock).

use std::collections::BTreeMap;

use tollgate::{Quota, QuotaError};

use crate::{Outcome, HORIZON};

/// The fixed window's reference model.
#[derive(Clone, Debug)]
pub struct FixedWindowModel {
    limit: u64,
    period: u64,
    /// Admissions per window number.
    admitted: BTreeMap<u64, u64>,
    /// The window of the newest admission (0 before any).
    newest_window: u64,
}

impl FixedWindowModel {
    /// An empty window for `quota`.
    pub fn new(quota: &Quota) -> Self {
        FixedWindowModel {
            limit: quota.limit(),
            period: u64::try_from(quota.period().as_nanos()).expect("a period fits"),
            admitted: BTreeMap::new(),
            newest_window: 0,
        }
    }

    /// One request of `n` units at clock reading `now_ns`.
    pub fn acquire(&mut self, now_ns: u64, n: u64) -> Outcome {
        // Past the horizon time stands still, for the window and every duration alike: a
        // reading past it is the horizon.
        let now_ns = now_ns.min(HORIZON);
        let window = (now_ns / self.period).max(self.newest_window);
        let count = self.admitted.get(&window).copied().unwrap_or(0);
        let ends_at = (window + 1) * self.period;
        // Full again when the window ends, unless nothing is counted in it.
        let reset = |count: u64| {
            if count == 0 {
                0
            } else {
                ends_at.saturating_sub(now_ns)
            }
        };
        // A lowered limit may leave more counted than it allows: nothing is left then.
        let left = self.limit.saturating_sub(count);
        if n > self.limit {
            return Outcome::exceeds(left, reset(count));
        }
        // A zero cost always passes and takes nothing.
        if n == 0 {
            return Outcome::allowed(left, reset(count));
        }
        if n <= left {
            *self.admitted.entry(window).or_insert(0) += n;
            self.newest_window = window;
            // Older windows never count again.
            self.admitted.retain(|&w, _| w >= window);
            return Outcome::allowed(left - n, reset(count + n));
        }
        Outcome::denied(left, now_ns, ends_at, reset(count))
    }

    /// A live window's change to `quota`: the new limit, or the period refused.
    pub fn set_quota(&mut self, quota: &Quota) -> Result<(), QuotaError> {
        super::same_period(self.period, quota)?;
        self.limit = quota.limit();
        Ok(())
    }

    /// A refund of `n` units at clock reading `now_ns`: taken off the count of the window that
    /// counts now, only while the reading is in the newest admission's window; the units
    /// given back.
    pub fn refund(&mut self, now_ns: u64, n: u64) -> u64 {
        if now_ns.min(HORIZON) / self.period != self.newest_window {
            return 0;
        }
        let Some(count) = self.admitted.get_mut(&self.newest_window) else {
            return 0;
        };
        let given = n.min(*count);
        *count -= given;
        given
    }
}
