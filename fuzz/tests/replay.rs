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

#[test]
fn quota_corpus() {
    replay("quota");
}

#[test]
fn token_bucket_corpus() {
    replay("token_bucket");
}

#[test]
fn fixed_window_corpus() {
    replay("fixed_window");
}

#[test]
fn sliding_window_corpus() {
    replay("sliding_window");
}

#[test]
fn sliding_log_corpus() {
    replay("sliding_log");
}

#[test]
fn keyed_corpus() {
    replay("keyed");
}

#[test]
fn leased_corpus() {
    replay("leased");
}

#[test]
fn live_corpus() {
    replay("live");
}

#[test]
fn sketch_corpus() {
    replay("sketch");
}

#[test]
fn sketch_hybrid_corpus() {
    replay("sketch_hybrid");
}

#[test]
fn every_target_has_a_test_above() {
    assert_eq!(
        tollgate_fuzz::TARGETS,
        [
            "quota",
            "token_bucket",
            "fixed_window",
            "sliding_window",
            "sliding_log",
            "keyed",
            "leased",
            "live",
            "sketch",
            "sketch_hybrid"
        ]
    );
}
