//! Loom models of live quotas on the keyed map (`src/keyed/live.rs`): one key's token bucket
//! slot and its plan, the word carrying the version of the parameters its `tat` is counted in.
//!
//! Each model races calls on the key (requests, quota changes, an eviction) at a frozen
//! instant, then runs probes alone, and asserts that everything each call returned (the
//! racers and the probes) is what *some serial order* of the same calls returns on the
//! reference: one [`LiveTokenBucket`](tollgate::LiveTokenBucket) with every change applied to
//! it, and an eviction that succeeds exactly when that bucket is full. For a request racing a
//! change this says: it is judged under the old quota on the old state or under the new
//! quota on the carried state, and what later requests get agrees with the one it was. It
//! also says that no admission is lost and nothing is admitted over what the quotas allow.
//! The reference outcomes are computed once per model by running every serial order alone;
//! the values worked by hand are in each model's comment.
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true \
//!   cargo test --release -p loom-tests --test keyed_live -- --nocapture
//! ```
//!
//! The planted defects run the real code with one const parameter changed, and must be caught.
#![cfg(tollgate_loom)]

use std::sync::Mutex;
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{expect_caught, model};
use tollgate::__loom::{KeyedLiveModel, KeyedLivePlant, LiveModel, LivePlant};
use tollgate::{ManualClock, Quota};

/// A quota as plain numbers, so that the models' calls can be `static`.
#[derive(Clone, Copy, Debug)]
struct Q {
    limit: u64,
    period_ms: u64,
    burst: u64,
}

impl Q {
    fn quota(self) -> Quota {
        Quota::try_new(self.limit, Duration::from_millis(self.period_ms))
            .and_then(|q| q.with_burst(self.burst))
            .expect("a model's quota is valid")
    }
}

/// `limit` per second, with a burst of `burst`.
const fn per_second(limit: u64, burst: u64) -> Q {
    Q {
        limit,
        period_ms: 1_000,
        burst,
    }
}

/// One call on the key.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// A request of cost `n`.
    Acquire(u64),
    /// A quota change of the key's plan.
    Change(Q),
    /// An eviction attempt.
    Evict,
    /// Sets the clock (in ms). Only before or after the race: a racing request reads the
    /// clock once, so a clock moving under it is not one serial step.
    Clock(u64),
}

/// What a call returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Out {
    /// `Some(admitted)`, or `None`: the key was found evicted.
    Acquired(Option<bool>),
    /// The change returned.
    Changed,
    /// Whether the eviction marked the key.
    Evicted(bool),
    /// The clock was set.
    Clocked,
}

/// Everything a model's calls returned: the setup's, each racing thread's, the probes'.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Outcome {
    setup: Vec<Out>,
    threads: Vec<Vec<Out>>,
    probes: Vec<Out>,
}

/// A model: the key's plan starts at `quota`, fresh, on a clock at 0; `setup` runs alone;
/// `threads` race (the first on the model's thread, the others spawned); `probes` run alone
/// after all joined.
#[derive(Clone, Copy, Debug)]
struct Scenario {
    quota: Q,
    setup: &'static [Op],
    threads: &'static [&'static [Op]],
    probes: &'static [Op],
}

fn call(key: &KeyedLiveModel, clock: &ManualClock, op: Op) -> Out {
    match op {
        Op::Acquire(n) => Out::Acquired(key.acquire(n)),
        Op::Change(q) => {
            key.set_quota(q.quota());
            Out::Changed
        }
        Op::Evict => Out::Evicted(key.evict()),
        Op::Clock(ms) => {
            clock.set(Duration::from_millis(ms));
            Out::Clocked
        }
    }
}

/// The reference's answers to `ops` run one after another: a live token bucket of `start`
/// with every change applied to it; an eviction succeeds when the bucket is full (then every
/// later request finds the key evicted).
fn serial(start: Q, ops: &[Op]) -> Vec<Out> {
    let clock = ManualClock::new();
    let bucket = LiveModel::token_bucket(start.quota(), clock.clone(), LivePlant::Sound);
    let mut burst = start.burst;
    let mut evicted = false;
    let mut outs = Vec::with_capacity(ops.len());
    for (i, &op) in ops.iter().enumerate() {
        outs.push(match op {
            Op::Acquire(n) => Out::Acquired((!evicted).then(|| bucket.acquire(n))),
            Op::Change(q) => {
                bucket.set_quota(q.quota());
                burst = q.burst;
                Out::Changed
            }
            Op::Evict => {
                let full = !evicted && full_after(start, &ops[..i], burst);
                evicted |= full;
                Out::Evicted(full)
            }
            Op::Clock(ms) => {
                clock.set(Duration::from_millis(ms));
                Out::Clocked
            }
        });
    }
    outs
}

