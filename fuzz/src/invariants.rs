//! Invariants over a whole stream of decisions, independent of any model: what the README
//! promises a caller, checked on the admissions actually made.

use tollgate::Quota;

use crate::HORIZON;

/// What bounds the admissions of one algorithm.
#[derive(Clone, Copy, Debug)]
pub enum Bound {
    /// Token bucket: in any span `[t0, t1]` of clock readings, at most
    /// `burst + (t1 − t0) × limit / period` units (time going back included).
    Bucket,
    /// Fixed window: at most `limit` units per aligned window `[k·period, (k+1)·period)`.
    Aligned,
    /// Sliding window and log: at most `limit` units in any window of length `period`.
    Sliding,
}

/// The admissions of a stream, and the bound they must keep.
#[derive(Clone, Debug)]
pub struct Ledger {
    bound: Bound,
    limit: u128,
    period: u128,
    burst: u128,
    /// The limiter's time: the latest clock reading (clamped at the horizon) at which
    /// anything was admitted. A window or log lets time stand still at it while the clock
    /// is behind.
    limiter_time: u64,
    /// (clamped clock reading, limiter time, units) of each admission with units > 0.
    admissions: Vec<(u64, u64, u64)>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new(bound: Bound, quota: &Quota) -> Self {
        Ledger {
            bound,
            limit: u128::from(quota.limit()),
            period: quota.period().as_nanos(),
            burst: u128::from(quota.burst()),
            limiter_time: 0,
            admissions: Vec::new(),
        }
    }

    /// Records an admission of `n` units at clock reading `now_ns`.
    pub fn admitted(&mut self, now_ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        let reading = now_ns.min(HORIZON);
        self.limiter_time = self.limiter_time.max(reading);
        self.admissions.push((reading, self.limiter_time, n));
    }

    /// Records a refund of `asked` units that gave back `given`: the newest admissions' units
    /// count no more, newest first (a window's refund lowers the count of the newest
    /// admission's window or slot, and a bucket's moves back its `tat`, the end the newest
    /// admissions built). A bucket's refund may also move `tat` back by a part of a token
    /// that it does not count in `given` (whole units only): one more unit, if asked for,
    /// counts no more then.
    pub fn refunded(&mut self, asked: u64, given: u64) {
        let mut given = match self.bound {
            Bound::Bucket => given.saturating_add(1).min(asked),
            Bound::Aligned | Bound::Sliding => given,
        };
        while given > 0 {
            let Some(last) = self.admissions.last_mut() else {
                return;
            };
            let take = given.min(last.2);
            last.2 -= take;
            given -= take;
            if last.2 == 0 {
                self.admissions.pop();
            }
        }
    }

    /// Panics if the admissions break the bound.
    pub fn check(&self) {
        match self.bound {
            Bound::Bucket => self.check_bucket(),
            Bound::Aligned => self.check_aligned(),
            Bound::Sliding => self.check_sliding(),
        }
    }

    fn check_bucket(&self) {
        let mut by_reading: Vec<(u64, u64)> =
            self.admissions.iter().map(|&(r, _, n)| (r, n)).collect();
        by_reading.sort_unstable();
        for (i, &(t0, _)) in by_reading.iter().enumerate() {
            let mut units: u128 = 0;
            for &(t1, n) in &by_reading[i..] {
                units += u128::from(n);
                // units ≤ burst + (t1 − t0) × limit / period, without division.
                assert!(
                    units * self.period
                        <= self.burst * self.period + u128::from(t1 - t0) * self.limit,
                    "token bucket: {units} units admitted in [{t0}, {t1}] ns, above burst {} + \
                     rate {}/{} ns",
                    self.burst,
                    self.limit,
                    self.period
                );
            }
        }
    }

    fn check_aligned(&self) {
        let mut per_window = std::collections::BTreeMap::<u128, u128>::new();
        for &(_, t, n) in &self.admissions {
            let units = per_window.entry(u128::from(t) / self.period).or_insert(0);
            *units += u128::from(n);
            assert!(
                *units <= self.limit,
                "fixed window: {units} units admitted in window {} (limit {})",
                u128::from(t) / self.period,
                self.limit
            );
        }
    }

    fn check_sliding(&self) {
        // Limiter times never decrease along the stream: a window of length `period` ending
        // at each admission is a run of consecutive admissions.
        let mut start = 0;
        let mut units: u128 = 0;
        for &(_, t, n) in &self.admissions {
            units += u128::from(n);
            while u128::from(t - self.admissions[start].1) >= self.period {
                units -= u128::from(self.admissions[start].2);
                start += 1;
            }
            assert!(
                units <= self.limit,
                "sliding: {units} units admitted in the {} ns up to {t} (limit {})",
                self.period,
                self.limit
            );
        }
    }
}
