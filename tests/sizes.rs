//! The sizes the README states, kept honest.

use std::mem::size_of;

use tollgate::{Decision, FixedWindow, SlidingLog, SlidingWindow, TokenBucket};

#[test]
fn sizes_match_the_readme() {
    assert_eq!(size_of::<Decision>(), 24);
    assert_eq!(size_of::<TokenBucket>(), 56);
    assert_eq!(size_of::<FixedWindow>(), 48);
    // Plus 8 × (K + 1) bytes of ring on the heap (72 with the default K = 8). The head is a
    // 16-byte word for limits too large to share 64 bits with the slot number twice, so its
    // cell is 32 bytes (16-byte aligned) whichever form it holds.
    assert_eq!(size_of::<SlidingWindow>(), 96);
    // Plus 8 × limit bytes of log on the heap.
    assert_eq!(size_of::<SlidingLog>(), 56);
}