/// Whether the reference bucket is full after `ops`: a token bucket admits its whole burst
/// exactly when it is full.
fn full_after(start: Q, ops: &[Op], burst: u64) -> bool {
    let mut then = ops.to_vec();
    then.push(Op::Acquire(burst));
    serial(start, &then).last() == Some(&Out::Acquired(Some(true)))
}

/// Every interleaving of the threads' calls, each thread's kept in program order, as
/// `(thread, call)` indices.
fn orders(threads: &[&[Op]]) -> Vec<Vec<(usize, usize)>> {
    fn merge(
        threads: &[&[Op]],
        next: &mut [usize],
        order: &mut Vec<(usize, usize)>,
        all: &mut Vec<Vec<(usize, usize)>>,
    ) {
        let mut done = true;
        for t in 0..threads.len() {
            if next[t] < threads[t].len() {
                done = false;
                order.push((t, next[t]));
                next[t] += 1;
                merge(threads, next, order, all);
                next[t] -= 1;
                order.pop();
            }
        }
        if done {
            all.push(order.clone());
        }
    }
    let mut all = Vec::new();
    merge(
        threads,
        &mut vec![0; threads.len()],
        &mut Vec::new(),
        &mut all,
    );
    all
}

/// The outcomes of every serial order of the scenario's racing calls on the reference.
fn serial_outcomes(s: Scenario) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for order in orders(s.threads) {
        let mut ops = s.setup.to_vec();
        ops.extend(order.iter().map(|&(t, i)| s.threads[t][i]));
        ops.extend_from_slice(s.probes);
        let outs = serial(s.quota, &ops);
        let (setup, rest) = outs.split_at(s.setup.len());
        let (raced, probes) = rest.split_at(order.len());
        let mut threads: Vec<Vec<Out>> = s.threads.iter().map(|_| Vec::new()).collect();
        for (&(t, _), &out) in order.iter().zip(raced) {
            threads[t].push(out);
        }
        let outcome = Outcome {
            setup: setup.to_vec(),
            threads,
            probes: probes.to_vec(),
        };
        if !outcomes.contains(&outcome) {
            outcomes.push(outcome);
        }
    }
    outcomes
}

/// The message a model fails with when the key answered what no serial order answers.
const NOT_SERIAL: &str = "no serial order of the calls answers";

/// The model body: the reference's serial outcomes are worked out first (the reference's
/// atomics are loom's, so in a one-thread loom run of its own), then every interleaving of
/// the racing calls on the key under `plant` must give one of them.
fn race(s: Scenario, plant: KeyedLivePlant) -> impl Fn() + Send + Sync + 'static {
    assert!(
        s.threads
            .iter()
            .all(|t| t.iter().all(|op| !matches!(op, Op::Clock(_)))),
        "racing threads do not move the clock"
    );
    let expected = std::sync::Arc::new(Mutex::new(Vec::new()));
    let slot = expected.clone();
    let mut once = loom::model::Builder::new();
    once.max_branches = 100_000;
    once.check(move || *slot.lock().unwrap() = serial_outcomes(s));
    let expected = std::mem::take(&mut *expected.lock().unwrap());
    move || {
        let clock = ManualClock::new();
        let key = Arc::new(KeyedLiveModel::new(s.quota.quota(), clock.clone(), plant));
        let setup: Vec<Out> = s.setup.iter().map(|&op| call(&key, &clock, op)).collect();
        let spawned: Vec<_> = s.threads[1..]
            .iter()
            .map(|&ops| {
                let (key, clock) = (key.clone(), clock.clone());
                thread::spawn(move || -> Vec<Out> {
                    ops.iter().map(|&op| call(&key, &clock, op)).collect()
                })
            })
            .collect();
        let mut threads = vec![s.threads[0]
            .iter()
            .map(|&op| call(&key, &clock, op))
            .collect::<Vec<_>>()];
        threads.extend(spawned.into_iter().map(|h| h.join().expect("racer")));
        let probes = s.probes.iter().map(|&op| call(&key, &clock, op)).collect();
        let got = Outcome {
            setup,
            threads,
            probes,
        };
        assert!(
            expected.contains(&got),
            "{NOT_SERIAL}: {got:?}; serial orders give {expected:?}"
        );
    }
}

// 1. A request racing one change.

/// 10/s (burst 2) drained at 0, read at 50 ms: 1.5 tokens used. One thread tightens the plan
/// to 1/s (burst 2): carried, the 1.5 tokens cost 1.5 s. The other asks for a token: under
/// the old quota on the old state (0.5 token) or the new one on the carried state (0.5), it is
/// denied; the carried level then gives a token at 550 ms, not at 549 ms. A request that
/// judges the word counted in the old quota without carrying it finds 1.85 tokens (and so do
/// the probes: a denial carries nothing).
const TIGHTENED: Scenario = Scenario {
    quota: per_second(10, 2),
    setup: &[Op::Acquire(2), Op::Clock(50)],
    threads: &[&[Op::Change(per_second(1, 2))], &[Op::Acquire(1)]],
    probes: &[
        Op::Clock(549),
        Op::Acquire(1),
        Op::Clock(550),
        Op::Acquire(1),
    ],
};

