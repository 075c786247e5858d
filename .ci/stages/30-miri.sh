#!/usr/bin/env bash
# Miri over the tests that reach what it can find here. The crate forbids unsafe code and shares
# state only through atomics, so miri checks the unsafe code of the dependencies (papaya, the
# concurrent map behind KeyedLimiter; portable-atomic; crossbeam-utils) for undefined
# behaviour, looks for leaks, and runs the lock-free paths under its weak-memory emulation and
# data-race detector. It runs:
#   --lib       the unit tests (the algorithms, the keyed map's slots and words, leases, waiting)
#   keyed       papaya's map: inserts, lookups, eviction, plans, the capacity bound; threads
#               racing to make a new key, and a flood of new keys swept out under a bound
# The racing protocols of the other integration tests (leases, groups, live limiters, the
# limiters under threads) are model-checked by loom (20-loom: every interleaving within its
# bound, planted defects caught), which miri's sampled weak-memory emulation adds little to at
# several minutes each; the rest check arithmetic and API on one thread against ManualClock,
# the same code the unit tests run here. They run in the normal test stage; the long form
# under miri is in docs/verification.md.
# What cannot run under miri is marked in the tests themselves: quanta's TSC clocks are never
# used by these tests (ManualClock only), long loops are shortened under cfg(miri), the two
# keyed tests of many thousands of papaya operations are ignored (the eviction race among them
# is model-checked by loom, loom-tests/tests/keyed_slot.rs), and so is the test that needs a
# failed 1 PiB allocation (miri aborts instead of failing it). Doc tests are not run under miri.
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
cargo +nightly miri test -p tollgate --lib --test keyed --no-run
echo "miri: build in $((SECONDS - start)) s"
# The interpreter runs on one core: the two test binaries at once, each to its own log.
start=$SECONDS
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cargo +nightly miri test -p tollgate --lib >"$logs/lib.log" 2>&1 &
lib=$!
cargo +nightly miri test -p tollgate --test keyed >"$logs/keyed.log" 2>&1 &
keyed=$!
failed=0
wait "$lib" || failed=1
wait "$keyed" || failed=1
cat "$logs/lib.log" "$logs/keyed.log"
if [ "$failed" -ne 0 ]; then
  echo "miri: FAILED (the logs above)" >&2
  exit 1
fi
echo "miri: tests in $((SECONDS - start)) s"
