//! Quota strings: what parses, what each malformed string is told, and the canonical form.
//! With `--features serde`: quotas and keyed settings from JSON, and their errors.

mod common;

use std::time::Duration;

use common::Rng;

use tollgate::{ParseQuotaErrorKind as Kind, Quota, QuotaError, QuotaPart};

fn q(limit: u64, period: Duration, burst: u64) -> Quota {
    Quota::try_new(limit, period)
        .unwrap()
        .with_burst(burst)
        .unwrap()
}

const S: Duration = Duration::from_secs(1);
const MIN: Duration = Duration::from_secs(60);
const H: Duration = Duration::from_secs(3600);

#[test]
fn the_strings_people_write_parse() {
    let cases: &[(&str, Quota)] = &[
        ("100/s", q(100, S, 100)),
        ("5000/h burst 200", q(5000, H, 200)),
        ("10 per 1m", q(10, MIN, 10)),
        ("10/5m", q(10, 5 * MIN, 10)),
        ("10 / 5 m", q(10, 5 * MIN, 10)),
        ("3 per 7 seconds", q(3, 7 * S, 3)),
        ("60 per minute", q(60, MIN, 60)),
        ("60/min", q(60, MIN, 60)),
        ("2/mins", q(2, MIN, 2)),
        ("1/sec", q(1, S, 1)),
        ("1/secs", q(1, S, 1)),
        ("1 per hour", q(1, H, 1)),
        ("7/2hr", q(7, 2 * H, 7)),
        ("1000/d", q(1000, 24 * H, 1000)),
        ("1000 per day", q(1000, 24 * H, 1000)),
        ("1/w", q(1, 7 * 24 * H, 1)),
        ("50/250ms", q(50, Duration::from_millis(250), 50)),
        ("5/100us", q(5, Duration::from_micros(100), 5)),
        ("5/100µs", q(5, Duration::from_micros(100), 5)),
        ("1/7ns", q(1, Duration::from_nanos(7), 1)),
        ("1_000/S", q(1000, S, 1000)),
        ("  20 PER Second  ", q(20, S, 20)),
        ("100/s, burst 10", q(100, S, 10)),
        ("100/s burst=10", q(100, S, 10)),
        ("100/s burst: 10", q(100, S, 10)),
        ("100/s BURST 1_000", q(100, S, 1000)),
    ];
    for (text, want) in cases {
        assert_eq!(text.parse::<Quota>(), Ok(*want), "{text:?}");
    }
}

#[test]
fn a_malformed_string_says_what_is_wrong_and_where() {
    let cases: &[(&str, Kind, usize)] = &[
        ("", Kind::Empty, 0),
        ("   ", Kind::Empty, 3),
        ("/s", Kind::ExpectedNumber(QuotaPart::Limit), 0),
        ("ten/s", Kind::ExpectedNumber(QuotaPart::Limit), 0),
        ("-1/s", Kind::ExpectedNumber(QuotaPart::Limit), 0),
        ("100", Kind::ExpectedSeparator, 3),
        ("100 s", Kind::ExpectedSeparator, 4),
        ("100 pers", Kind::ExpectedSeparator, 4),
        ("100/", Kind::ExpectedUnit, 4),
        ("100/5", Kind::ExpectedUnit, 5),
        ("100/5.5s", Kind::ExpectedUnit, 5),
        ("100/fortnight", Kind::UnknownUnit, 4),
        ("100/hs", Kind::UnknownUnit, 4),
        ("100/5 parsecs", Kind::UnknownUnit, 6),
        ("100/s and more", Kind::UnexpectedInput, 6),
        ("100/s burst", Kind::ExpectedNumber(QuotaPart::Burst), 11),
        (
            "100/s burst ten",
            Kind::ExpectedNumber(QuotaPart::Burst),
            12,
        ),
        ("100/s burst 5 5", Kind::UnexpectedInput, 14),
        ("100/s bursty 5", Kind::UnexpectedInput, 6),
        (
            "18446744073709551616/s",
            Kind::NumberTooLarge(QuotaPart::Limit),
            0,
        ),
        (
            "1/18446744073709551615w",
            Kind::NumberTooLarge(QuotaPart::Period),
            2,
        ),
        (
            "0/s",
            Kind::Invalid(QuotaPart::Limit, QuotaError::ZeroLimit),
            0,
        ),
        (
            "5/0s",
            Kind::Invalid(QuotaPart::Period, QuotaError::ZeroPeriod),
            2,
        ),
        (
            "5/s burst 0",
            Kind::Invalid(QuotaPart::Burst, QuotaError::ZeroBurst),
            10,
        ),
    ];
    for &(text, kind, position) in cases {
        let err = text.parse::<Quota>().expect_err(text);
        assert_eq!((err.kind(), err.position()), (kind, position), "{text:?}");
        assert!(!err.to_string().is_empty());
    }
}

