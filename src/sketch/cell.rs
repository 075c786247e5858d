//! One column of the sketch: a window number and `lanes` small counters in one 16-byte word.
//!
//! # Word layout (`u128`)
//!
//! | bits                              | field      | meaning                                     |
//! |-----------------------------------|------------|---------------------------------------------|
//! | `0..64`                           | `window`   | window number `k = now / period` of lanes   |
//! | `64 + i·b .. 64 + (i+1)·b`        | `cur[i]`   | lane `i`'s count in window `k` (`≤ limit`)  |
//! | `64 + (lanes+i)·b ..` (sliding)   | `prev[i]`  | lane `i`'s count in window `k - 1`          |
//!
//! `b = bits(limit)`; `lanes = min(8, 64 / b)` for the fixed window, `min(4, 32 / b)` for the
//! sliding one (which keeps two windows). A key counts in two distinct lanes of its column
//! (one when there are fewer than three lanes), picked by its hash.
//!
//! # Invariant
//!
//! For every key `x` and window `k`: every lane of `x` counts at least the units admitted to
//! `x` in `k` (for the sliding form, `prev` likewise for `k - 1`). So the minimum over `x`'s
//! lanes overestimates `x`'s count, and an admission (`min + n ≤ limit`) keeps `x`'s true
//! count `≤ limit`. An admission raises each of `x`'s lanes to `max(lane, min + n)`
//! (conservative update): `x`'s count after it is at most `min + n`, so the invariant holds,
//! and no lane ever exceeds `limit`. The check and the update are one compare-exchange on
//! one word, so two racing requests never both pass on the same stale minimum.
//!
//! # Orderings
//!
//! Each column is its own word and publishes nothing else: all `Relaxed`, as the fixed
//! window's word. Admissions to a column are totally ordered by its modification order; a
//! stale load only makes the compare-exchange fail; a denial on a stale word is right, since
//! within a window lanes only grow and a newer window is only seen by a newer clock reading.
//!
//! # Time going backwards
//!
//! A column moved to a later window than the caller's clock reading (another thread read a
//! later clock, or the clock stepped back) denies, and writes nothing, until the clock
//! reaches that window: its lanes no longer hold the earlier window's counts, so admitting
//! there could pass a key twice its limit. The denial's `retry_after` is when the request
//! would pass in that window.

use crate::decision::Decision;
use crate::quota::{bits, HORIZON};
use crate::sync::{AtomicU128, Ordering};

#[cfg(tollgate_loom)]
pub(crate) mod planted;

/// Most lanes in one column of the fixed window.
pub(crate) const MAX_LANES: u32 = 8;
/// Most lanes (each with two windows) in one column of the sliding window.
pub(crate) const MAX_SLIDING_LANES: u32 = 4;

/// The geometry of every column: window length, limit and lane packing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CellParams {
    /// Window length in ns (the quota's period).
    pub(crate) len: u64,
    /// Units per key per window.
    pub(crate) limit: u64,
    /// Bits per lane.
    pub(crate) lane_bits: u32,
    /// Lanes per column (current-window lanes, for the sliding form).
    pub(crate) lanes: u32,
    /// Two-window weighted (sliding) or fixed window.
    pub(crate) sliding: bool,
}

/// The two lanes of a key in its column (equal when the column has fewer than three).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyLanes(pub(crate) u8, pub(crate) u8);

impl CellParams {
    /// The packing for `limit` (at most 2^48 - 1, the fixed window) per `len` ns, or `None`
    /// when a sliding lane pair does not fit 64 bits (`limit ≥ 2^32`).
    pub(crate) fn new(len: u64, limit: u64, sliding: bool) -> Option<CellParams> {
        let lane_bits = bits(limit).max(1);
        let lanes = if sliding {
            (32 / lane_bits).min(MAX_SLIDING_LANES)
        } else {
            (64 / lane_bits).min(MAX_LANES)
        };
        (lanes >= 1).then_some(CellParams {
            len: len.max(1),
            limit,
            lane_bits,
            lanes,
            sliding,
        })
    }

    /// Lanes a key counts in: 2, or 1 in a column of fewer than three.
    pub(crate) fn lanes_per_key(&self) -> u32 {
        if self.lanes >= 3 {
            2
        } else {
            1
        }
    }

    fn mask(&self) -> u64 {
        (1u64 << self.lane_bits) - 1
    }

    fn cur(&self, hi: u64, i: u8) -> u64 {
        hi >> (u32::from(i) * self.lane_bits) & self.mask()
    }

    fn prev(&self, hi: u64, i: u8) -> u64 {
        if self.sliding {
            hi >> ((self.lanes + u32::from(i)) * self.lane_bits) & self.mask()
        } else {
            0
        }
    }

    fn with_cur(&self, hi: u64, i: u8, v: u64) -> u64 {
        let shift = u32::from(i) * self.lane_bits;
        hi & !(self.mask() << shift) | v << shift
    }

