//! A request overtaken between its clock reading and its write: the clock reads one instant,
//! then (before the limiter writes anything) the clock moves on and other requests run, and
//! only then does the first one decide, on a reading older than the state it finds.
//!
//! `Overtaken` makes this deterministic: a [`Clock`] whose next reading runs a callback after
//! it has read the time and before it returns it. The callback moves the shared manual clock
//! and makes the other requests on the same limiter.
//!
//! - A refund overtaken by a rollover gives nothing back: the window (slot) it finds holds
//!   none of its charge, so the later window never admits more than its limit.
//! - A token bucket refund overtaken by a later write gives nothing back either (it could
//!   otherwise give back more than the burst), and a zero cost still passes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::baseline::{MutexFixedWindow, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{
    Algorithm, Clock, Decision, FixedWindow, KeyedLimiter, Limiter, Limits, LiveFixedWindow,
    LiveSlidingWindow, LiveTokenBucket, ManualClock, Member, Quota, SlidingWindow, TokenBucket,
};

type Callback = Box<dyn FnOnce() + Send>;

/// A manual clock whose next reading, once armed, runs a callback between reading the time and
/// returning it.
#[derive(Clone, Default)]
struct Overtaken {
    clock: ManualClock,
    next: Arc<Mutex<Option<Callback>>>,
}

impl Overtaken {
    fn set(&self, t: Duration) {
        self.clock.set(t);
    }

    /// The next reading returns the time it read, after `f` has run.
    fn arm(&self, f: impl FnOnce() + Send + 'static) {
        *self.next.lock().unwrap() = Some(Box::new(f));
    }

    fn fired(&self) -> bool {
        self.next.lock().unwrap().is_none()
    }
}

impl Clock for Overtaken {
    fn now_nanos(&self) -> u64 {
        let read = self.clock.now_nanos();
        // Taken out first: the callback's own requests read the clock as usual.
        let callback = self.next.lock().unwrap().take();
        if let Some(f) = callback {
            f();
        }
        read
    }
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn five() -> Quota {
    Quota::per_second(5).unwrap()
}

/// `$check(name, make)` on the four limiters of one algorithm at five per second: the
/// lock-free one, its mutex twin, the live one and a group of one member, each named by its
/// type (the group by its member); the four results, in that order.
macro_rules! on_each_form {
    ($check:ident, $lock_free:ident, $twin:ident, $live:ident, $member:ident) => {
        [
            $check(stringify!($lock_free), |c| {
                $lock_free::with_clock(five(), c)
            }),
            $check(stringify!($twin), |c| $twin::with_clock(five(), c)),
            $check(stringify!($live), |c| $live::with_clock(five(), c)),
            $check(concat!("Limits(", stringify!($member), ")"), |c| {
                Limits::try_new(c, [Arc::new(Member::$member(five()))]).unwrap()
            }),
        ]
    };
}

fn admitted(limiter: &dyn Limiter, tries: u64) -> u64 {
    (0..tries)
        .filter(|_| limiter.try_acquire().is_allowed())
        .count() as u64
}

/// `limiter.refund(n)`, overtaken: after it reads the clock and before it writes, the clock
/// is set to `then` and other requests ask for 5 units, of which `taken` must pass (`what`
/// says why). Asserts that the refund read the clock; what it gave back.
fn overtaken_refund<L: Limiter + 'static>(
    name: &str,
    limiter: &Arc<L>,
    clock: &Overtaken,
    n: u64,
    then: Duration,
    taken: u64,
    what: &'static str,
) -> u64 {
    let (others, at) = (limiter.clone(), clock.clone());
    clock.arm(move || {
        at.set(then);
        assert_eq!(admitted(&*others, 5), taken, "{what}");
    });
    let given = limiter.refund(n);
    assert!(clock.fired(), "{name}: the refund read the clock");
    given
}

/// 5 per 1 s windows. One admission at 0.5 s; its refund reads 0.5 s, and before it writes
/// the clock reaches 1.5 s and others take all 5 of window 1. The refund must give nothing
/// back (window 1 holds none of its charge), and window 1 must admit no sixth request.
fn refund_overtaken_by_a_rollover<L: Limiter + 'static>(name: &str, make: impl Fn(Overtaken) -> L) {
    let clock = Overtaken::default();
    let limiter = Arc::new(make(clock.clone()));
    clock.set(ms(500));
    assert!(limiter.try_acquire().is_allowed(), "{name}");
    let given = overtaken_refund(name, &limiter, &clock, 1, ms(1_500), 5, "window 1 is fresh");
    assert_eq!(given, 0, "{name}: the refund gave back into a later window");
    assert_eq!(
        admitted(&*limiter, 3),
        0,
        "{name}: window 1 admitted more than its limit"
    );
    assert_eq!(limiter.peek(0).remaining(), 0, "{name}");
}