#[test]
fn refusals_carry_the_quota_error_and_its_message() {
    let err = "1/1000w".parse::<Quota>().unwrap_err();
    assert!(matches!(
        err.kind(),
        Kind::Invalid(QuotaPart::Period, QuotaError::PeriodTooLong { .. })
    ));
    assert!(err
        .to_string()
        .starts_with("the period at byte 2 is refused: the period"));
    let err = "1/s burst 281474976710656".parse::<Quota>().unwrap_err();
    assert!(matches!(
        err.kind(),
        Kind::Invalid(QuotaPart::Burst, QuotaError::BurstTooLarge { .. })
    ));
    let source = std::error::Error::source(&err).expect("the quota error is the source");
    assert!(source.to_string().contains("burst"));
}

#[test]
fn display_is_canonical_and_parses_back() {
    let cases: &[(Quota, &str)] = &[
        (q(100, S, 100), "100/s"),
        (q(5000, H, 200), "5000/h burst 200"),
        (q(10, 5 * MIN, 10), "10/5m"),
        (q(10, 90 * S, 10), "10/90s"),
        (q(7, Duration::from_millis(1500), 7), "7/1500ms"),
        (q(1, Duration::from_nanos(1), 1), "1/ns"),
        (q(1, 14 * 24 * H, 1), "1/2w"),
        (q(3, 36 * H, 3), "3/36h"),
    ];
    for &(quota, text) in cases {
        assert_eq!(quota.to_string(), text);
        assert_eq!(text.parse::<Quota>(), Ok(quota));
    }
}

#[test]
fn every_valid_quota_round_trips_through_its_string() {
    let mut rng = Rng(1);
    let mut checked = 0;
    // Shorter under miri, which runs the same code a thousand times slower.
    let rounds = if cfg!(miri) { 500 } else { 20_000 };
    for _ in 0..rounds {
        let limit = 1 + rng.next() % (1 << (rng.next() % 48));
        let period = Duration::from_nanos(1 + rng.next() % (1 << (rng.next() % 58)));
        let Ok(quota) = Quota::try_new(limit, period) else {
            continue;
        };
        let quota = quota.with_burst(1 + rng.next() % limit).unwrap_or(quota);
        assert_eq!(quota.to_string().parse::<Quota>(), Ok(quota), "{quota:?}");
        checked += 1;
    }
    assert!(
        checked > rounds / 4,
        "only {checked} valid quotas generated"
    );
}

#[test]
fn garbage_never_panics_and_what_parses_is_canonical_again() {
    let pieces = [
        "1",
        "0",
        "99999999999999999999",
        "/",
        " per ",
        "per",
        "s",
        "m",
        "ms",
        "µ",
        "µs",
        "burst",
        " burst ",
        ",",
        "=",
        ":",
        " ",
        "_",
        "h",
        "x",
        "é",
        "\u{0}",
        "5",
        "min",
        "-",
    ];
    let mut rng = Rng(2);
    for _ in 0..if cfg!(miri) { 1_000 } else { 50_000 } {
        let len = rng.next() % 8;
        let s: String = (0..len)
            .map(|_| pieces[(rng.next() % pieces.len() as u64) as usize])
            .collect();
        match s.parse::<Quota>() {
            Ok(quota) => assert_eq!(quota.to_string().parse::<Quota>(), Ok(quota), "{s:?}"),
            Err(err) => {
                assert!(err.position() <= s.len(), "{s:?}: {err:?}");
                assert!(s.is_char_boundary(err.position()), "{s:?}: {err:?}");
            }
        }
    }
}

#[cfg(feature = "serde")]
mod serde {
    use super::*;
    use std::num::NonZeroUsize;
    use tollgate::{Algorithm, KeyedSettings, ManualClock, WhenFull};

    fn err<T: ::serde::de::DeserializeOwned + std::fmt::Debug>(json: &str) -> String {
        serde_json::from_str::<T>(json).unwrap_err().to_string()
    }

