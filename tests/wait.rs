//! Waiting for capacity: exact waits, jitter, deadlines, errors and cancel safety, on the
//! manual clock (blocking and async) and on tokio's paused clock (feature `tokio`).

mod common;

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{all, ms};
use tollgate::{
    Clock, Limiter, ManualClock, Pacing, Quota, TokenBucket, UntilReady, Wait, WaitError,
};

/// A bucket of one token per 100 ms, at most one at a time, on a fresh clock.
fn one_per_100ms() -> (ManualClock, TokenBucket<ManualClock>) {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10).unwrap().with_burst(1).unwrap();
    (clock.clone(), TokenBucket::with_clock(quota, clock))
}

/// Polls a future to completion on the calling thread (every sleep here is ready at once).
fn run<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
    }
    panic!("the future never completed");
}

#[test]
fn a_paced_client_waits_exactly_its_interval_each_time() {
    let (clock, api) = one_per_100ms();
    for i in 0..20u64 {
        let d = api
            .blocking_until_ready_with(1, &clock, Pacing::new())
            .unwrap();
        assert!(d.is_allowed());
        assert_eq!(clock.now(), ms(100 * i));
    }
}

#[test]
fn every_limiter_is_waited_for_exactly_its_retry_after() {
    let quota = Quota::try_new(4, ms(1000)).unwrap();
    for (s, clock) in all(quota) {
        clock.advance(ms(130));
        for _ in 0..4 {
            let _ = s.limiter.try_acquire();
        }
        let denial = s.limiter.try_acquire_n(2);
        assert!(!denial.is_allowed(), "{}", s.name);
        let retry = denial.retry_after().unwrap();
        let before = clock.now();
        let d = s
            .limiter
            .blocking_until_ready_with(2, &clock, Pacing::new())
            .unwrap();
        assert!(d.is_allowed(), "{}", s.name);
        assert_eq!(
            clock.now() - before,
            retry,
            "{}: one sleep of retry_after",
            s.name
        );

        // The same through the future on the manual clock.
        let _ = s.limiter.try_acquire_n(d.remaining());
        let denial = s.limiter.try_acquire();
        let before = clock.now();
        let d = run(s.limiter.until_ready_with(1, clock.clone())).unwrap();
        assert!(d.is_allowed(), "{}", s.name);
        assert_eq!(
            Some(clock.now() - before),
            denial.retry_after(),
            "{}",
            s.name
        );
    }
}

#[test]
fn a_cost_above_capacity_fails_at_once_and_charges_nothing() {
    let quota = Quota::per_second(5).unwrap();
    for (s, clock) in all(quota) {
        let err = s
            .limiter
            .blocking_until_ready_with(6, &clock, Pacing::new())
            .unwrap_err();
        assert!(matches!(err, WaitError::ExceedsCapacity(_)), "{}", s.name);
        assert_eq!(err.decision().remaining(), 5, "{}", s.name);
        let err = run(s.limiter.until_ready_with(6, clock.clone())).unwrap_err();
        assert!(matches!(err, WaitError::ExceedsCapacity(_)), "{}", s.name);
        assert_eq!(clock.now(), Duration::ZERO, "{}: no sleep", s.name);
        assert_eq!(s.limiter.try_acquire_n(5).remaining(), 0, "{}", s.name);
    }
}

#[test]
fn a_request_past_the_horizon_never_passes() {
    // Made at zero, then read past its horizon (a limiter counts from its first reading).
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(Quota::per_second(1).unwrap(), clock.clone());
    clock.set(Duration::from_nanos(u64::MAX));
    let _ = bucket.try_acquire();
    let err = bucket
        .blocking_until_ready_with(1, &clock, Pacing::new())
        .unwrap_err();
    assert!(matches!(err, WaitError::NeverPasses(_)));
}

#[test]
fn the_deadline_gives_up_without_sleeping_and_admits_within_it() {
    let (clock, bucket) = one_per_100ms();
    let _ = bucket.try_acquire();
    let tight = Pacing::new().deadline(ms(99));
    let err = bucket
        .blocking_until_ready_with(1, &clock, tight)
        .unwrap_err();
    assert!(matches!(err, WaitError::DeadlineExceeded(_)));
    assert_eq!(err.decision().retry_after(), Some(ms(100)));
    assert_eq!(clock.now(), Duration::ZERO);
    let err = run(bucket.until_ready_with(1, clock.clone()).pacing(tight)).unwrap_err();
    assert!(matches!(err, WaitError::DeadlineExceeded(_)));

    let enough = Pacing::new().deadline(ms(100));
    assert!(bucket.blocking_until_ready_with(1, &clock, enough).is_ok());
    assert_eq!(clock.now(), ms(100));
}

#[test]
fn the_deadline_counts_every_sleep_of_one_wait() {
    // 1 token per 100 ms; someone else takes each token just as it comes, twice.
    let (clock, bucket) = one_per_100ms();
    let _ = bucket.try_acquire();
    struct Rival<'a> {
        clock: &'a ManualClock,
        bucket: &'a TokenBucket<ManualClock>,
        steals: std::cell::Cell<u32>,
    }
    impl tollgate::Sleep for Rival<'_> {
        fn sleep(&self, d: Duration) {
            self.clock.advance(d);
            if self.steals.get() > 0 {
                self.steals.set(self.steals.get() - 1);
                assert!(self.bucket.try_acquire().is_allowed());
            }
        }
        fn elapsed(&self) -> Duration {
            self.clock.now()
        }
    }
    let rival = Rival {
        clock: &clock,
        bucket: &bucket,
        steals: 2.into(),
    };
    let err = bucket
        .blocking_until_ready_with(1, &rival, Pacing::new().deadline(ms(250)))
        .unwrap_err();
    // Slept 100 and 100 (stolen both times); a third 100 would end at 300 > 250.
    assert!(matches!(err, WaitError::DeadlineExceeded(_)));
    assert_eq!(clock.now(), ms(200));

    rival.steals.set(2);
    let d = bucket
        .blocking_until_ready_with(1, &rival, Pacing::new().deadline(ms(300)))
        .unwrap();
    assert!(d.is_allowed());
    assert_eq!(clock.now(), ms(500)); // 200 + three sleeps of 100, the first two stolen
}

