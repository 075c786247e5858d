//! Loom models of a refund racing a rollover: the refund reads the clock in one window (slot),
//! and another thread moves the clock into the next one and admits there, in any
//! interleaving with the refund's load and compare-exchange. (The refund's reading is its
//! own, [`Split`]: a refund that reads the clock after the rollover refunds in the later
//! window by design, and the documentation tells callers to refund in the charge's window.) The later window (slot) must
//! never count less than it admitted: the refund gives back only into the window its reading
//! is in, and only while the stored word is still in it. For the token bucket, the later
//! "window" is the bucket at the later reading, which must never hold more than its burst.
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests --test refund
//! ```
//!
//! Each model runs the real limiter and its mutex twin, and must catch the planted refund
//! that keeps the old stale check (`loom_tests::mutants::refund`). The same models run a
//! `Limits` group of one member, and catch its refund made with those old helpers (a checked
//! copy, `src/group/planted.rs`), and the live limiter of each algorithm, which refunds
//! through the same helpers the planted copies break.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::mutants::mutant;
use loom_tests::mutants::refund::{BucketBehindReading, FixedLaterWindow, SlidingLaterSlot};
use loom_tests::{drain, expect_caught, model};
use tollgate::__loom::fixed_window::Fixed;
use tollgate::__loom::sliding_window::Geometry;
use tollgate::__loom::token_bucket::Gcra;
use tollgate::__loom::{planted_stale_refund, Algo, GroupModel, RateLimiter};
use tollgate::baseline::{MutexFixedWindow, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{
    Clock, FixedWindow, Limiter, LiveFixedWindow, LiveSlidingWindow, ManualClock, Member, Quota,
    SlidingWindow, TokenBucket,
};

const OVER: &str = "over the limit in the later window";

/// The model's clock: the shared manual clock the racer moves, except for the refunding
/// thread while it is frozen, which reads the instant it read before the racer overtook it.
#[derive(Clone, Default)]
struct Split {
    shared: ManualClock,
    frozen: std::sync::Arc<std::sync::Mutex<Option<(loom::thread::ThreadId, u64)>>>,
}

impl Split {
    fn set(&self, t: Duration) {
        self.shared.set(t);
    }

    /// The calling thread reads the clock's present reading from now on, whatever the others
    /// do to it; `release` ends that.
    fn freeze_for_this_thread(&self) {
        let at = self.shared.now_nanos();
        *self.frozen.lock().expect("unpoisoned") = Some((thread::current().id(), at));
    }

    fn release(&self) {
        *self.frozen.lock().expect("unpoisoned") = None;
    }
}

impl Clock for Split {
    fn now_nanos(&self) -> u64 {
        // A std mutex: only this model's bookkeeping, held for no loom operation.
        if let Some((id, at)) = *self.frozen.lock().expect("unpoisoned")
            && thread::current().id() == id
        {
            return at;
        }
        self.shared.now_nanos()
    }
}

fn two() -> Quota {
    Quota::per_second(2).expect("valid quota")
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The model: a limiter of 2 per second on a clock at `charge`, one unit admitted there. One
/// thread refunds it; another sets the clock to `later` and asks for `takes` units one by
/// one. After both, at `check`, the units the racer got in the later window plus what a
/// drain at `later` gets (plus, for a sliding window, a drain at `check` once the charge's
/// slot has left the window) are exactly 2: the later window never counts less than it
/// admitted.
fn refund_racing_a_rollover<L: Limiter + 'static>(
    make: fn(Split) -> L,
    charge: Duration,
    later: Duration,
    takes: u64,
    check: Option<Duration>,
) -> impl Fn() + Send + Sync + 'static {
    move || {
        let clock = Split::default();
        clock.set(charge);
        let limiter = Arc::new(make(clock.clone()));
        assert!(limiter.try_acquire().is_allowed(), "setup");
        // The refund reads `charge`, wherever the racer has moved the clock.
        clock.freeze_for_this_thread();
        let racer = {
            let (limiter, clock) = (limiter.clone(), clock.clone());
            thread::spawn(move || {
                clock.set(later);
                (0..takes)
                    .filter(|_| limiter.try_acquire().is_allowed())
                    .count() as u64
            })
        };
        let given = limiter.refund(1);
        let raced = racer.join().expect("racer");
        clock.release();
        assert!(given <= 1, "the refund gave back {given}");
        // The clock is at `later` now.
        let now = drain(&*limiter, 4);
        let after = match check {
            Some(t) => {
                clock.set(t);
                drain(&*limiter, 4)
            }
            None => 0,
        };
        assert_eq!(
            raced + now + after,
            2,
            "{OVER}: raced {raced}, then {now} and {after}, refund gave {given}"
        );
    }
}

/// Fixed windows of 1 s: the charge at 0.5 s, the racer takes 2 at 1.5 s (window 1).
fn fixed<L: Limiter + 'static>(make: fn(Split) -> L) -> impl Fn() + Send + Sync + 'static {
    refund_racing_a_rollover(make, ms(500), ms(1_500), 2, None)
}

/// 2 slots of 500 ms: the charge at 0.1 s (slot 0), the racer takes 1 at 0.6 s (slot 1);
/// at 1.6 s (slot 3) slot 0 has left the window and slot 1 still counts.
fn sliding<L: Limiter + 'static>(make: fn(Split) -> L) -> impl Fn() + Send + Sync + 'static {
    refund_racing_a_rollover(make, ms(100), ms(600), 1, Some(ms(1_600)))
}

/// Burst 2, a token every 500 ms: the bucket is emptied at 0 (the charge and one more
/// below); the racer takes the refilled 2 at 10 s. At 10 s the bucket holds no more than its
/// burst of 2, whatever the refund did.
fn bucket<L: Limiter + 'static>(make: fn(Split) -> L) -> impl Fn() + Send + Sync + 'static {
    refund_racing_a_rollover(make, Duration::ZERO, Duration::from_secs(10), 2, None)
}

