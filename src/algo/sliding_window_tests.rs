//! Unit tests of the sliding window's pure decisions and head forms.

use super::*;
use alloc::vec;
use core::time::Duration;

#[test]
fn moving_the_head_finishes_the_old_slot() {
    let g = Geometry::new(&Quota::per_second(10).unwrap(), 4).unwrap();
    assert_eq!(g.p.len, 250_000_000);
    let ring = [0u64; 5];
    let (d, w) = decide(&g, 0, |i| ring[i], 0, 3);
    assert!(d.is_allowed());
    let w = w.unwrap();
    assert_eq!(w.finished, None);
    // Next slot: the head moves and slot 0 (count 3) goes to the ring.
    let (d, w2) = decide(&g, w.head, |i| ring[i], 250_000_000, 1);
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 6);
    assert_eq!(w2.unwrap().finished, Some((0, w.head)));
}

#[test]
fn denial_waits_for_the_slot_that_frees_enough() {
    let g = Geometry::new(&Quota::per_second(4).unwrap(), 4).unwrap();
    let mut ring = [0u64; 5];
    let cb = g.p.count_bits;
    // Slot 0 holds 3, the head (slot 1) holds 1: full.
    ring[0] = 3;
    let head = 1 << cb | 1;
    let (d, w) = decide(&g, head, |i| ring[i], 300_000_000, 2);
    assert!(!d.is_allowed() && w.is_none());
    // Slot 0 stops counting when slot 0 + 4 + 1 = 5 begins, at 1.25 s.
    assert_eq!(d.retry_after(), Some(Duration::from_millis(950)));
    assert_eq!(d.reset_after(), Duration::from_millis(1_500 - 300));
}

#[test]
fn a_move_carries_the_older_slots_in_the_head() {
    let g = Geometry::new(&Quota::per_second(10).unwrap(), 4).unwrap();
    let cb = g.p.count_bits;
    let ring = [0u64; 5];
    let fresh = Head {
        epoch: 0,
        older: 0,
        total: 0,
    };
    let (d, w) = decide_head(&g, fresh, |i| ring[i], 0, 3);
    assert!(d.is_allowed() && d.remaining() == 7);
    let w = w.unwrap();
    assert_eq!((w.head.total, w.finished), (3, None));
    // Next slot: the head moves, carries slot 0's 3 as `older`, and finishes slot 0.
    let (d, w2) = decide_head(&g, w.head, |i| ring[i], 250_000_000, 1);
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 6);
    let w2 = w2.unwrap();
    let moved = Head {
        epoch: 1,
        older: 3,
        total: 4,
    };
    assert_eq!((w2.head, w2.finished), (moved, Some((0, 3))));
    // In the head's slot the ring is not read at all.
    let (d, w3) = decide_head(&g, moved, |_| unreachable!(), 300_000_000, 6);
    assert!(d.is_allowed() && d.remaining() == 0);
    assert_eq!(w3.unwrap().head.total, 10);
    let _ = cb;
}

#[test]
fn both_packings_round_trip_and_the_form_follows_the_limit() {
    let small = Geometry::new(&Quota::per_second(100).unwrap(), 8).unwrap();
    let large = Geometry::new(&Quota::per_second(1_000_000_000).unwrap(), 8).unwrap();
    assert!(small.narrow() && !large.narrow());
    for g in [small, large] {
        let cb = g.p.count_bits;
        let h = Head {
            epoch: HORIZON / g.p.len,
            older: g.p.limit - 1,
            total: g.p.limit,
        };
        if g.narrow() {
            assert_eq!(u64::pack(h, cb).unpack(cb), h);
        }
        assert_eq!(u128::pack(h, cb).unpack(cb), h);
    }
}

/// The head form and the ring form, each on its own serial state, answer every request
/// and refund alike (a pseudo-random walk of costs, clock steps forward and back).
#[test]
fn the_head_form_decides_as_the_ring_form() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (limit, slots) in [(5u64, 4u32), (3, 1), (7, 3), (40, 8)] {
        let g = Geometry::new(&Quota::per_second(limit).unwrap(), slots).unwrap();
        let cb = g.p.count_bits;
        let (mut ring_a, mut ring_b) = (vec![0u64; g.ring_len()], vec![0u64; g.ring_len()]);
        let mut head_a = Head {
            epoch: 0,
            older: 0,
            total: 0,
        };
        let mut head_b = 0u64;
        let mut now = 0u64;
        // Shorter under miri, which is a thousand times slower.
        for _ in 0..if cfg!(miri) { 500 } else { 20_000 } {
            let r = next();
            now = match r % 8 {
                0 => now.saturating_sub(r >> 40),
                1..=3 => now + (r >> 36) % g.p.len,
                _ => now,
            };
            let n = (r >> 8) % (limit + 2);
            if r % 11 == 0 {
                let (ga, wa) = refunded(&g, head_a, now, n);
                let head = Head {
                    epoch: head_b >> cb,
                    older: 0,
                    total: head_b & count_mask(cb),
                };
                let (gb, wb) = refunded(&g, head, now, n);
                assert_eq!(ga, gb);
                if let Some(w) = wa {
                    head_a = w;
                }
                if let Some(w) = wb {
                    head_b = w.epoch << cb | w.total;
                }
                continue;
            }
            let (da, wa) = decide_head(&g, head_a, |i| ring_a[i], now, n);
            let (db, wb) = decide(&g, head_b, |i| ring_b[i], now, n);
            assert_eq!(da, db, "{n} at {now}");
            if let Some(w) = wa {
                if let Some((i, v)) = w.finished {
                    ring_a[i] = ring_a[i].max(v);
                }
                head_a = w.head;
            }
            if let Some(w) = wb {
                if let Some((i, v)) = w.finished {
                    ring_b[i] = ring_b[i].max(v);
                }
                head_b = w.head;
            }
        }
    }
}