#[test]
fn a_fixed_window_refund_overtaken_by_a_rollover_gives_nothing() {
    on_each_form!(
        refund_overtaken_by_a_rollover,
        FixedWindow,
        MutexFixedWindow,
        LiveFixedWindow,
        fixed_window
    );
}

/// 5 per any 1 s, 8 slots of 125 ms. One admission at 0.1 s (slot 0); its refund reads
/// 0.1 s, and before it writes the clock reaches 0.2 s (slot 1) and others take the 4 left.
/// The head is then in slot 1, which holds none of the charge: nothing is given back, and
/// the window (1 in slot 0, 4 in slot 1) admits no sixth request.
fn sliding_refund_overtaken_by_a_new_slot<L: Limiter + 'static>(
    name: &str,
    make: impl Fn(Overtaken) -> L,
) {
    let clock = Overtaken::default();
    let limiter = Arc::new(make(clock.clone()));
    clock.set(ms(100));
    assert!(limiter.try_acquire().is_allowed(), "{name}");
    let given = overtaken_refund(
        name,
        &limiter,
        &clock,
        1,
        ms(200),
        4,
        "4 left in the window",
    );
    assert_eq!(given, 0, "{name}: the refund gave back into a later slot");
    assert_eq!(
        admitted(&*limiter, 3),
        0,
        "{name}: the window admitted more than its limit"
    );
    // Slot 0 leaves the window when slot 9 begins (1.125 s); slot 1's 4 still count.
    clock.set(ms(1_130));
    assert_eq!(admitted(&*limiter, 5), 1, "{name}: slot 1 still counts 4");
}

#[test]
fn a_sliding_window_refund_overtaken_by_a_new_slot_gives_nothing() {
    on_each_form!(
        sliding_refund_overtaken_by_a_new_slot,
        SlidingWindow,
        MutexSlidingWindow,
        LiveSlidingWindow,
        sliding_window
    );
}

/// A refund that is not overtaken still gives back in the window it reads (the fix gives up
/// nothing but the overtaken case).
#[test]
fn a_refund_in_its_own_window_still_gives_back() {
    let clock = Overtaken::default();
    let window = FixedWindow::with_clock(five(), clock.clone());
    let twin = MutexFixedWindow::with_clock(five(), clock.clone());
    clock.set(ms(1_200));
    for l in [&window as &dyn Limiter, &twin] {
        assert_eq!(admitted(l, 5), 5);
        assert_eq!(l.refund(2), 2);
        assert_eq!(admitted(l, 5), 2);
    }
}

/// 5 per s, burst 5. The bucket is emptied at 0; a refund of 9 reads 0, and before it writes
/// the clock reaches 100 s and others take the (refilled) 5. The bucket now says "empty until
/// 101 s", more than the capacity past the refund's reading: the refund gives nothing back
/// (moving `tat` back by 9 tokens from there would give back more than the burst and let 9
/// more pass at 100 s).
fn bucket_refund_overtaken_by_a_later_write<L: Limiter + 'static>(
    name: &str,
    make: impl Fn(Overtaken) -> L,
) {
    let clock = Overtaken::default();
    let limiter = Arc::new(make(clock.clone()));
    assert_eq!(admitted(&*limiter, 5), 5, "{name}");
    let given = overtaken_refund(
        name,
        &limiter,
        &clock,
        9,
        Duration::from_secs(100),
        5,
        "refilled",
    );
    assert!(given <= 5, "{name}: a refund of {given}, beyond the burst");
    assert_eq!(
        given, 0,
        "{name}: a refund on a reading behind the bucket's"
    );
    assert_eq!(
        admitted(&*limiter, 10),
        0,
        "{name}: the bucket is empty at 100 s"
    );
    // Not overtaken: the refund gives back as before.
    assert_eq!(limiter.refund(2), 2, "{name}");
    assert_eq!(admitted(&*limiter, 10), 2, "{name}");
}

#[test]
fn a_bucket_refund_on_a_reading_behind_the_bucket_gives_nothing() {
    on_each_form!(
        bucket_refund_overtaken_by_a_later_write,
        TokenBucket,
        MutexTokenBucket,
        LiveTokenBucket,
        token_bucket
    );
}