fn real_fixed(c: Split) -> FixedWindow<Split> {
    FixedWindow::with_clock(two(), c)
}
fn twin_fixed(c: Split) -> MutexFixedWindow<Split> {
    MutexFixedWindow::with_clock(two(), c)
}
fn mutant_fixed(c: Split) -> RateLimiter<FixedLaterWindow, Split> {
    mutant(Fixed::params(&two()).expect("valid"), c)
}

fn real_sliding(c: Split) -> SlidingWindow<Split> {
    SlidingWindow::try_with_slots(two(), 2, c).expect("valid")
}
fn twin_sliding(c: Split) -> MutexSlidingWindow<Split> {
    MutexSlidingWindow::try_with_slots(two(), 2, c).expect("valid")
}
fn mutant_sliding(c: Split) -> RateLimiter<SlidingLaterSlot, Split> {
    mutant(Geometry::new(&two(), 2).expect("valid"), c)
}

/// The bucket emptied at 0: the model's charge takes the second token.
fn emptied<L: Limiter>(l: L) -> L {
    assert!(l.try_acquire().is_allowed(), "setup");
    l
}
fn real_bucket(c: Split) -> TokenBucket<Split> {
    emptied(TokenBucket::with_clock(two(), c))
}
fn twin_bucket(c: Split) -> MutexTokenBucket<Split> {
    emptied(MutexTokenBucket::with_clock(two(), c))
}
fn mutant_bucket(c: Split) -> RateLimiter<BucketBehindReading, Split> {
    emptied(mutant(Gcra::params(&two()).expect("valid"), c))
}

/// The real group, for [`group_of`].
const SOUND: bool = false;
/// The group refunding through the refund helpers as they were before their stale checks.
const STALE: bool = true;

/// A `Limits` group of `member` alone on `c`: the real group, or the [`STALE`] one.
fn group_of<const STALE_REFUND: bool>(member: Member, c: Split) -> GroupModel<Split> {
    let members = [std::sync::Arc::new(member)];
    if STALE_REFUND {
        planted_stale_refund(c, members)
    } else {
        GroupModel::sound(c, members)
    }
}
fn group_fixed<const STALE_REFUND: bool>(c: Split) -> GroupModel<Split> {
    group_of::<STALE_REFUND>(Member::fixed_window(two()), c)
}
fn group_sliding<const STALE_REFUND: bool>(c: Split) -> GroupModel<Split> {
    let member = Member::try_sliding_window_with_slots(two(), 2).expect("valid");
    group_of::<STALE_REFUND>(member, c)
}
fn group_bucket<const STALE_REFUND: bool>(c: Split) -> GroupModel<Split> {
    emptied(group_of::<STALE_REFUND>(Member::token_bucket(two()), c))
}
fn live_fixed(c: Split) -> LiveFixedWindow<Split> {
    LiveFixedWindow::with_clock(two(), c)
}
/// The live sliding window has the default 8 slots (125 ms at 2 per second): the charge at
/// 0.1 s is in slot 0, 0.6 s in slot 4, and at 1.6 s (slot 12) slot 0 has left the window
/// (it counts until slot 9) and slot 4 still counts (until slot 13).
fn live_sliding(c: Split) -> LiveSlidingWindow<Split> {
    LiveSlidingWindow::with_clock(two(), c)
}

#[test]
fn a_fixed_window_refund_racing_a_rollover() {
    model("refund/fixed window racing a rollover", fixed(real_fixed));
    model(
        "refund/fixed window racing a rollover (twin)",
        fixed(twin_fixed),
    );
    expect_caught(
        "refund/fixed window refunding into a later window",
        OVER,
        fixed(mutant_fixed),
    );
}

#[test]
fn group_and_live_refunds_racing_a_rollover() {
    model(
        "refund/Limits fixed window member",
        fixed(group_fixed::<SOUND>),
    );
    model(
        "refund/Limits sliding window member",
        sliding(group_sliding::<SOUND>),
    );
    model(
        "refund/Limits token bucket member",
        bucket(group_bucket::<SOUND>),
    );
    expect_caught(
        "refund/Limits fixed window member refunding into a later window",
        OVER,
        fixed(group_fixed::<STALE>),
    );
    expect_caught(
        "refund/Limits sliding window member refunding into a later slot",
        OVER,
        sliding(group_sliding::<STALE>),
    );
    expect_caught(
        "refund/Limits token bucket member refunding on a reading behind the word's",
        OVER,
        bucket(group_bucket::<STALE>),
    );
    model("refund/LiveFixedWindow", fixed(live_fixed));
    model("refund/LiveSlidingWindow", sliding(live_sliding));
    // Not the live token bucket: its refund is the token bucket's `refunded` on its 16-byte
    // word, which the bucket model above checks.
}

#[test]
fn a_sliding_window_refund_racing_a_new_slot() {
    model(
        "refund/sliding window racing a new slot",
        sliding(real_sliding),
    );
    model(
        "refund/sliding window racing a new slot (twin)",
        sliding(twin_sliding),
    );
    expect_caught(
        "refund/sliding window refunding into a later slot",
        OVER,
        sliding(mutant_sliding),
    );
}

#[test]
fn a_token_bucket_refund_racing_a_later_write() {
    model(
        "refund/token bucket racing a later write",
        bucket(real_bucket),
    );
    model(
        "refund/token bucket racing a later write (twin)",
        bucket(twin_bucket),
    );
    expect_caught(
        "refund/token bucket refunding on a reading behind the word's",
        OVER,
        bucket(mutant_bucket),
    );
}
