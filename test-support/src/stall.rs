//! [`StallClock`]: a manual clock that can hold a thread right after one of its readings, so a
//! test can make a request wait, reading in hand, while other requests move the limiter on:
//! the stall of a thread descheduled between its clock read and its write, made on purpose.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, ThreadId};
use std::time::Duration;

use tollgate::{Clock, ManualClock};

/// A [`ManualClock`] whose readings can hold one thread (see [`StallClock::hold`]). Clones
/// share the time and the hold.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Clock;
/// use tollgate_test_support::StallClock;
///
/// let clock = StallClock::new();
/// let reader = clock.clone();
/// let held = std::thread::spawn(move || {
///     reader.hold(1); // this thread's next reading waits for `release`
///     reader.now_nanos()
/// });
/// clock.wait_held();
/// clock.advance(Duration::from_secs(1));
/// clock.release();
/// assert_eq!(held.join().unwrap(), 0); // read before the advance, returned after it
/// assert_eq!(clock.now_nanos(), 1_000_000_000);
/// ```
#[derive(Clone, Default)]
pub struct StallClock {
    // In an `Arc`: the core crate's `ManualClock` is `Clone` only with its `std` feature.
    time: Arc<ManualClock>,
    hold: Arc<(Mutex<Hold>, Condvar)>,
}

#[derive(Default)]
struct Hold {
    /// The thread to hold and how many of its readings to let through first.
    thread: Option<(ThreadId, usize)>,
    held: bool,
    released: bool,
}

impl StallClock {
    /// A clock at 0, holding no thread.
    pub fn new() -> Self {
        StallClock::default()
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.time.advance(by);
    }

    /// Sets the time to `to` since 0.
    pub fn set(&self, to: Duration) {
        self.time.set(to);
    }

    /// The calling thread's `nth` reading from now on (1: the next) is held: taken, then
    /// returned only once another thread calls [`StallClock::release`].
    pub fn hold(&self, nth: usize) {
        assert!(nth >= 1, "readings count from 1");
        let mut h = self.lock();
        *h = Hold {
            thread: Some((thread::current().id(), nth - 1)),
            held: false,
            released: false,
        };
    }

    /// Waits until the held thread has taken its reading and stopped.
    ///
    /// # Panics
    /// If it has not within 60 s of real time (it never reached that reading): a test that
    /// expected the stall fails rather than hangs.
    pub fn wait_held(&self) {
        let (_, cv) = &*self.hold;
        let h = self.lock();
        let (h, waited) = cv
            .wait_timeout_while(h, Duration::from_secs(60), |h| !h.held)
            .unwrap();
        assert!(
            !waited.timed_out() || h.held,
            "the held thread never took the reading it was to stop at"
        );
    }

    /// Lets the held thread return its reading.
    pub fn release(&self) {
        let (_, cv) = &*self.hold;
        self.lock().released = true;
        cv.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Hold> {
        self.hold.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Clock for StallClock {
    fn now_nanos(&self) -> u64 {
        let reading = self.time.now_nanos();
        let (_, cv) = &*self.hold;
        let mut h = self.lock();
        match &mut h.thread {
            Some((id, 0)) if *id == thread::current().id() => {
                h.thread = None;
                h.held = true;
                cv.notify_all();
                drop(cv.wait_while(h, |h| !h.released).unwrap());
            }
            Some((id, before)) if *id == thread::current().id() => *before -= 1,
            _ => {}
        }
        reading
    }
}