/// A zero cost reads 0 s; before it decides, the clock reaches 100 s and others empty the
/// bucket (empty until 101 s, more than the capacity past the reading). It still passes,
/// takes nothing, and says so: 0 remaining, full again at 101 s.
fn zero_cost_overtaken(
    name: &str,
    acquire: impl Fn(u64) -> Decision,
    clock: &Overtaken,
    others: impl FnOnce() + Send + 'static,
) -> Decision {
    let at = clock.clone();
    clock.arm(move || {
        at.set(Duration::from_secs(100));
        others();
    });
    let d = acquire(0);
    assert!(clock.fired(), "{name}: the request read the clock");
    assert!(d.is_allowed(), "{name}: a zero cost was denied: {d:?}");
    assert_eq!(d.remaining(), 0, "{name}");
    assert_eq!(d.reset_after(), Duration::from_secs(101), "{name}");
    assert!(
        !acquire(1).is_allowed(),
        "{name}: the zero cost took nothing back"
    );
    d
}

fn zero_cost_overtaken_on<L: Limiter + 'static>(
    name: &str,
    make: impl Fn(Overtaken) -> L,
) -> Decision {
    let clock = Overtaken::default();
    let limiter = Arc::new(make(clock.clone()));
    let others = limiter.clone();
    let d = zero_cost_overtaken(
        name,
        |n| limiter.try_acquire_n(n),
        &clock,
        move || assert_eq!(admitted(&*others, 5), 5),
    );
    // A peek overtaken the same way answers the same.
    let others = limiter.clone();
    clock.set(Duration::ZERO);
    let at = clock.clone();
    clock.arm(move || {
        at.set(Duration::from_secs(200));
        assert_eq!(admitted(&*others, 5), 5);
    });
    let peeked = limiter.peek(0);
    assert!(
        peeked.is_allowed(),
        "{name}: a peek at zero cost was denied: {peeked:?}"
    );
    assert_eq!(peeked.reset_after(), Duration::from_secs(201), "{name}");
    d
}

#[test]
fn a_zero_cost_passes_on_a_bucket_written_with_a_later_reading() {
    let [real, twin, live, group] = on_each_form!(
        zero_cost_overtaken_on,
        TokenBucket,
        MutexTokenBucket,
        LiveTokenBucket,
        token_bucket
    );
    assert_eq!(real, twin, "the twin answers the same, fields included");
    assert_eq!(real, live);
    assert_eq!(real, group);
}

#[test]
fn a_zero_cost_passes_on_a_keyed_bucket_written_with_a_later_reading() {
    for live in [false, true] {
        let clock = Overtaken::default();
        let mut builder = KeyedLimiter::<u32>::builder(Algorithm::TokenBucket, five());
        if live {
            builder = builder.live();
        }
        let map = Arc::new(builder.build_with_clock(clock.clone()).unwrap());
        assert!(map.try_acquire(&7).is_allowed(), "the key exists");
        clock.set(Duration::ZERO);
        let others = map.clone();
        let name = if live {
            "keyed live bucket"
        } else {
            "keyed bucket"
        };
        let _ = zero_cost_overtaken(
            name,
            |n| map.try_acquire_n(&7, n),
            &clock,
            move || {
                // One was taken at 0 and has refilled by 100 s: the key's bucket is full.
                assert_eq!(
                    (0..5)
                        .filter(|_| others.try_acquire(&7).is_allowed())
                        .count(),
                    5
                );
            },
        );
    }
}

/// The keyed map has no refund (and live keyed maps are token buckets only); its windows'
/// requests overtaken by a rollover count against the window they find, so the later window
/// never passes its limit either.
#[test]
fn a_keyed_window_request_overtaken_by_a_rollover_counts_in_the_later_window() {
    for (algorithm, start, later, left) in [
        (Algorithm::FixedWindow, 500, 1_500, 5),
        (Algorithm::SlidingWindow, 100, 200, 4),
    ] {
        let clock = Overtaken::default();
        let map = Arc::new(
            KeyedLimiter::<u32, _>::try_with_clock(algorithm, five(), clock.clone()).unwrap(),
        );
        clock.set(ms(start));
        assert!(map.try_acquire(&1).is_allowed());
        let (others, at) = (map.clone(), clock.clone());
        clock.arm(move || {
            at.set(ms(later));
            let passed = (0..6)
                .filter(|_| others.try_acquire(&1).is_allowed())
                .count();
            assert_eq!(passed, left, "{algorithm:?}");
        });
        let d = map.try_acquire(&1);
        assert!(clock.fired());
        assert!(!d.is_allowed(), "{algorithm:?}: over the limit: {d:?}");
        assert!(!map.try_acquire(&1).is_allowed(), "{algorithm:?}");
    }
}
