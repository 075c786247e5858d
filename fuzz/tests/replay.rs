//! Replays the committed corpus on stable: every seed input and every regression input (a
//! crash once found) of every target, through the same `run` libFuzzer calls.

use std::fs;
use std::path::Path;

fn inputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .map(|e| e.expect("readable corpus directory").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            (
                p.display().to_string(),
                fs::read(&p).expect("readable corpus file"),
            )
        })
        .collect()
}

fn replay(target: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let seeds = inputs(&root.join("seeds").join(target));
    assert!(!seeds.is_empty(), "no seed inputs for {target}");
    let regressions = inputs(&root.join("regressions").join(target));
    for (name, data) in seeds.iter().chain(&regressions) {
        eprintln!("{target}: {name}");
        tollgate_fuzz::run(target, data);
    }
    println!(
        "{target}: {} seeds, {} regressions replayed",
        seeds.len(),
        regressions.len()
    );
}

/// One test a target, `<target>_corpus`, and `TESTED`: the targets those tests replay.
macro_rules! corpus_tests {
    ($($test:ident: $target:literal,)*) => {
        $(
            #[test]
            fn $test() {
                replay($target);
            }
        )*

        const TESTED: &[&str] = &[$($target),*];
    };
}

corpus_tests! {
    quota_corpus: "quota",
    token_bucket_corpus: "token_bucket",
    fixed_window_corpus: "fixed_window",
    sliding_window_corpus: "sliding_window",
    sliding_log_corpus: "sliding_log",
    keyed_corpus: "keyed",
    keyed_table_corpus: "keyed_table",
    leased_corpus: "leased",
    live_corpus: "live",
    sketch_corpus: "sketch",
    sketch_hybrid_corpus: "sketch_hybrid",
}

#[test]
fn every_target_has_a_test_above() {
    assert_eq!(tollgate_fuzz::TARGETS, TESTED);
}