/// 1/s (burst 2) drained at 0, read at 500 ms: 1.5 tokens used. One thread loosens it to 10/s
/// (burst 4): carried, the 1.5 tokens cost 150 ms, 2.5 of 4 left. The other asks for a
/// token: before the change it is denied (0.5 token) and three more requests at once get two;
/// after it, it is admitted and the three get one. A word written back without its version
/// is carried again by the next request, which finds the debt shrunk tenfold once more.
const LOOSENED: Scenario = Scenario {
    quota: per_second(1, 2),
    setup: &[Op::Acquire(2), Op::Clock(500)],
    threads: &[&[Op::Change(per_second(10, 4))], &[Op::Acquire(1)]],
    probes: &[Op::Acquire(1), Op::Acquire(1), Op::Acquire(1)],
};

// 2. A request racing two changes.

/// 1/s (burst 2), one token taken at 0, read at 500 ms: half a token used. One thread changes
/// the plan to 10/s (burst 1), then back to 1/s (burst 2); the second change overwrites the
/// slot of the first quota, which the request may have read before loading the word, so the
/// second change's walk must have carried the word and the request must load it again. The
/// request is admitted before the changes (1.5 used, carried: 1 of 1, then 1 of 2: one more
/// token), denied between them (0.5 of 1 used; carried back: 0.5 of 2, one more token), admitted after them (0.5 of 2 used: no more token).
const TWO_CHANGES: Scenario = Scenario {
    quota: per_second(1, 2),
    setup: &[Op::Acquire(1), Op::Clock(500)],
    threads: &[
        &[Op::Change(per_second(10, 1)), Op::Change(per_second(1, 2))],
        &[Op::Acquire(1)],
    ],
    probes: &[Op::Acquire(1), Op::Acquire(1)],
};

/// 1/s (burst 2), one token taken at 0, read at 500 ms: half a token used. One thread changes
/// the plan to 10/s (burst 2), then back to 1/s (burst 2), while the other asks for a token:
/// 0.5 of 2 used before, between and after the changes, so every serial order admits it
/// (1.5 used after, under either quota), and none has a token for a second request until
/// the clock reaches 1 s. A request that loaded the word before the changes and read the
/// parameters after both must load the word again, not refuse.
const TWO_CHANGES_ADMITTED: Scenario = Scenario {
    quota: per_second(1, 2),
    setup: &[Op::Acquire(1), Op::Clock(500)],
    threads: &[
        &[Op::Change(per_second(10, 2)), Op::Change(per_second(1, 2))],
        &[Op::Acquire(1)],
    ],
    probes: &[
        Op::Acquire(1),
        Op::Clock(1_000),
        Op::Acquire(1),
        Op::Acquire(1),
    ],
};

// 3. An idle key through two changes.

/// 10/s (burst 2) drained at 0, read at 50 ms; changed to 1/s (burst 2) and back to 10/s
/// (burst 2) by one thread, while the other asks for a token: 0.5 token before, between and
/// after the changes, so it is denied and writes nothing: the key stays idle, and only the
/// walks carry its word. Carried there and back: 150 ms of debt, a whole token free at
/// 100 ms, not at 99 ms. A change that publishes without its walk leaves a word two versions
/// old, which no request can read right.
const IDLE_TWO_CHANGES: Scenario = Scenario {
    quota: per_second(10, 2),
    setup: &[Op::Acquire(2), Op::Clock(50)],
    threads: &[
        &[Op::Change(per_second(1, 2)), Op::Change(per_second(10, 2))],
        &[Op::Acquire(1)],
    ],
    probes: &[
        Op::Clock(99),
        Op::Acquire(1),
        Op::Clock(100),
        Op::Acquire(1),
    ],
};

// 4. Eviction racing a change and a request.

/// 2/s (burst 2), one token taken at 0, read at 1 s: full again, so the key may be evicted.
/// One thread sweeps, one tightens the plan to 1/s (burst 1), one asks for a token. Evicted
/// first, the key is gone for the request (and the probes); otherwise the request is
/// admitted under either quota, the sweep finds the key used and keeps it, and the probes
/// see the admission: the next request is denied, and the key is not evicted.
const EVICTION: Scenario = Scenario {
    quota: per_second(2, 2),
    setup: &[Op::Acquire(1), Op::Clock(1_000)],
    threads: &[
        &[Op::Evict],
        &[Op::Change(per_second(1, 1))],
        &[Op::Acquire(1)],
    ],
    probes: &[Op::Acquire(1), Op::Evict, Op::Acquire(1)],
};

