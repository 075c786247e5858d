//! The sliding log as documented: exact. An admission at `s` counts while `now − s < period`.
//! The limiter's now is the later of the clock (clamped at the horizon) and the newest
//! admission; admissions are recorded at that now.

use tollgate::Quota;

use crate::{Outcome, HORIZON};

/// The sliding log's reference model.
#[derive(Clone, Debug)]
pub struct SlidingLogModel {
    limit: u64,
    period: u64,
    /// (time, units) of the admissions that may still count, oldest first.
    admitted: Vec<(u64, u64)>,
}

impl SlidingLogModel {
    /// An empty log for `quota`.
    pub fn new(quota: &Quota) -> Self {
        SlidingLogModel {
            limit: quota.limit(),
            period: u64::try_from(quota.period().as_nanos()).expect("a period fits"),
            admitted: Vec::new(),
        }
    }

    fn newest(&self) -> Option<u64> {
        self.admitted.last().map(|&(s, _)| s)
    }

    /// Units counted at `now`.
    fn counted(&self, now: u64) -> u64 {
        let live = self
            .admitted
            .iter()
            .filter(|&&(s, _)| now - s < self.period);
        live.map(|&(_, units)| units).sum()
    }

    /// One request of `n` units at clock reading `now_ns`.
    pub fn acquire(&mut self, now_ns: u64, n: u64) -> Outcome {
        // Past the horizon time stands still, for the window and every duration alike: a
        // reading past it is the horizon.
        let now_ns = now_ns.min(HORIZON);
        let now = now_ns.max(self.newest().unwrap_or(0));
        let live = self.counted(now);
        let left = self
            .limit
            .checked_sub(live)
            .expect("never more than the limit counted");
        // Full again when the newest live admission leaves.
        let reset = match self.newest() {
            Some(s) if live > 0 => (s + self.period).saturating_sub(now_ns),
            _ => 0,
        };
        if n > self.limit {
            return Outcome::exceeds(left, reset);
        }
        if n <= left {
            if n == 0 {
                return Outcome::allowed(left, reset);
            }
            self.admitted.push((now, n));
            let period = self.period;
            self.admitted.retain(|&(s, _)| now - s < period);
            return Outcome::allowed(left - n, (now + self.period).saturating_sub(now_ns));
        }
        // The first instant, among those when a live admission leaves, at which n more fit.
        let pass_at = self
            .admitted
            .iter()
            .map(|&(s, _)| s + self.period)
            .filter(|&at| at > now)
            .find(|&at| self.counted(at) + n <= self.limit)
            .expect("once every live admission has left, n ≤ limit fits");
        Outcome::denied(left, now_ns, pass_at, reset)
    }
}