    /// The lanes as of window `current`, from lanes stored for window `stored ≤ current`.
    fn rolled(&self, hi: u64, stored: u64, current: u64) -> u64 {
        if current == stored {
            hi
        } else if self.sliding && current == stored + 1 {
            let cur_bits = self.lanes * self.lane_bits;
            (hi & ((1u64 << cur_bits) - 1)) << cur_bits
        } else {
            0
        }
    }

    /// Lane `i`'s estimate at `offset` ns into its window: `cur + ⌈prev · (len - offset) / len⌉`.
    fn estimate(&self, hi: u64, i: u8, offset: u64) -> u64 {
        let prev = self.prev(hi, i);
        let weighted = if prev == 0 {
            0
        } else {
            let w = u128::from(prev) * u128::from(self.len - offset);
            w.div_ceil(u128::from(self.len)) as u64
        };
        self.cur(hi, i) + weighted
    }

    /// When lane `i` (as of window `window`) would take `n` (`≤ limit`) with no other
    /// traffic, in absolute ns.
    fn pass_at(&self, hi: u64, i: u8, window: u64, n: u64) -> u64 {
        let start = window * self.len;
        let end = start + self.len;
        let cur = self.cur(hi, i);
        if !self.sliding {
            return end;
        }
        // Within the window: `prev · (len - e) ≤ room · len`, e from the window's start.
        let at = |base: u64, prev: u64, room: u64| -> u64 {
            if prev == 0 {
                return base;
            }
            let fits = (u128::from(room) * u128::from(self.len) / u128::from(prev))
                .min(u128::from(self.len)) as u64;
            base + (self.len - fits)
        };
        if cur + n <= self.limit {
            at(start, self.prev(hi, i), self.limit - n - cur)
        } else {
            // The next window: this window's count weighs as `prev`.
            at(end, cur, self.limit - n)
        }
    }

    /// When lane `i` (as of window `window`) holds nothing, in absolute ns.
    fn empty_at(&self, hi: u64, i: u8, window: u64) -> u64 {
        let end = (window + 1) * self.len;
        if self.cur(hi, i) > 0 {
            if self.sliding {
                end + self.len
            } else {
                end
            }
        } else if self.prev(hi, i) > 0 {
            end
        } else {
            0
        }
    }
}

/// The judgement of a request at an instant, in absolute times.
struct Judged {
    /// Whether `n` fits (and the new high half if it must be written).
    fits: bool,
    write: Option<u64>,
    left: u64,
    /// When the request would pass (denials only).
    pass_at: u64,
    /// When the key's lanes are empty (after the write, if any).
    empty_at: u64,
}

/// Judges `n` units for the key of `lanes` on lanes `hi` as of window `window`, `t` ns on
/// the clock (`t` within that window).
fn judge(p: &CellParams, hi: u64, window: u64, t: u64, n: u64, lanes: KeyLanes) -> Judged {
    let offset = t - window * p.len;
    let (a, b) = (lanes.0, lanes.1);
    let (ea, eb) = (p.estimate(hi, a, offset), p.estimate(hi, b, offset));
    let min_est = ea.min(eb);
    let left = p.limit.saturating_sub(min_est);
    let empty = |hi: u64| p.empty_at(hi, a, window).min(p.empty_at(hi, b, window));
    if n <= left {
        // Conservative update: each lane of the key up to the key's bound, `min_cur + n`.
        let target = p.cur(hi, a).min(p.cur(hi, b)) + n;
        let raise = |hi: u64, i: u8| p.with_cur(hi, i, p.cur(hi, i).max(target));
        let new = raise(raise(hi, a), b);
        Judged {
            fits: true,
            write: (n != 0).then_some(new),
            left: left - n,
            pass_at: t,
            empty_at: empty(new),
        }
    } else {
        let pass_at = if n > p.limit {
            u64::MAX
        } else {
            p.pass_at(hi, a, window, n).min(p.pass_at(hi, b, window, n))
        };
        Judged {
            fits: false,
            write: None,
            left,
            pass_at,
            empty_at: empty(hi),
        }
    }
}

fn join(window: u64, hi: u64) -> u128 {
    u128::from(hi) << 64 | u128::from(window)
}

/// The pure decision: column word, now, cost, the key's lanes → decision and the new word
/// if it must be written.
#[inline]
pub(crate) fn decide(
    p: &CellParams,
    word: u128,
    now_ns: u64,
    n: u64,
    lanes: KeyLanes,
) -> (Decision, Option<u128>) {
    let (stored, hi) = (word as u64, (word >> 64) as u64);
    // Clamped once, for the window and the durations alike: past the horizon time stands
    // still, so a counted column never reads as empty.
    let now_ns = now_ns.min(HORIZON);
    let t = now_ns;
    // The stored window when `t` is in it (one multiplication), else `t / len`.
    let current = if t.wrapping_sub(stored * p.len) < p.len {
        stored
    } else {
        t / p.len
    };
    if current < stored {
        return (behind(p, hi, stored, now_ns, n, lanes), None);
    }
    let hi = p.rolled(hi, stored, current);
    let j = judge(p, hi, current, t, n, lanes);
    let reset = j.empty_at.saturating_sub(now_ns);
    if n > p.limit {
        return (Decision::exceeds(j.left, reset), None);
    }
    if j.fits {
        (
            Decision::allowed(j.left, reset),
            j.write.map(|hi| join(current, hi)),
        )
    } else {
        (Decision::denied(j.left, now_ns, j.pass_at, reset), None)
    }
}

