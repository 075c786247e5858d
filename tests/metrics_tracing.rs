//! Tracing events of `Metered`. This binary holds one test, so no other test thread can
//! register the event's callsite while no subscriber is set and cache it as uninteresting.
#![cfg(feature = "tracing")]

use tollgate::{Limiter, ManualClock, Metered, Quota, TokenBucket};
use tollgate_test_support::events::Recorder;
use tracing::Level;

#[test]
fn every_denial_is_one_event_and_admissions_are_none() {
    let recorder = Recorder::default();
    let bucket = Metered::named(
        "api",
        TokenBucket::with_clock(Quota::per_second(2).unwrap(), ManualClock::new()),
    );
    tracing::subscriber::with_default(recorder.clone(), || {
        for _ in 0..5 {
            let _ = bucket.try_acquire();
        }
        let _ = bucket.try_acquire_n(3);
    });
    let events = recorder.0.lock().unwrap();
    assert_eq!(events.len(), 4, "three denials and one cost above capacity");
    for (target, level, _) in events.iter() {
        assert_eq!((target.as_str(), *level), ("tollgate", Level::DEBUG));
    }
    let field = |i: usize, name: &str| {
        events[i]
            .2
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let field = |i, name: &str| field(i, name).unwrap_or_else(|| panic!("no field {name}"));
    assert_eq!(field(0, "limiter"), "api");
    assert_eq!(field(0, "cost"), "1");
    assert_eq!(field(0, "remaining"), "0");
    assert_eq!(field(0, "retry_after_ns"), "500000000");
    assert_eq!(field(0, "exceeds_capacity"), "false");
    assert_eq!(field(3, "cost"), "3");
    assert_eq!(field(3, "exceeds_capacity"), "true");
    // No retry: the field is left out, as tracing does with `None`.
    assert!(events[3].2.iter().all(|(n, _)| n != "retry_after_ns"));
}
