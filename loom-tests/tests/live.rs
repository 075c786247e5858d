//! Loom models of live quota changes (`src/live.rs`):
//! - the parameter cell: a reader racing two changes (so that the second rewrites the slot it
//!   may be reading) only ever gets one whole published parameter set;
//! - the live token bucket: a request racing a change is judged under the old quota on the
//!   old state or under the new quota on the carried state, in every interleaving (its word
//!   says which parameters it is counted in, and a request that finds it counted in the old
//!   ones carries it over itself), and an admission racing two changes from a full bucket
//!   stays counted (the word's whole version is compared, so the request cannot write after
//!   the changes on a word they brought back to the value it loaded: the earlier models
//!   start from a drained bucket, whose `tat` every change moves, and race a denial, which
//!   writes nothing);
//! - a change racing a drain at a later instant (its clock reading older than the drain's)
//!   leaves the bucket drained there: the debt is carried from no earlier than one burst
//!   before the drained word's `tat`, never cut to one burst past the change's reading.
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests --test live
//! ```
//!
//! The planted defects run the real code with one const parameter changed, and must be caught.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{expect_caught, model};
use tollgate::__loom::{CellModel, LiveModel, LivePlant};
use tollgate::{ManualClock, Quota};

const A: [u64; 4] = [1, 1, 1, 1];
const B: [u64; 4] = [2, 2, 2, 2];
const C: [u64; 4] = [3, 3, 3, 3];

/// One reader against a writer that publishes B then C: C goes into the slot that held A,
/// which the reader may be reading.
fn cell_reads_whole_sets(plant: LivePlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let cell = Arc::new(CellModel::new(A, plant));
        let writer = {
            let cell = cell.clone();
            thread::spawn(move || {
                cell.write(B);
                cell.write(C);
            })
        };
        let read = cell.read();
        writer.join().unwrap();
        assert!(
            [A, B, C].contains(&read),
            "a torn parameter set was read: {read:?}"
        );
        assert_eq!(cell.read(), C, "the last set published is the current one");
    }
}

#[test]
fn a_reader_gets_one_whole_published_set() {
    model(
        "live/cell whole sets",
        cell_reads_whole_sets(LivePlant::Sound),
    );
}

#[test]
fn a_reader_that_skips_the_recheck_is_caught() {
    expect_caught(
        "live/cell reader skips recheck",
        "a torn parameter set",
        cell_reads_whole_sets(LivePlant::ReaderSkipsRecheck),
    );
}

#[test]
fn a_writer_without_the_fence_is_caught() {
    expect_caught(
        "live/cell writer skips fence",
        "a torn parameter set",
        cell_reads_whole_sets(LivePlant::WriterSkipsFence),
    );
}

fn quota(limit: u64, period: Duration, burst: u64) -> Quota {
    Quota::try_new(limit, period)
        .and_then(|q| q.with_burst(burst))
        .expect("a model's quota is valid")
}

/// A live bucket model of `q` on a fresh clock, drained (2 taken) at 0, the clock then set
/// to `at`.
fn drained(q: Quota, plant: LivePlant, at: Duration) -> (ManualClock, Arc<LiveModel>) {
    let clock = ManualClock::new();
    let bucket = Arc::new(LiveModel::token_bucket(q, clock.clone(), plant));
    assert!(bucket.acquire(2));
    clock.set(at);
    (clock, bucket)
}

/// A bucket of 10/s (burst 2) drained at 0, read at 50 ms: 1.5 tokens used, none to take.
/// One thread tightens it to 1/s (burst 2): carried, the 1.5 tokens cost 1.5 s, so none to
/// take either. The other asks for one token: whether it comes before or after the change,
/// and in every interleaving, it is denied. Judging the old word under the new quota (1.85
/// tokens) would admit it. Afterwards the carried level is exact.
fn tightened_rate_never_admits_early(plant: LivePlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let (clock, bucket) = drained(
            quota(10, Duration::from_secs(1), 2),
            plant,
            Duration::from_millis(50),
        );
        let requester = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.acquire(1))
        };
        bucket.set_quota(quota(1, Duration::from_secs(1), 2));
        let admitted = requester.join().unwrap();
        assert!(!admitted, "a request racing the change was admitted early");
        // After the change, the carried level: 0.5 token, a whole one at 550 ms.
        clock.set(Duration::from_millis(549));
        assert!(!bucket.acquire(1), "the carried debt was lost");
        clock.set(Duration::from_millis(550));
        assert!(bucket.acquire(1), "the carried debt was overcharged");
    }
}

#[test]
fn a_tightened_rate_never_admits_a_racing_request_early() {
    model(
        "live/bucket tightened rate",
        tightened_rate_never_admits_early(LivePlant::Sound),
    );
}

#[test]
fn a_request_that_ignores_the_word_version_is_caught() {
    expect_caught(
        "live/bucket reader ignores version",
        "admitted early",
        tightened_rate_never_admits_early(LivePlant::ReaderIgnoresVersion),
    );
}

/// A bucket of 1/s (burst 2) drained at 0, read at 1.5 s: half a token used, one to take.
/// One thread loosens it to 10/s (burst 2): carried, the half token costs 50 ms, 1.5 tokens
/// to take. The other asks twice: every serial order admits exactly one, and so does every
/// interleaving; 100 ms later exactly one more token is there.
fn loosened_racing_requests() -> impl Fn() + Send + Sync + 'static {
    || {
        let (clock, bucket) = drained(
            quota(1, Duration::from_secs(1), 2),
            LivePlant::Sound,
            Duration::from_millis(1_500),
        );
        let requester = {
            let bucket = bucket.clone();
            thread::spawn(move || [bucket.acquire(1), bucket.acquire(1)])
        };
        bucket.set_quota(quota(10, Duration::from_secs(1), 2));
        let admitted = requester.join().unwrap();
        let n = admitted.iter().filter(|&&a| a).count();
        assert_eq!(n, 1, "not what a serial order admits: {admitted:?}");
        clock.set(Duration::from_millis(1_600));
        let later = (0..3).filter(|_| bucket.acquire(1)).count();
        assert_eq!(later, 1, "the level was not carried exactly");
    }
}