/// 10/s (burst 2) drained at 0, tightened to 1/s (burst 2) at 50 ms, read at 300 ms, the word
/// not carried yet: counted in the old quota it is full again (its `tat` is 200 ms), carried
/// it has 1.25 of 2 tokens used (`tat` 1.55 s): not full, so it must not be evicted. One
/// thread sweeps, one loosens the plan to 10/s (burst 4: 1.25 of 4 used), one asks for a
/// token: denied before the loosening (0.75 token), admitted after it. The sweep keeps the
/// key in every order, and the probes see the carried level: with the request admitted,
/// 1.75 tokens left (one more admitted), else 2.75 (two more).
const EVICTION_UNDER_THE_CURRENT_QUOTA: Scenario = Scenario {
    quota: per_second(10, 2),
    setup: &[
        Op::Acquire(2),
        Op::Clock(50),
        Op::Change(per_second(1, 2)),
        Op::Clock(300),
    ],
    threads: &[
        &[Op::Evict],
        &[Op::Change(per_second(10, 4))],
        &[Op::Acquire(1)],
    ],
    probes: &[Op::Evict, Op::Acquire(1), Op::Acquire(1), Op::Acquire(1)],
};

// The sound protocol through every scenario.

/// Each scenario on the sound protocol: every call answers as in some serial order.
#[test]
fn the_sound_protocol_answers_as_some_serial_order() {
    for (name, s) in [
        ("a request racing a tightening", TIGHTENED),
        ("a request racing a loosening", LOOSENED),
        ("a request racing two changes", TWO_CHANGES),
        (
            "a request within every quota racing two changes",
            TWO_CHANGES_ADMITTED,
        ),
        ("an idle key through two changes", IDLE_TWO_CHANGES),
        ("an eviction racing a change and a request", EVICTION),
        (
            "an eviction racing a change, under the current quota",
            EVICTION_UNDER_THE_CURRENT_QUOTA,
        ),
    ] {
        model(
            &format!("keyed live: {name}"),
            race(s, KeyedLivePlant::Sound),
        );
    }
}

// The planted defects, each through every model that catches it.

/// The crate's debug assertion on a word two versions older than the cell, which the sound
/// protocol never reaches (the loom run has debug assertions on).
const TWO_VERSIONS_OLD: &str = "a word counted in version 0 read at 2";

/// Planted: a request decides a word counted in the previous version without carrying it:
/// the tightened bucket admits early, the loosened one refuses what it has, the idle key's
/// level is off after the changes, and so is the level the evicted-or-not key is left at.
#[test]
fn a_request_that_skips_the_carry_is_caught() {
    for (name, s) in [
        ("a tightening", TIGHTENED),
        ("a loosening", LOOSENED),
        ("an idle key", IDLE_TWO_CHANGES),
        ("an eviction", EVICTION_UNDER_THE_CURRENT_QUOTA),
    ] {
        expect_caught(
            &format!("keyed live mutant: requester skips the carry ({name})"),
            NOT_SERIAL,
            race(s, KeyedLivePlant::RequesterSkipsCarry),
        );
    }
}

/// Planted: a change publishes without carrying the plan's words first: after two changes a
/// request finds the word counted two versions back.
#[test]
fn a_change_that_skips_the_walk_is_caught() {
    for (name, s) in [
        ("two changes", TWO_CHANGES),
        ("an idle key", IDLE_TWO_CHANGES),
        ("an eviction", EVICTION_UNDER_THE_CURRENT_QUOTA),
    ] {
        expect_caught(
            &format!("keyed live mutant: change skips the walk ({name})"),
            TWO_VERSIONS_OLD,
            race(s, KeyedLivePlant::ChangeSkipsWalk),
        );
    }
}

/// Planted: requests write epoch 0 whatever version they decided under: the next request
/// carries the word again (the loosened debt shrinks twice), and after a second change the
/// word reads as two versions old.
#[test]
fn a_word_without_its_version_is_caught() {
    expect_caught(
        "keyed live mutant: word without epoch (a loosening)",
        NOT_SERIAL,
        race(LOOSENED, KeyedLivePlant::WordWithoutEpoch),
    );
    for (name, s) in [
        ("two changes", TWO_CHANGES),
        ("an eviction", EVICTION_UNDER_THE_CURRENT_QUOTA),
    ] {
        expect_caught(
            &format!("keyed live mutant: word without epoch ({name})"),
            TWO_VERSIONS_OLD,
            race(s, KeyedLivePlant::WordWithoutEpoch),
        );
    }
}
