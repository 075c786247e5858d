#!/usr/bin/env bash
# The library's unit and integration tests under miri (undefined behaviour, data races in the
# atomics and the seqlock, leaks). Installs the nightly toolchain with miri and rust-src if the
# machine lacks them. Tests that cannot run under miri are marked in the tests themselves:
# quanta's TSC clocks are never used by these tests (ManualClock only), long loops are
# shortened under cfg(miri), and the one test that needs a failed 1 PiB allocation is ignored
# (miri aborts instead of failing it). Doc tests are not run under miri.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal --component miri,rust-src
fi
installed=$(rustup +nightly component list --installed)
if ! grep -q '^miri' <<<"$installed" || ! grep -q '^rust-src' <<<"$installed"; then
  rustup component add --toolchain nightly miri rust-src
fi

start=$SECONDS
cargo +nightly miri setup
echo "miri: setup in $((SECONDS - start)) s"

start=$SECONDS
# --tests: the library's unit tests and every integration test (no doc tests, no benches).
cargo +nightly miri test -p tollgate --tests
echo "miri: tests in $((SECONDS - start)) s"
