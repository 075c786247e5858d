//! Every planted mutant is the real code with its planted lines and nothing else: each copy
//! (in `src/mutants/` and the crate's `planted.rs` files) is compared with the function it
//! copies, and every difference must be a hunk that carries a `// PLANTED` line. A copy may
//! take the defect as a const parameter `PLANT`: its declaration and its turbofish are
//! dropped before comparing. A change to the real code that the copy does not
//! follow fails here, before any model runs on a stale mutant. A plain test: no loom needed.

/// The lines of the function that starts at the first line containing `start` after the
/// first line containing `after`, up to its closing brace, trimmed, with a leading `pub` /
/// `pub(crate)` / `pub(super)` and a copy's const parameter `PLANT` dropped, the signature and a lone `{` each
/// joined to one line.
fn function(source: &str, after: &str, start: &str) -> Vec<String> {
    let mut lines = source.lines().skip_while(|l| !l.contains(after));
    let first = lines
        .find(|l| l.contains(start))
        .unwrap_or_else(|| panic!("no `{start}` after `{after}`"));
    let indent = first.len() - first.trim_start().len();
    let close = format!("{}}}", " ".repeat(indent));
    let mut body = vec![first];
    body.extend(lines.take_while(|l| *l != close));
    // The signature as one line, however rustfmt wrapped it.
    let head = body.iter().position(|l| l.ends_with('{')).unwrap_or(0);
    let signature = body[..=head]
        .iter()
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" ")
        .replace("( ", "(")
        .replace(", )", ")");
    let lines = std::iter::once(signature).chain(body[head + 1..].iter().map(|l| l.to_string()));
    lines
        .map(|l| {
            let l = l.as_str();
            let l = l.trim();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub(super) "))
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            [
                "<const PLANT: Plant>",
                ", const PLANT: Plant",
                "::<PLANT>",
                "::<_, PLANT>",
            ]
            .iter()
            .fold(l.to_owned(), |l, plant| l.replace(plant, ""))
        })
        // A lone `{` joins the line before it: rustfmt puts it there or not by indentation.
        .fold(Vec::new(), |mut out: Vec<String>, l| {
            match out.last_mut() {
                Some(last) if l == "{" => last.push_str(" {"),
                _ => out.push(l),
            }
            out
        })
}