/// A column already in a later window than the clock: denied, judged as of that window's
/// start for when it would pass (see the module's "Time going backwards").
#[cold]
#[inline(never)]
fn behind(p: &CellParams, hi: u64, stored: u64, now_ns: u64, n: u64, lanes: KeyLanes) -> Decision {
    let start = stored * p.len;
    let j = judge(p, hi, stored, start, n, lanes);
    let reset = j.empty_at.max(start).saturating_sub(now_ns);
    if n > p.limit {
        return Decision::exceeds(0, reset);
    }
    Decision::denied(0, now_ns, j.pass_at.max(start), reset)
}

/// One column of the sketch.
#[derive(Debug)]
pub(crate) struct Cell(AtomicU128);

impl Cell {
    pub(crate) fn new() -> Cell {
        Cell(AtomicU128::new(0))
    }

    /// The compare-exchange loop around [`decide`].
    #[inline]
    pub(crate) fn acquire(&self, p: &CellParams, now_ns: u64, n: u64, lanes: KeyLanes) -> Decision {
        // Relaxed: one word, publishing nothing else (see the module's orderings).
        let mut current = self.0.load(Ordering::Relaxed);
        loop {
            let (decision, write) = decide(p, current, now_ns, n, lanes);
            let Some(new) = write else {
                return decision;
            };
            // Relaxed: the word's modification order orders admissions; weak: a spurious
            // failure only loops once more.
            match self
                .0
                .compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return decision,
                Err(actual) => current = actual,
            }
        }
    }

    /// One load and [`decide`]: what a request would be answered, writing nothing.
    #[inline]
    pub(crate) fn peek(&self, p: &CellParams, now_ns: u64, n: u64, lanes: KeyLanes) -> Decision {
        // Relaxed: a value of the one word, as a denial reads it (see the module's orderings).
        decide(p, self.0.load(Ordering::Relaxed), now_ns, n, lanes).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn lanes_for_limits() {
        let p = CellParams::new(SEC, 100, false).unwrap();
        assert_eq!((p.lane_bits, p.lanes, p.lanes_per_key()), (7, 8, 2));
        let p = CellParams::new(SEC, (1 << 48) - 1, false).unwrap();
        assert_eq!((p.lanes, p.lanes_per_key()), (1, 1));
        let p = CellParams::new(SEC, 100, true).unwrap();
        assert_eq!(p.lanes, 4);
        assert!(CellParams::new(SEC, 1 << 32, true).is_none());
    }

    #[test]
    fn the_minimum_lane_decides_and_both_rise_to_it() {
        let p = CellParams::new(SEC, 3, false).unwrap();
        let k = KeyLanes(0, 1);
        // Lane 0 holds 2 (another key's), lane 1 holds 0.
        let word = join(0, 2);
        let (d, w) = decide(&p, word, 0, 3, k);
        assert!(d.is_allowed());
        let hi = (w.unwrap() >> 64) as u64;
        // Conservative update: both lanes to 0 + 3 (lane 0 from 2 up to 3).
        assert_eq!((p.cur(hi, 0), p.cur(hi, 1)), (3, 3));
        let (d, w) = decide(&p, w.unwrap(), 0, 1, k);
        assert!(!d.is_allowed() && w.is_none());
        assert_eq!(d.retry_after(), Some(core::time::Duration::from_secs(1)));
    }

    #[test]
    fn a_column_ahead_of_the_clock_denies() {
        let p = CellParams::new(SEC, 5, false).unwrap();
        let k = KeyLanes(0, 1);
        let (_, w) = decide(&p, 0, 3 * SEC, 1, k);
        let (d, w2) = decide(&p, w.unwrap(), 2 * SEC, 1, k);
        assert!(!d.is_allowed() && w2.is_none());
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.retry_after(), Some(core::time::Duration::from_secs(1)));
    }

    #[test]
    fn sliding_weighs_the_previous_window() {
        let p = CellParams::new(SEC, 10, true).unwrap();
        let k = KeyLanes(0, 1);
        let (_, w) = decide(&p, 0, 0, 10, k);
        // Half-way through the next window: 10 · 1/2 = 5 still count.
        let (d, w) = decide(&p, w.unwrap(), SEC + SEC / 2, 5, k);
        assert!(d.is_allowed() && d.remaining() == 0);
        let (d, _) = decide(&p, w.unwrap(), SEC + SEC / 2, 1, k);
        assert!(!d.is_allowed());
        // 5 + ⌈10 (1 - e)⌉ + 1 ≤ 10 once 10 (1 - e) ≤ 4: e ≥ 0.6.
        assert_eq!(
            d.retry_after(),
            Some(core::time::Duration::from_millis(100))
        );
    }
}
