//! Every `QuotaError`, with its message: bad input is a typed error, never a panic or a wrap.

use std::time::Duration;

use tollgate::baseline::{MutexSlidingLog, MutexSlidingWindow};
use tollgate::{ManualClock, Quota, QuotaError, SlidingLog, SlidingWindow, MAX_SLOTS};

#[test]
fn zero_limit_period_and_burst_are_refused() {
    assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroLimit));
    assert_eq!(Quota::per_minute(0), Err(QuotaError::ZeroLimit));
    assert_eq!(Quota::per_hour(0), Err(QuotaError::ZeroLimit));
    assert_eq!(
        Quota::try_new(1, Duration::ZERO),
        Err(QuotaError::ZeroPeriod)
    );
    assert_eq!(
        Quota::try_new(0, Duration::ZERO),
        Err(QuotaError::ZeroLimit)
    );
    assert_eq!(
        Quota::per_second(5).unwrap().with_burst(0),
        Err(QuotaError::ZeroBurst)
    );
}

#[test]
fn huge_limits_and_bursts_are_refused() {
    assert_eq!(
        Quota::try_new(u64::MAX, Duration::from_nanos(1)),
        Err(QuotaError::LimitTooLarge {
            limit: u64::MAX,
            max: (1 << 48) - 1
        })
    );
    assert!(matches!(
        Quota::per_second(1 << 48),
        Err(QuotaError::LimitTooLarge { .. })
    ));
    let q = Quota::per_hour(1).unwrap();
    let err = q.with_burst(u64::MAX).unwrap_err();
    let QuotaError::BurstTooLarge { burst, max } = err else {
        panic!("{err:?}")
    };
    assert_eq!(burst, u64::MAX);
    // The max it names is accepted, one more is not.
    assert!(q.with_burst(max).is_ok());
    assert!(q.with_burst(max + 1).is_err());
}

#[test]
fn huge_and_too_fine_periods_are_refused() {
    assert!(matches!(
        Quota::try_new(1, Duration::MAX),
        Err(QuotaError::PeriodTooLong { .. })
    ));
    assert!(matches!(
        Quota::try_new(1, Duration::from_secs(400 * 365 * 86_400)),
        Err(QuotaError::PeriodTooLong { .. })
    ));
    // Longest accepted: the horizon itself (2^58 ns, about 9.1 years).
    assert!(Quota::try_new(1, Duration::from_nanos(1 << 58)).is_ok());
    // 10^12 per ms is far too fine to count in a window word over the horizon.
    assert!(matches!(
        Quota::try_new(1 << 40, Duration::from_millis(1)),
        Err(QuotaError::RateTooHigh { .. })
    ));
    // 100 per ns: a window's count and its number no longer share a word.
    assert!(matches!(
        Quota::try_new(100, Duration::from_nanos(1)),
        Err(QuotaError::RateTooHigh { .. })
    ));
    assert!(Quota::try_new(10, Duration::from_nanos(1)).is_ok());
    // About a billion per second is fine.
    assert!(Quota::per_second(1_000_000_000).is_ok());
}

#[test]
fn slots_outside_their_range_are_refused() {
    let q = Quota::per_second(10).unwrap();
    for slots in [0, MAX_SLOTS + 1, u32::MAX] {
        assert_eq!(
            SlidingWindow::try_with_slots(q, slots, ManualClock::new()).err(),
            Some(QuotaError::InvalidSlots { slots })
        );
        assert!(MutexSlidingWindow::try_with_slots(q, slots, ManualClock::new()).is_err());
    }
    assert!(SlidingWindow::try_with_slots(q, MAX_SLOTS, ManualClock::new()).is_ok());
    // A fast rate in very short slots no longer fits one word.
    let fast = Quota::per_second(1_000_000_000).unwrap();
    assert!(matches!(
        SlidingWindow::try_with_slots(fast, MAX_SLOTS, ManualClock::new()),
        Err(QuotaError::RateTooHigh { .. })
    ));
}

#[test]
// Miri stops the program on an allocation it cannot make instead of failing it, so the typed
// error this test checks cannot be observed there.
#[cfg_attr(
    miri,
    ignore = "miri aborts on a failed allocation instead of returning Err"
)]
fn a_log_too_large_to_allocate_is_refused() {
    let year = Duration::from_secs(365 * 86_400);
    let q = Quota::try_new((1 << 48) - 1, year).unwrap();
    assert_eq!(
        SlidingLog::try_with_clock(q, ManualClock::new()).err(),
        Some(QuotaError::LogTooLarge {
            limit: (1 << 48) - 1
        })
    );
    assert!(MutexSlidingLog::try_with_clock(q, ManualClock::new()).is_err());
}

#[test]
fn every_error_has_a_clear_message() {
    let errors = [
        QuotaError::ZeroLimit,
        QuotaError::ZeroPeriod,
        QuotaError::ZeroBurst,
        QuotaError::LimitTooLarge { limit: 9, max: 8 },
        QuotaError::BurstTooLarge { burst: 9, max: 8 },
        QuotaError::PeriodTooLong {
            period: Duration::from_secs(9),
            max: Duration::from_secs(8),
        },
        QuotaError::RateTooHigh {
            limit: 9,
            period: Duration::from_nanos(1),
        },
        QuotaError::InvalidSlots { slots: 0 },
        QuotaError::LogTooLarge { limit: 9 },
    ];
    let messages: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    for (e, m) in errors.iter().zip(&messages) {
        assert!(m.len() > 20, "{e:?}: {m}");
    }
    assert!(messages[3].contains('9') && messages[3].contains('8'));
    assert!(messages[5].contains("9s"));
    // std::error::Error, so `?` into Box<dyn Error> works.
    let boxed: Box<dyn std::error::Error> = Box::new(QuotaError::ZeroLimit);
    assert_eq!(boxed.to_string(), messages[0]);
}

#[test]
fn accessors_return_what_was_given() {
    let q = Quota::try_new(3, Duration::from_secs(7))
        .unwrap()
        .with_burst(11)
        .unwrap();
    assert_eq!(
        (q.limit(), q.period(), q.burst()),
        (3, Duration::from_secs(7), 11)
    );
    assert_eq!(
        Quota::per_minute(4).unwrap().period(),
        Duration::from_secs(60)
    );
    assert_eq!(Quota::per_hour(4).unwrap().burst(), 4);
}
