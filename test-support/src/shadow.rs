//! [`check_against_shadow`]: a sketch's decision for one key against that key's own exact
//! fixed window, fed only what the sketch admitted.

use tollgate::{Clock, Decision, FixedWindow, Limiter};

/// Checks `d`, a sketch's answer to a request of `n` units of one key, against the key's
/// `shadow` (its own exact fixed window, made on the sketch's clock and origin), and charges
/// the shadow what the sketch admitted: an admission must fit the shadow, and no field is
/// optimistic against it (`remaining` at most its, `reset_after` at least its and, when both
/// deny, `retry_after` at least its). `at` names the step in the messages.
///
/// ```
/// use tollgate::{FixedWindow, Limiter, ManualClock, Quota};
/// use tollgate_test_support::check_against_shadow;
/// let clock = ManualClock::new();
/// let quota = Quota::per_second(2).unwrap();
/// // An exact limiter is a sketch without collisions: it matches its shadow.
/// let sketch = FixedWindow::with_clock(quota, &clock);
/// let shadow = FixedWindow::with_clock(quota, &clock);
/// for i in 0..3 {
///     check_against_shadow(&sketch.try_acquire(), &shadow, 1, &format!("request {i}"));
/// }
/// ```
pub fn check_against_shadow<C: Clock>(d: &Decision, shadow: &FixedWindow<C>, n: u64, at: &str) {
    let (before, left) = (shadow.peek(n), shadow.peek(0));
    if d.is_allowed() {
        let s = shadow.try_acquire_n(n);
        assert!(s.is_allowed(), "{at}: admitted past the key's own limit");
        not_optimistic(d, &s, false, at);
    } else {
        // A denial against what the key has left before this request.
        not_optimistic(d, &left, false, at);
        if !before.is_allowed() {
            not_optimistic(d, &before, true, at);
        }
    }
}

/// Asserts `d` no more optimistic than `own`, the key's exact answer: `remaining` at most its,
/// `reset_after` at least its; when both deny (`both_denied`), only `retry_after`, at least
/// its (`None` is "never": at least any wait).
fn not_optimistic(d: &Decision, own: &Decision, both_denied: bool, at: &str) {
    if both_denied {
        // Both denied: only the wait is compared (`own` was asked the same cost).
        let ok = d.retry_after().is_none()
            || own
                .retry_after()
                .is_some_and(|o| d.retry_after().unwrap() >= o);
        assert!(ok, "{at}: retry {d:?} before {own:?}");
        return;
    }
    assert!(
        d.remaining() <= own.remaining(),
        "{at}: remaining {d:?} above {own:?}"
    );
    assert!(
        d.reset_after() >= own.reset_after(),
        "{at}: reset {d:?} before {own:?}"
    );
}
