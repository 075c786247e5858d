#!/usr/bin/env bash
# Benchmarks: every bench builds, the instruction-count gate passes, criterion runs once.
#
# 1. valgrind (apt) and gungraun-runner (cargo install --locked, the version of the gungraun
#    crate in Cargo.lock) are installed if missing;
# 2. `cargo bench -p tollgate-benches --no-run` builds every bench target (the benches crate,
#    benches/Cargo.toml; naming it keeps the core crate's test-only dependencies out of the
#    optimized build);
# 3. the gate: benches/instructions.rs, instructions_keyed.rs and instructions_sketch.rs under
#    callgrind, compared with the baseline committed in benches/gungraun-baseline/ (a copy, so
#    the checkout stays clean; gungraun files it under the package's name, tollgate-benches/);
#    any instruction count more than 5 % above its baseline fails the run (gungraun exits 3);
# 4. a criterion smoke test: every benchmark of benches/compare.rs runs once (`--test`); wall
#    time is too noisy on shared machines to gate on.
# benches/README.md says how to update the baseline on purpose.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TERM_COLOR=never

# The runner must be the very version of the gungraun crate the benches link.
GUNGRAUN_VERSION=0.20.0
locked=$(grep -A1 '^name = "gungraun"$' Cargo.lock | sed -n 's/^version = "\(.*\)"$/\1/p')
if [ "$locked" != "$GUNGRAUN_VERSION" ]; then
  echo "Cargo.lock has gungraun $locked, this stage pins $GUNGRAUN_VERSION: update both" >&2
  exit 1
fi

step() {
  local start=$SECONDS
  echo "--- $1"
  shift
  "$@"
  echo "--- ok in $((SECONDS - start)) s"
}

install_tools() {
  if ! command -v valgrind >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y valgrind
  fi
  if [ "$(gungraun-runner --version 2>/dev/null || true)" != "gungraun-runner $GUNGRAUN_VERSION" ]; then
    # Unoptimized: it reads a few callgrind files; its optimized build takes minutes.
    cargo install --debug --locked gungraun-runner --version "$GUNGRAUN_VERSION"
  fi
}

gate() {
  local home
  home=$(mktemp -d)
  cp -r benches/gungraun-baseline/. "$home"/
  cargo bench -p tollgate-benches --bench instructions --bench instructions_keyed --bench instructions_sketch -- --baseline=main --home="$home"
  rm -rf "$home"
}

step "tools (valgrind, gungraun-runner $GUNGRAUN_VERSION)" install_tools
step "build every bench" cargo bench -p tollgate-benches --no-run
step "instruction-count gate (+5 % over benches/gungraun-baseline fails)" gate
step "benches/instructions.md written from the baseline" python3 benches/instructions_table.py --check
step "criterion smoke test (each benchmark once)" cargo bench -p tollgate-benches --bench compare -- --test
