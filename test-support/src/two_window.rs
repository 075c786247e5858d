//! [`TwoWindow`]: a key's exact two-window weighted count, the reference the sliding sketch
//! is checked against.

/// A key's exact two-window weighted counter. As the exact limiters' words, it moves to a new
/// window only when it counts there: time going back counts against the stored window.
///
/// ```
/// use tollgate_test_support::TwoWindow;
/// let mut w = TwoWindow::default();
/// w.charge(0, 100, 4);
/// assert_eq!(w.estimate(50, 100), 4);
/// assert_eq!(w.estimate(150, 100), 2); // half the last window weighs in
/// assert_eq!(w.estimate(250, 100), 0);
/// ```
#[derive(Default, Clone, Copy, Debug)]
pub struct TwoWindow {
    window: u64,
    cur: u64,
    prev: u64,
}

impl TwoWindow {
    /// The counter as of `t` (clock ns), windows `len` ns long.
    pub fn rolled(self, t: u64, len: u64) -> TwoWindow {
        let current = t / len;
        if current > self.window {
            let prev = if current == self.window + 1 {
                self.cur
            } else {
                0
            };
            TwoWindow {
                window: current,
                cur: 0,
                prev,
            }
        } else {
            self
        }
    }

    /// The estimate at `t`: this window's count and the last one's, weighted by how much of
    /// it the sliding window still covers (rounded up).
    pub fn estimate(&self, t: u64, len: u64) -> u64 {
        let r = self.rolled(t, len);
        let offset = t.saturating_sub(r.window * len).min(len);
        let w = u128::from(r.prev) * u128::from(len - offset);
        r.cur + w.div_ceil(u128::from(len)) as u64
    }

    /// Counts `n` at `t` (nothing, and no move, for a cost of 0).
    pub fn charge(&mut self, t: u64, len: u64, n: u64) {
        if n == 0 {
            return;
        }
        *self = self.rolled(t, len);
        self.cur += n;
    }
}