    /// Each case's JSON refused as a `T`, with an error that starts with the case's message.
    fn assert_refused<T: ::serde::de::DeserializeOwned + std::fmt::Debug>(cases: &[(&str, &str)]) {
        for (json, want) in cases {
            let got = err::<T>(json);
            assert!(got.starts_with(want), "{json}: got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn a_quota_reads_from_its_string_or_a_map_and_writes_its_string() {
        let want = q(5000, H, 200);
        let from_str: Quota = serde_json::from_str(r#""5000/h burst 200""#).unwrap();
        let from_map: Quota =
            serde_json::from_str(r#"{"limit": 5000, "period": "1 hour", "burst": 200}"#).unwrap();
        let no_burst: Quota = serde_json::from_str(r#"{"period": "m", "limit": 60}"#).unwrap();
        assert_eq!((from_str, from_map), (want, want));
        assert_eq!(no_burst, q(60, MIN, 60));
        assert_eq!(
            serde_json::to_string(&want).unwrap(),
            r#""5000/h burst 200""#
        );
        let back: Quota = serde_json::from_str(&serde_json::to_string(&want).unwrap()).unwrap();
        assert_eq!(back, want);
    }

    #[test]
    fn quota_errors_name_the_field_and_the_reason() {
        let cases = [
            (r#""100/fortnight""#, "unknown time unit at byte 4"),
            (r#"{"limit": 5}"#, "missing field `period`"),
            (r#"{"period": "1s"}"#, "missing field `limit`"),
            (
                r#"{"limit": 0, "period": "1s"}"#,
                "limit: the limit must be at least 1",
            ),
            (
                r#"{"limit": -3, "period": "1s"}"#,
                "limit: invalid value: integer `-3`",
            ),
            (
                r#"{"limit": 5, "period": 1}"#,
                "period: invalid type: integer `1`, expected a duration with its unit",
            ),
            (
                r#"{"limit": 5, "period": "5 s extra"}"#,
                "period: unexpected text at byte 4",
            ),
            (
                r#"{"limit": 5, "period": "0s"}"#,
                "period: the period must be at least 1 ns",
            ),
            (
                r#"{"limit": 5, "period": "1s", "burst": 0}"#,
                "burst: the burst must be at least 1",
            ),
            (
                r#"{"limit": 5, "period": "1s", "brust": 2}"#,
                "unknown field `brust`, expected one of `limit`, `period`, `burst`",
            ),
            (
                r#"{"limit": 5, "limit": 6, "period": "1s"}"#,
                "duplicate field `limit`",
            ),
            ("7", "invalid type: integer `7`, expected a quota string"),
        ];
        assert_refused::<Quota>(&cases);
    }

    #[test]
    fn keyed_settings_read_every_field_and_build_the_map() {
        let s: KeyedSettings = serde_json::from_str(
            r#"{
                "algorithm": "sliding-window",
                "quota": "5/s",
                "plans": {"pro": "50/s", "batch": {"limit": 1000, "period": "1h"}},
                "max_keys": 2,
                "when_full": "admit_untracked"
            }"#,
        )
        .unwrap();
        assert_eq!(s.algorithm, Algorithm::SlidingWindow);
        assert_eq!(s.quota, q(5, S, 5));
        assert_eq!(s.plan("pro"), Some(&q(50, S, 50)));
        assert_eq!(s.plan("batch"), Some(&q(1000, H, 1000)));
        assert_eq!(
            s.max_keys,
            Some((NonZeroUsize::new(2).unwrap(), WhenFull::AdmitUntracked))
        );

        let map = s.build_with_clock::<u32, _>(ManualClock::new()).unwrap();
        let pro = (0..60).filter(|_| {
            map.try_acquire_with(&1, s.plan("pro").unwrap())
                .is_allowed()
        });
        assert_eq!(pro.count(), 50);
        let free = (0..10).filter(|_| map.try_acquire(&2).is_allowed()).count();
        assert_eq!(free, 5);
        // The bound and its policy came through: a third key is judged untracked.
        assert!(map.try_acquire(&3).is_allowed());
        assert_eq!(map.len(), 2);

        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<KeyedSettings>(&json).unwrap(), s);
    }

    #[test]
    fn keyed_settings_default_to_no_plans_and_no_bound() {
        let s: KeyedSettings =
            serde_json::from_str(r#"{"algorithm": "token_bucket", "quota": "1/s"}"#).unwrap();
        assert_eq!(s, KeyedSettings::new(Algorithm::TokenBucket, q(1, S, 1)));
        let s: KeyedSettings = serde_json::from_str(
            r#"{"algorithm": "fixed_window", "quota": "1/s", "max_keys": 10}"#,
        )
        .unwrap();
        assert_eq!(
            s.max_keys,
            Some((NonZeroUsize::new(10).unwrap(), WhenFull::Deny))
        );
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"algorithm":"fixed_window","quota":"1/s","max_keys":10,"when_full":"deny"}"#
        );
    }

    #[test]
    fn live_settings_build_a_map_whose_quotas_change() {
        let s: KeyedSettings = serde_json::from_str(
            r#"{"algorithm": "token_bucket", "quota": "10/s", "plans": {"pro": "100/s"}, "live": true}"#,
        )
        .unwrap();
        assert!(s.live);
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"algorithm":"token_bucket","quota":"10/s","plans":{"pro":"100/s"},"live":true}"#
        );
        let map = s.build_with_clock::<u64, _>(ManualClock::new()).unwrap();
        let pro = s.plan("pro").unwrap();
        assert!(map.try_acquire_n(&1, 10).is_allowed());
        assert!(map.try_acquire_with(&2, pro).is_allowed());
        // A reload: the new settings' quotas applied to the running map, plans by name.
        let reloaded: KeyedSettings = serde_json::from_str(
            r#"{"algorithm": "token_bucket", "quota": "20/s", "plans": {"pro": "5/s"}, "live": true}"#,
        )
        .unwrap();
        map.set_quota(reloaded.quota).unwrap();
        map.set_plan_quota(pro, *reloaded.plan("pro").unwrap())
            .unwrap();
        assert_eq!(
            map.try_acquire(&1).remaining(),
            9,
            "10 of 20 used, then this one"
        );
        assert_eq!(
            map.try_acquire_with(&2, pro).remaining(),
            3,
            "1 of 5 used, then this one"
        );
        // A map built without `live` refuses the same change.
        let fixed = KeyedSettings {
            live: false,
            ..s.clone()
        }
        .build_with_clock::<u64, _>(ManualClock::new())
        .unwrap();
        assert_eq!(
            fixed.set_quota(reloaded.quota),
            Err(tollgate::KeyedError::NotLive)
        );
        // An algorithm with no live keyed form: the error names `live`.
        let sliding = KeyedSettings {
            algorithm: Algorithm::SlidingWindow,
            ..s
        };
        let refused = sliding
            .build_with_clock::<u64, _>(ManualClock::new())
            .unwrap_err();
        assert_eq!(
            (refused.field(), refused.error()),
            ("live", tollgate::KeyedError::NotLive)
        );
        assert_eq!(
            err::<KeyedSettings>(r#"{"algorithm": "token_bucket", "quota": "1/s", "live": 1}"#)
                .split(" at ")
                .next()
                .unwrap(),
            "live: invalid type: integer `1`, expected a boolean"
        );
    }

    #[test]
    fn keyed_settings_errors_name_the_field_and_the_reason() {
        let cases = [
            (r#"{"quota": "1/s"}"#, "missing field `algorithm`"),
            (r#"{"algorithm": "token_bucket"}"#, "missing field `quota`"),
            (
                r#"{"algorithm": "gcra", "quota": "1/s"}"#,
                "algorithm: unknown variant `gcra`, expected one of",
            ),
            (
                r#"{"algorithm": "token_bucket", "quota": "1/parsec"}"#,
                "quota: unknown time unit at byte 2",
            ),
            (
                r#"{"algorithm": "token_bucket", "quota": {"limit": 1, "period": "1s", "burst": 0}}"#,
                "quota: burst: the burst must be at least 1",
            ),
            (
                r#"{"algorithm": "token_bucket", "quota": "1/s", "plans": {"pro": "0/s"}}"#,
                "plans: pro: the limit at byte 0 is refused",
            ),
            (
                r#"{"algorithm": "token_bucket", "quota": "1/s", "plans": ["pro"]}"#,
                "plans: invalid type: sequence, expected a map from plan name to quota",
            ),
            (
                r#"{"algorithm": "token_bucket", "quota": "1/s", "max_keys": 0}"#,
                "max_keys: must be between 1 and",
            ),
            (
                r#"{"algorithm": "token_bucket", "quota": "1/s", "max_keys": -1}"#,
                "max_keys: invalid value: integer `-1`",
            ),
            (
                r#"{"algorithm": "token_bucket", "quota": "1/s", "when_full": "deny"}"#,
                "when_full: has no effect without max_keys",
            ),
            (
                r#"{"algorithm": "token_bucket", "quota": "1/s", "max_keys": 5, "when_full": "drop"}"#,
                "when_full: unknown variant `drop`",
            ),
            (
                r#"{"algorithm": "token_bucket", "quota": "1/s", "max_key": 5}"#,
                "unknown field `max_key`, expected one of",
            ),
        ];
        assert_refused::<KeyedSettings>(&cases);
    }

    #[test]
    fn building_names_the_quota_the_algorithm_refuses() {
        let s: KeyedSettings = serde_json::from_str(
            r#"{"algorithm": "sliding_log", "quota": "5/s",
                "plans": {"ok": "50/s", "huge": "140737488355328/d"}}"#,
        )
        .unwrap();
        let err = s
            .build_with_clock::<u64, _>(ManualClock::new())
            .unwrap_err();
        assert_eq!(err.field(), "plans.huge");
        assert!(matches!(
            err.error(),
            tollgate::KeyedError::Quota(QuotaError::LogTooLarge { .. })
        ));
        assert!(err.to_string().starts_with("plans.huge: a sliding log of"));
        // The same plan is fine for a token bucket.
        let s = KeyedSettings {
            algorithm: Algorithm::TokenBucket,
            ..s
        };
        assert!(s.build_with_clock::<u64, _>(ManualClock::new()).is_ok());
    }
}