/// The hunks where `copy` differs from `real` (longest common subsequence), each as the real
/// lines it drops and the copy's lines it adds; differences separated only by brace lines
/// are one hunk.
fn hunks<'a>(real: &[&'a str], copy: &[&'a str]) -> Vec<(Vec<&'a str>, Vec<&'a str>)> {
    let (n, m) = (real.len(), copy.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if real[i] == copy[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    let mut current: (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    while i < n || j < m {
        if i < n && j < m && real[i] == copy[j] {
            // A closing brace between two differences is where the alignment chose to pair
            // braces: it keeps them in one hunk.
            let brace = real[i].chars().all(|c| "{}()[];,".contains(c));
            if !brace && (!current.0.is_empty() || !current.1.is_empty()) {
                out.push(std::mem::take(&mut current));
            }
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            current.1.push(copy[j]);
            j += 1;
        } else {
            current.0.push(real[i]);
            i += 1;
        }
    }
    if !current.0.is_empty() || !current.1.is_empty() {
        out.push(current);
    }
    out
}

/// Asserts that `copy` is `real` with planted hunks only, and at least one.
fn assert_planted_only<S: AsRef<str>>(name: &str, real: Vec<S>, copy: Vec<S>) {
    let real: Vec<&str> = real.iter().map(AsRef::as_ref).collect();
    let copy: Vec<&str> = copy.iter().map(AsRef::as_ref).collect();
    let hunks = hunks(&real, &copy);
    assert!(!hunks.is_empty(), "{name}: the mutant plants nothing");
    for (dropped, added) in &hunks {
        assert!(
            added.iter().any(|l| l.contains("// PLANTED")),
            "{name}: the mutant differs from the real code outside its planted lines:\n\
             real: {dropped:#?}\nmutant: {added:#?}"
        );
    }
}

const MOD: &str = include_str!("../../src/algo/mod.rs");
const TOKEN_BUCKET: &str = include_str!("../../src/algo/token_bucket.rs");
const FIXED_WINDOW: &str = include_str!("../../src/algo/fixed_window.rs");
const SLIDING_WINDOW: &str = include_str!("../../src/algo/sliding_window.rs");
const SLIDING_LOG: &str = include_str!("../../src/algo/sliding_log.rs");
const M_TOKEN_BUCKET: &str = include_str!("../src/mutants/token_bucket.rs");
const M_FIXED_WINDOW: &str = include_str!("../src/mutants/fixed_window.rs");
const M_SLIDING_WINDOW: &str = include_str!("../src/mutants/sliding_window.rs");
const M_SLIDING_LOG: &str = include_str!("../src/mutants/sliding_log.rs");
const M_REFUND: &str = include_str!("../src/mutants/refund.rs");
const PLANTED: &str = include_str!("../../src/algo/planted.rs");
const LEASED_SHARED: &str = include_str!("../../src/leased/shared.rs");
const LEASED_PLANTED: &str = include_str!("../../src/leased/planted.rs");
const SLOT: &str = include_str!("../../src/keyed/slot.rs");
const SLOT_PLANTED: &str = include_str!("../../src/keyed/slot/planted.rs");
const WORD: &str = include_str!("../../src/keyed/word.rs");
const WORD_PLANTED: &str = include_str!("../../src/keyed/word/planted.rs");
const LIVE: &str = include_str!("../../src/live/mod.rs");
const LIVE_PLANTED: &str = include_str!("../../src/live/planted.rs");
const LIVE_BUCKET: &str = include_str!("../../src/live/token_bucket.rs");
const BUCKET_PLANTED: &str = include_str!("../../src/live/token_bucket/planted.rs");
const KEYED_LIVE: &str = include_str!("../../src/keyed/live.rs");
const KEYED_LIVE_PLANTED: &str = include_str!("../../src/keyed/live/planted.rs");
const GROUP: &str = include_str!("../../src/group/mod.rs");
const MEMBER: &str = include_str!("../../src/group/member.rs");
const GROUP_PLANTED: &str = include_str!("../../src/group/planted.rs");
const CELL: &str = include_str!("../../src/sketch/cell.rs");
const CELL_PLANTED: &str = include_str!("../../src/sketch/cell/planted.rs");
const HYBRID: &str = include_str!("../../src/sketch/hybrid.rs");
const HYBRID_PLANTED: &str = include_str!("../../src/sketch/hybrid/planted.rs");
const TABLE: &str = include_str!("../../src/keyed/table.rs");
/// The keyed table's planted defects, a file each.
const TABLE_PLANTED: [(&str, &str); 6] = [
    (
        "untagged_admission",
        include_str!("../../src/keyed/table/planted/untagged_admission.rs"),
    ),
    (
        "relaxed_first_word",
        include_str!("../../src/keyed/table/planted/relaxed_first_word.rs"),
    ),
    (
        "relaxed_tag",
        include_str!("../../src/keyed/table/planted/relaxed_tag.rs"),
    ),
    (
        "unlocked_claim",
        include_str!("../../src/keyed/table/planted/unlocked_claim.rs"),
    ),
    (
        "fresh_takeover_word",
        include_str!("../../src/keyed/table/planted/fresh_takeover_word.rs"),
    ),
    (
        "stale_claim_reading",
        include_str!("../../src/keyed/table/planted/stale_claim_reading.rs"),
    ),
];

#[test]
fn hybrid_relaxed_recheck_is_the_real_request_with_a_plain_load() {
    assert_planted_only(
        "hybrid::RelaxedRecheck",
        function(
            HYBRID,
            "/// Asks for `n` units for `key` at once",
            "fn try_acquire_n<",
        ),
        function(
            HYBRID_PLANTED,
            "/// The real `try_acquire_n`",
            "fn try_acquire_n<",
        ),
    );
}

#[test]
fn hybrid_ignores_later_entry_is_the_real_recheck_without_its_denial() {
    let copy = |f: &str| function(HYBRID_PLANTED, "> IgnoresLaterEntry<'_, K, C, S>", f);
    assert_planted_only(
        "hybrid::IgnoresLaterEntry recheck",
        function(
            HYBRID,
            "/// After the sketch admitted `n` for `h`",
            "fn recheck(",
        ),
        copy("fn recheck("),
    );
    // The request plants nothing of its own: it runs the planted `recheck`.
    assert_eq!(
        function(
            HYBRID,
            "/// Asks for `n` units for `key` at once",
            "fn try_acquire_n<",
        ),
        copy("fn try_acquire_n<"),
        "hybrid::IgnoresLaterEntry try_acquire_n"
    );
}

#[test]
fn refund_mutants_are_the_real_refunds_calling_a_planted_helper() {
    for (name, real, mutant) in [
        (
            "FixedLaterWindow",
            (FIXED_WINDOW, "impl Algo for Fixed"),
            "impl Algo for FixedLaterWindow",
        ),
        (
            "SlidingLaterSlot",
            (SLIDING_WINDOW, "impl Algo for Sliding"),
            "impl Algo for SlidingLaterSlot",
        ),
        (
            "BucketBehindReading",
            (TOKEN_BUCKET, "impl Algo for Gcra"),
            "impl Algo for BucketBehindReading",
        ),
    ] {
        assert_planted_only(
            name,
            function(real.0, real.1, "fn refund("),
            function(M_REFUND, mutant, "fn refund("),
        );
    }
    assert_planted_only(
        "planted::fixed_window::refunded",
        function(
            FIXED_WINDOW,
            "/// A refund of `n` on `word`",
            "fn refunded(",
        ),
        function(PLANTED, "pub mod fixed_window", "fn refunded("),
    );
    assert_planted_only(
        "planted::sliding_window::refunded",
        function(
            SLIDING_WINDOW,
            "/// A refund of `n` on `head`",
            "fn refunded(",
        ),
        function(PLANTED, "pub mod sliding_window", "fn refunded("),
    );
    assert_planted_only(
        "planted::token_bucket::refunded",
        function(TOKEN_BUCKET, "/// A refund of `n` on `tat`", "fn refunded("),
        function(PLANTED, "pub mod token_bucket", "fn refunded("),
    );
}

#[test]
fn token_bucket_load_store_is_the_real_loop_with_a_store() {
    assert_planted_only(
        "token_bucket::LoadStore",
        function(
            TOKEN_BUCKET,
            "/// [`Gcra::acquire`] at tick",
            "fn acquire_at(",
        ),
        function(
            M_TOKEN_BUCKET,
            "/// The real bucket's compare-exchange loop",
            "fn acquire_at(",
        ),
    );
}

#[test]
fn fixed_window_store_new_window_is_the_real_acquire_with_a_store() {
    assert_planted_only(
        "fixed_window::StoreNewWindow",
        function(FIXED_WINDOW, "impl Algo for Fixed", "fn acquire("),
        function(
            M_FIXED_WINDOW,
            "impl Algo for StoreNewWindow",
            "fn acquire(",
        ),
    );
}

#[test]
fn sliding_window_mutants_are_the_real_acquire_with_one_change() {
    for (mutant, module) in [
        ("RelaxedHead", "pub mod relaxed_head"),
        ("RingAfterCas", "pub mod ring_after_cas"),
        ("StaleRingStore", "pub mod stale_ring_store"),
    ] {
        assert_planted_only(
            mutant,
            function(
                SLIDING_WINDOW,
                "/// One request on the head `word`",
                "fn acquire_on<",
            ),
            function(M_SLIDING_WINDOW, module, "fn acquire_on<"),
        );
        // The `acquire` around it is the real one, word for word.
        assert_eq!(
            function(SLIDING_WINDOW, "impl Algo for Sliding", "fn acquire("),
            function(
                M_SLIDING_WINDOW,
                &format!("impl Algo for {mutant}"),
                "fn acquire("
            ),
            "{mutant}: its acquire is not the real one"
        );
    }
}

#[test]
fn sliding_log_mutants_are_the_real_acquire_with_one_change() {
    for copy in [
        "impl Unvalidated for LogState",
        "impl Unlocked for LogState",
    ] {
        assert_planted_only(
            copy,
            function(SLIDING_LOG, "impl LogState", "fn acquire("),
            function(M_SLIDING_LOG, copy, "fn acquire("),
        );
    }
}

#[test]
fn leased_mutant_is_the_real_protocol_with_its_planted_lines() {
    let real = |f: &str| function(LEASED_SHARED, "impl<C: Clock> Shared<C>", f);
    let copy = |f: &str| function(LEASED_PLANTED, "impl<C: Clock> Mutant<C>", f);
    for f in [
        "fn covers(",
        "fn acquire(",
        "fn renew(",
        "fn exchange(",
        "fn reserve(",
    ] {
        assert_planted_only(&format!("leased {f}"), real(f), copy(f));
    }
    // These plant nothing of their own: they run the planted `covers` and `exchange`.
    for f in ["fn spend(", "fn take(", "fn give_back("] {
        assert_eq!(real(f), copy(f), "leased {f}");
    }
}

#[test]
fn keyed_slot_mutants_are_the_real_protocols_with_their_planted_lines() {
    for (name, real, after, copy) in [
        (
            "StateSlot",
            SLOT,
            "impl<A: Algo> StateSlot<A>",
            SLOT_PLANTED,
        ),
        (
            "WordSlot",
            WORD,
            "impl<R: WordRule, P: PlanRef<R>> WordSlot<R, P>",
            WORD_PLANTED,
        ),
    ] {
        for f in ["fn acquire", "fn try_evict"] {
            assert_planted_only(
                &format!("{name} {f}"),
                function(real, after, &format!("{f}(")),
                function(copy, "> Mutant<'_,", &format!("{f}<")),
            );
        }
    }
}

#[test]
fn keyed_table_mutants_are_the_real_request_with_their_planted_lines() {
    let real = |f: &str| {
        function(
            TABLE,
            "impl<K: ?Sized, C: Clock, S: BuildHasher> KeyedTable<K, C, S>",
            f,
        )
    };
    for (module, planted, copied) in [
        (
            "untagged_admission",
            &["fn decide_on<"][..],
            &["fn try_acquire_n<", "fn acquire<", "fn find<", "fn claim<"][..],
        ),
        (
            "relaxed_first_word",
            &["fn claim<"][..],
            &["fn try_acquire_n<", "fn acquire<"][..],
        ),
        (
            "relaxed_tag",
            &["fn claim<"][..],
            &["fn try_acquire_n<", "fn acquire<"][..],
        ),
        (
            "unlocked_claim",
            &["fn claim<"][..],
            &["fn try_acquire_n<", "fn acquire<"][..],
        ),
        (
            "fresh_takeover_word",
            &["fn claim<", "fn scan<"][..],
            &["fn try_acquire_n<", "fn acquire<"][..],
        ),
        (
            "stale_claim_reading",
            &["fn claim<"][..],
            &["fn try_acquire_n<", "fn acquire<"][..],
        ),
    ] {
        let (_, source) = TABLE_PLANTED
            .iter()
            .find(|(name, _)| *name == module)
            .expect("a planted file of that name");
        let copy = |f: &str| function(source, "mutant!();", f);
        for f in planted {
            assert_planted_only(&format!("{module} {f}"), real(f), copy(f));
        }
        // These plant nothing of their own: they call the module's copies.
        for f in copied {
            assert_eq!(real(f), copy(f), "{module} {f}");
        }
    }
}

#[test]
fn sketch_mutants_are_the_real_cell_with_their_planted_lines() {
    assert_planted_only(
        "sketch Cell::acquire",
        function(CELL, "impl Cell", "fn acquire("),
        function(CELL_PLANTED, "impl Mutant<'_>", "fn acquire<"),
    );
}

#[test]
fn live_mutants_are_the_real_cell_and_bucket_with_their_planted_lines() {
    let cell = |f: &str| function(LIVE, "impl<const N: usize> ParamCell<N>", &format!("{f}("));
    let copy = |f: &str| {
        function(
            LIVE_PLANTED,
            "impl<const N: usize> Cell<'_, N>",
            &format!("{f}<"),
        )
    };
    for f in ["fn read_slot", "fn write"] {
        assert_planted_only(&format!("ParamCell {f}"), cell(f), copy(f));
    }
    // The read loop plants nothing of its own: it runs the planted `read_slot`.
    assert_eq!(cell("fn read_versioned"), copy("fn read_versioned"));
    assert_planted_only(
        "Live::set_quota",
        function(
            LIVE,
            "impl<A: Retune, C: Clock> Live<A, C>",
            "fn set_quota(",
        ),
        function(
            LIVE_PLANTED,
            "impl<C: Clock> Bucket<'_, C>",
            "fn set_quota<",
        ),
    );
    assert_planted_only(
        "Live::try_acquire_n",
        function(
            LIVE,
            "impl<A: Retune, C: Clock> Limiter for Live<A, C>",
            "fn try_acquire_n(",
        ),
        function(
            LIVE_PLANTED,
            "impl<C: Clock> Bucket<'_, C>",
            "fn try_acquire_n<",
        ),
    );
    let bucket = |f: &str| function(LIVE_BUCKET, "impl Retune for Gcra", &format!("{f}("));
    let copy = |f: &str| function(BUCKET_PLANTED, "/// `Retune::", &format!("{f}<"));
    assert_planted_only("Gcra::publish", bucket("fn publish"), copy("fn publish"));
    assert_planted_only(
        "token_bucket::carried",
        function(
            LIVE_BUCKET,
            "/// The `tat` that carries a bucket's level",
            "fn carried(",
        ),
        function(BUCKET_PLANTED, "/// `carried` with", "fn carried<"),
    );
    // The request plants nothing of its own: it runs the planted loop.
    assert_eq!(bucket("fn acquire_live"), copy("fn acquire_live"));
    assert_planted_only(
        "token_bucket::counted_in",
        function(
            LIVE_BUCKET,
            "/// The parameters a live word of epoch",
            "fn counted_in(",
        ),
        function(BUCKET_PLANTED, "/// `counted_in` with", "fn counted_in<"),
    );
    assert_eq!(
        function(
            LIVE_BUCKET,
            "/// The live bucket's compare-exchange loop",
            "fn live_update<"
        ),
        function(BUCKET_PLANTED, "/// `live_update` with", "fn live_update<"),
        "the live bucket's loop plants nothing of its own: it runs the planted `counted_in`"
    );
}

#[test]
fn keyed_live_mutants_are_the_real_plan_and_slot_with_their_planted_lines() {
    for (name, real, copy, f) in [
        (
            "LivePlan::change",
            "impl<R: Retune> LivePlan<R>",
            "impl<R: Retune> Plan<'_, R>",
            "fn change",
        ),
        (
            "LivePlan::counted",
            "impl LivePlan<Gcra>",
            "impl Plan<'_, Gcra>",
            "fn counted",
        ),
        (
            "BucketSlot::acquire",
            "impl KeySlot for BucketSlot",
            "impl Slot<'_>",
            "fn acquire",
        ),
    ] {
        assert_planted_only(
            name,
            function(KEYED_LIVE, real, &format!("{f}(")),
            function(KEYED_LIVE_PLANTED, copy, &format!("{f}<")),
        );
    }
}

#[test]
fn group_mutants_are_the_real_check_and_rollbacks_with_their_planted_lines() {
    let real = |f: &str| function(GROUP, "impl<C: Clock> Limits<C>", f);
    let copy = |f: &str| function(GROUP_PLANTED, "impl<C: Clock> Mutant<C>", f);
    for f in ["fn try_acquire_explained(", "fn peek_at(", "fn roll_back("] {
        assert_planted_only(&format!("Limits {f}"), real(f), copy(f));
    }
    assert_planted_only(
        "Limits fn refund(",
        function(GROUP, "impl<C: Clock> Limiter for Limits<C>", "fn refund("),
        copy("fn refund("),
    );
    // The peek plants nothing of its own: it runs the planted `peek_at`.
    assert_eq!(real("fn peek_explained("), copy("fn peek_explained("));
    for f in ["fn load(", "fn refund(", "fn roll_back<"] {
        assert_planted_only(
            &format!("Member {f}"),
            function(MEMBER, "impl Member {", f),
            function(GROUP_PLANTED, "impl MemberMutant<'_> {", f),
        );
    }
    assert_planted_only(
        "given_back_in_slot",
        function(
            MEMBER,
            "/// A window or sliding member's rollback",
            "fn given_back_in_slot(",
        ),
        function(
            GROUP_PLANTED,
            "/// `given_back_in_slot` with",
            "fn given_back_in_slot(",
        ),
    );
}

/// The checker itself: an unplanted difference fails, a planted one passes.
#[test]
fn an_unplanted_difference_is_refused() {
    let real = vec!["a", "b", "c"];
    assert_planted_only("planted", real.clone(), vec!["a", "x // PLANTED", "c"]);
    let caught = std::panic::catch_unwind(|| {
        assert_planted_only(
            "unplanted",
            real.clone(),
            vec!["a", "x // PLANTED", "c", "d"],
        )
    });
    assert!(caught.is_err());
    let caught = std::panic::catch_unwind(|| assert_planted_only("none", real.clone(), real));
    assert!(caught.is_err());
    // The real update loop exists where the token bucket's planted helper replaces it.
    assert!(MOD.contains("pub fn update<T>("));
}
