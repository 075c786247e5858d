#!/usr/bin/env bash
# Fuzzing (fuzz/, see docs/verification.md):
#   1. on stable, the committed corpus (fuzz/seeds/ and fuzz/regressions/) replayed through the
#      same `run` functions libFuzzer calls, plus fmt and clippy of the fuzz crate;
#   2. under cargo fuzz (nightly, or stable with RUSTC_BOOTSTRAP=1 where no nightly can be
#      installed), each target fuzzed for FUZZ_SECONDS (default 10) from a copy of its seeds,
#      so the checkout stays clean. Any crash fails the stage; libFuzzer prints the input
#      (bytes and base64) to the log: save it under fuzz/regressions/<target>/.
# Installs what it needs when missing: a C++ compiler (libFuzzer), cargo-fuzz (pinned), and
# the nightly toolchain (if it can). Warm: about 3 minutes with the default FUZZ_SECONDS.
set -euo pipefail
cd "$(dirname "$0")/../.."

CARGO_FUZZ_VERSION=0.13.1
FUZZ_SECONDS=${FUZZ_SECONDS:-10}

step() { echo "--- fuzz: $* ($SECONDS s)"; }

if ! command -v c++ >/dev/null; then
  step "installing a C++ compiler for libFuzzer"
  apt-get update
  apt-get install -y g++
fi

step "replaying the committed corpus on stable"
cargo fmt --manifest-path fuzz/Cargo.toml --all --check
cargo clippy --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings
cargo test --manifest-path fuzz/Cargo.toml

if [ "$(cargo fuzz --version 2>/dev/null || true)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  step "installing cargo-fuzz $CARGO_FUZZ_VERSION"
  # Unoptimized: the tool only starts cargo and libFuzzer; its optimized build takes minutes.
  cargo install --debug --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi
# cargo fuzz needs a nightly compiler (-Z sanitizer flags). Use the nightly toolchain if it is
# there or can be installed; a machine that can fetch no other toolchain builds with its own
# stable one under RUSTC_BOOTSTRAP=1 (stable rust-std ships the ASan runtime): the same flags,
# the same fuzzing. FUZZ_NO_NIGHTLY=1 takes that path on purpose (to test it).
has_nightly() {
  [ "${FUZZ_NO_NIGHTLY:-0}" != 1 ] && rustup run nightly rustc --version >/dev/null 2>&1
}
if [ "${FUZZ_NO_NIGHTLY:-0}" != 1 ] && ! has_nightly; then
  step "installing the nightly toolchain"
  timeout 300 rustup toolchain install nightly --profile minimal || true
fi
if has_nightly; then
  fuzz() { cargo +nightly fuzz "$@"; }
  step "cargo fuzz on $(rustup run nightly rustc --version)"
else
  fuzz() { RUSTC_BOOTSTRAP=1 cargo fuzz "$@"; }
  step "no nightly toolchain: cargo fuzz on $(rustc --version) with RUSTC_BOOTSTRAP=1"
fi

step "building the fuzz targets (sanitizer, debug assertions)"
fuzz build
# Every target fuzz/Cargo.toml declares.
mapfile -t TARGETS < <(fuzz list)
[ "${#TARGETS[@]}" -gt 0 ] || { echo "fuzz: no targets listed" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One target: fuzzed from a copy of its seeds; its log in $work/<target>.log, and any crash's
# input under $work/artifacts/<target>/.
fuzz_one() {
  local t=$1
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
  cp fuzz/seeds/"$t"/* "$work/corpus/$t/"
  local dirs=("$work/corpus/$t")
  [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
  # New inputs go to the first directory only (the copy); the others are only read.
  fuzz run "$t" "${dirs[@]}" -- \
    -max_total_time="$FUZZ_SECONDS" -timeout=10 \
    -artifact_prefix="$work/artifacts/$t/" -print_final_stats=1 >"$work/$t.log" 2>&1
}
# libFuzzer runs one process per target on one core: as many targets at once as there are
# cores, each for its own FUZZ_SECONDS.
jobs=$(nproc)
for ((i = 0; i < ${#TARGETS[@]}; i += jobs)); do
  batch=("${TARGETS[@]:i:jobs}")
  step "fuzzing ${batch[*]} for $FUZZ_SECONDS s"
  pids=()
  for t in "${batch[@]}"; do
    fuzz_one "$t" &
    pids+=("$!")
  done
  for j in "${!batch[@]}"; do
    t=${batch[j]}
    if ! wait "${pids[j]}" || compgen -G "$work/artifacts/$t/*" >/dev/null; then
      tail -n 80 "$work/$t.log"
      echo "fuzz: $t FAILED; the failing input's bytes and base64 are above" >&2
      exit 1
    fi
    echo "$t:"
    grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)' "$work/$t.log"
  done
done
step "done"