#[test]
fn a_loosened_quota_admits_what_a_serial_order_admits() {
    model("live/bucket loosened", loosened_racing_requests());
}

/// The bucket of the tightened model, changed twice (to 1/s, then back to 10/s) while a
/// request runs, so that the second change rewrites the parameter slot the request may have
/// read: before, between and after the changes the request is denied (0.5, 0.5 and 0.5 of a
/// token), and so it is in every interleaving.
#[test]
fn a_request_racing_two_changes_is_judged_by_one_of_them() {
    model("live/bucket two changes", || {
        let ten = quota(10, Duration::from_secs(1), 2);
        let (clock, bucket) = drained(ten, LivePlant::Sound, Duration::from_millis(50));
        let requester = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.acquire(1))
        };
        bucket.set_quota(quota(1, Duration::from_secs(1), 2));
        bucket.set_quota(ten);
        assert!(!requester.join().unwrap(), "admitted with half a token");
        // Carried there and back: 150 ms of debt, a whole token free at 100 ms.
        clock.set(Duration::from_millis(99));
        assert!(!bucket.acquire(1), "the carried debt was lost");
        clock.set(Duration::from_millis(100));
        assert!(bucket.acquire(1), "the carried debt was overcharged");
    });
}

/// A full bucket of 10/s (burst 4) at 0: one thread asks for all 4 (admitted under 10/s it
/// writes a `tat` of 400 ms), while the other tightens it to 1/s (burst 1) twice. Every
/// serial order leaves what was admitted counted: admitted before the changes, the 4 tokens
/// carry to a whole used-up token of the new quota, and nothing passes before 1 s; after
/// them, 4 is above the burst and is refused. A request whose compare-exchange succeeds after
/// both changes, on a word the changes left as it loaded it (a full bucket's `tat` does not
/// move), writes 400 ms counted in 10/s ticks under the 1/s quota: 0.4 of a token.
fn an_admission_racing_two_changes_is_counted(
    plant: LivePlant,
) -> impl Fn() + Send + Sync + 'static {
    move || {
        let clock = ManualClock::new();
        let bucket = Arc::new(LiveModel::token_bucket(
            quota(10, Duration::from_secs(1), 4),
            clock.clone(),
            plant,
        ));
        let requester = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.acquire(4))
        };
        let tight = quota(1, Duration::from_secs(1), 1);
        bucket.set_quota(tight);
        bucket.set_quota(tight);
        let admitted = requester.join().unwrap();
        clock.set(Duration::from_millis(999));
        let early = bucket.acquire(1);
        assert!(
            !(admitted && early),
            "an admission of 4 counted as less than a token after two changes"
        );
        if !admitted {
            assert!(early, "a refused request was counted");
        }
    }
}

#[test]
fn an_admission_racing_two_changes_stays_counted() {
    model(
        "live/bucket admission racing two changes",
        an_admission_racing_two_changes_is_counted(LivePlant::Sound),
    );
}

#[test]
fn a_one_bit_version_is_caught() {
    expect_caught(
        "live/bucket one-bit version, admission racing two changes",
        "counted as less than a token",
        an_admission_racing_two_changes_is_counted(LivePlant::OneBitVersion),
    );
}

/// What a change that refilled a bucket drained at a later instant fails with.
const REFILLED: &str = "refilled by a change";

/// A full bucket of 1/s (burst 2) at 0. One thread changes its quota (to the same quota);
/// the other moves the clock to 5 s and takes both tokens, so the word's `tat` is 7 s. The
/// change's one clock reading may be 0 while its carry comes after the drain (a stale load
/// of the clock, or a reading taken before the move): carried from there, the 7 s of debt
/// must be kept whole, not cut to one burst past 0 (a `tat` of 2 s, the bucket full again
/// at 5 s). Whenever the change reads and carries, nothing more passes at 5 s.
fn a_change_racing_a_drain_at_a_later_instant(
    plant: LivePlant,
) -> impl Fn() + Send + Sync + 'static {
    move || {
        let q = quota(1, Duration::from_secs(1), 2);
        let clock = ManualClock::new();
        let bucket = Arc::new(LiveModel::token_bucket(q, clock.clone(), plant));
        let changer = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.set_quota(q))
        };
        clock.set(Duration::from_secs(5));
        assert!(bucket.acquire(2), "a full bucket denied its burst");
        changer.join().unwrap();
        let again = (0..2).filter(|_| bucket.acquire(1)).count();
        assert!(
            again == 0,
            "a bucket drained at 5 s {REFILLED}: {again} more there, with a burst of 2"
        );
    }
}

#[test]
fn a_change_racing_a_drain_at_a_later_instant_leaves_it_drained() {
    model(
        "live/bucket change racing a drain at a later instant",
        a_change_racing_a_drain_at_a_later_instant(LivePlant::Sound),
    );
}

#[test]
fn a_change_carrying_from_its_stale_reading_is_caught() {
    expect_caught(
        "live/bucket change carries from its stale reading",
        REFILLED,
        a_change_racing_a_drain_at_a_later_instant(LivePlant::CarriedFromReading),
    );
}