#[test]
fn jitter_waits_at_least_retry_after_and_at_most_the_bound_more() {
    let (clock, bucket) = one_per_100ms();
    let pacing = Pacing::new().jitter(ms(30));
    let mut waits = Vec::new();
    let _ = bucket.try_acquire();
    for _ in 0..50 {
        let before = clock.now();
        assert!(bucket.blocking_until_ready_with(1, &clock, pacing).is_ok());
        waits.push(clock.now() - before);
    }
    // Each wait starts right after an admission: the bucket is empty, next token in 100 ms.
    assert!(
        waits.iter().all(|w| *w >= ms(100) && *w <= ms(130)),
        "{waits:?}"
    );
    assert!(waits.iter().any(|w| *w != waits[0]), "jitter varies");
}

/// A timer whose sleeps never complete: the future stays parked in its first sleep.
struct Never;
impl tollgate::Timer for Never {
    type Sleep = std::future::Pending<()>;
    fn sleep(&self, _: Duration) -> Self::Sleep {
        std::future::pending()
    }
}

#[test]
fn dropping_the_future_at_any_point_charges_nothing() {
    let quota = Quota::try_new(3, ms(1000)).unwrap();
    for (s, clock) in all(quota) {
        for _ in 0..3 {
            let _ = s.limiter.try_acquire();
        }
        let control = s.limiter.try_acquire();
        // Dropped before its first poll.
        drop(s.limiter.until_ready_with(1, Never));
        // Dropped while asleep, after a denial.
        {
            let mut f: UntilReady<'_, _, Never> = s.limiter.until_ready_with(1, Never);
            let mut cx = Context::from_waker(Waker::noop());
            assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        }
        assert_eq!(s.limiter.try_acquire(), control, "{}", s.name);
        clock.advance(control.retry_after().unwrap());
        assert!(s.limiter.try_acquire().is_allowed(), "{}", s.name);
    }
}

#[test]
fn a_zero_cost_is_ready_at_once() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(Quota::per_second(1).unwrap(), clock.clone());
    let _ = bucket.try_acquire();
    assert!(bucket
        .blocking_until_ready_with(0, &clock, Pacing::new())
        .unwrap()
        .is_allowed());
    assert_eq!(clock.now(), Duration::ZERO);
}

#[cfg(feature = "tokio")]
mod on_tokio {
    use super::*;
    use tokio::time::Instant;

    /// The limiter's clock is tokio's: paused, it moves only when every task sleeps.
    struct TokioClock(Instant);
    impl Clock for TokioClock {
        fn now_nanos(&self) -> u64 {
            self.0.elapsed().as_nanos() as u64
        }
    }

    fn paced(per_second: u64) -> TokenBucket<TokioClock> {
        TokenBucket::with_clock(
            Quota::per_second(per_second)
                .unwrap()
                .with_burst(1)
                .unwrap(),
            TokioClock(Instant::now()),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn until_ready_sleeps_exactly_retry_after_on_the_paused_clock() {
        let api = paced(10);
        let start = Instant::now();
        for i in 0..10u64 {
            let d = api.until_ready(1).await.unwrap();
            assert!(d.is_allowed());
            assert_eq!(start.elapsed(), ms(100 * i));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn two_waiters_share_the_rate() {
        let api = paced(10);
        let start = Instant::now();
        let (a, b) = tokio::join!(
            async {
                for _ in 0..5 {
                    assert!(api.until_ready(1).await.is_ok());
                }
            },
            async {
                for _ in 0..5 {
                    assert!(api.until_ready(1).await.is_ok());
                }
            }
        );
        let _ = (a, b);
        // Ten admissions at 10/s with no burst: the tenth at 900 ms, not before.
        assert_eq!(start.elapsed(), ms(900));
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_that_drops_the_wait_charges_nothing() {
        let api = paced(10);
        let _ = api.try_acquire();
        let start = Instant::now();
        let waited = tokio::time::timeout(ms(50), api.until_ready(1)).await;
        assert!(waited.is_err(), "timed out while asleep");
        assert_eq!(start.elapsed(), ms(50));
        tokio::time::sleep(ms(50)).await;
        // The token that came at 100 ms is still there: the dropped wait took nothing.
        assert!(api.try_acquire().is_allowed());
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_is_measured_on_tokio_time() {
        let api = paced(10);
        let _ = api.try_acquire();
        let err = api
            .until_ready(1)
            .pacing(Pacing::new().deadline(ms(99)))
            .await
            .unwrap_err();
        assert!(matches!(err, WaitError::DeadlineExceeded(_)));
        let start = Instant::now();
        let d = api
            .until_ready(1)
            .pacing(Pacing::new().deadline(ms(100)).jitter(ms(40)))
            .await
            .unwrap();
        assert!(d.is_allowed());
        assert_eq!(start.elapsed(), ms(100), "jitter is cut at the deadline");
    }
}
