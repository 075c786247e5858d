#!/usr/bin/env bash
# The loom model checks (loom-tests/): every lock-free path of the four limiters, their mutex
# twins through the same models, and every planted mutant caught. Release build with debug
# assertions on; preemption bound 3 unless LOOM_MAX_PREEMPTIONS is set; a target dir of its
# own so the `--cfg tollgate_loom` build does not evict the normal build cache. Clippy first,
# under the same cfg.
set -euo pipefail
cd "$(dirname "$0")/../.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR_LOOM:-target/loom}"
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
export RUSTFLAGS="--cfg tollgate_loom"

start=$SECONDS
# The code only this cfg compiles (the sync facade's loom side, the planted copies, the
# models) held to the workspace's lint bar too; check-mode artifacts in a dir of their own.
CARGO_TARGET_DIR="$CARGO_TARGET_DIR-clippy" cargo clippy -p tollgate -p loom-tests --all-targets -- -D warnings
echo "loom: clippy in $((SECONDS - start)) s"

start=$SECONDS
cargo build --release -p loom-tests --tests
echo "loom: build in $((SECONDS - start)) s"

start=$SECONDS
# --nocapture: each model prints one line (executions, time) and each mutant how fast it was
# caught; scripts/loom_report.py turns these lines into docs/loom-report.md.
report=target/loom-report.txt
if ! cargo test --release -p loom-tests -- --nocapture >"$report" 2>&1; then
  cat "$report"
  echo "loom: FAILED after $((SECONDS - start)) s"
  exit 1
fi
grep -E '^(loom (model|mutant)|test result: )' "$report"
echo "loom: models in $((SECONDS - start)) s"
# The committed table must be what the models explore (loom's counts repeat from run to run at
# one bound; the table is recorded at the default bound, 3).
if [ -n "${LOOM_MAX_PREEMPTIONS:-}" ] && [ "$LOOM_MAX_PREEMPTIONS" != 3 ]; then
  echo "loom: bound $LOOM_MAX_PREEMPTIONS, docs/loom-report.md (bound 3) not checked"
else
  python3 scripts/loom_report.py --check "$report"
fi
