//! What the sketch tests share: the random clock step and cost, and the check of one decision against
//! the key's exact limiter fed only what the sketch admitted.

use std::time::Duration;

use tollgate::{Clock, Decision, FixedWindow, Limiter, ManualClock};

use crate::common::Rng;

/// A random step of the clock: mostly small forward moves, sometimes a window or more,
/// sometimes back.
pub fn step(rng: &mut Rng, clock: &ManualClock, period: Duration, back: bool) {
    let p = period.as_nanos() as u64;
    match rng.below(10) {
        0..=5 => clock.advance(Duration::from_nanos(rng.below(p / 8 + 1))),
        6 | 7 => clock.advance(Duration::from_nanos(rng.below(3 * p))),
        8 if back => {
            let now = clock.now_nanos();
            clock.set(Duration::from_nanos(now.saturating_sub(rng.below(2 * p))));
        }
        _ => {}
    }
}

/// A random cost for a limit of `limit`: one in twenty 0, one in twenty above the capacity,
/// `partial - 1` in twenty up to the limit (`partial >= 2`), the rest 1.
pub fn cost(rng: &mut Rng, limit: u64, partial: u64) -> u64 {
    match rng.below(20) {
        0 => 0,
        1 => limit + 1 + rng.below(3),
        r if r <= partial => 1 + rng.below(limit),
        _ => 1,
    }
}

/// Checks one sketch's decision against the key's exact fixed window fed only what the sketch
/// admitted (`shadow`): an admission must fit the shadow, and no field is optimistic.
pub fn check_against_shadow(d: &Decision, shadow: &FixedWindow<ManualClock>, n: u64, at: &str) {
    let before = shadow.peek(n);
    let left = shadow.peek(0);
    if d.is_allowed() {
        let s = shadow.try_acquire_n(n);
        assert!(s.is_allowed(), "{at}: admitted past the key's own limit");
        assert!(
            d.remaining() <= s.remaining(),
            "{at}: remaining {d:?} > {s:?}"
        );
        assert!(
            d.reset_after() >= s.reset_after(),
            "{at}: reset {d:?} < {s:?}"
        );
    } else {
        assert!(
            d.remaining() <= left.remaining(),
            "{at}: remaining {d:?} > {left:?}"
        );
        assert!(
            d.reset_after() >= before.reset_after(),
            "{at}: reset {d:?} < {before:?}"
        );
        if !before.is_allowed() {
            let (r, s) = (d.retry_after(), before.retry_after());
            // `None` is "never": at least any wait.
            assert!(
                r.is_none() || s.is_some_and(|s| r.unwrap() >= s),
                "{at}: retry {d:?} < {before:?}"
            );
        }
    }
}
