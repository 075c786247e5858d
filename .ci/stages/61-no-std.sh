#!/usr/bin/env bash
# The no_std core on two 32-bit targets without 64-bit atomics:
#   thumbv7em-none-eabi          (Cortex-M4/M7): AtomicU64 from portable-atomic's lock-based
#                                fallback (a global seqlock; 32-bit CAS is native)
#   riscv32imc-unknown-none-elf  (no A extension, no CAS at all): every atomic operation in a
#                                critical section (tollgate's `critical-section` feature)
# 1. clippy on the no_std library (host and both targets), so no_std stays warning-free, and
#    the library's unit tests on the host with the std feature off;
# 2. the library built for each target as a user would (rlib);
# 3. .ci/no-std-check: a freestanding binary that links the core (with a global allocator, and
#    a critical-section implementation on riscv32), built for each target and run under
#    qemu-user: it drives the four limiters from a static ManualClock and exits 0 only if every
#    check held. That is a smoke test of the linked code, not the test suite (which needs std);
#    qemu-arm user mode runs the Thumb-2 code on an A-profile CPU, not on a Cortex-M board.
#
# Budget: ≤ 3 min. Installs what it needs on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

targets=(thumbv7em-none-eabi riscv32imc-unknown-none-elf)
rustup target add "${targets[@]}"
if ! dpkg-query -W -f='${Status}' qemu-user 2>/dev/null | grep -q "install ok installed"; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user >/dev/null
fi

features() { # the features a user of tollgate on this target enables
  case "$1" in
    riscv32imc-*) echo "--features=critical-section" ;;
    *) echo "--features=" ;;
  esac
}

echo "--- host: clippy and the unit tests of the library without std"
cargo clippy -p tollgate --no-default-features --lib -- -D warnings
cargo test -p tollgate --no-default-features --lib
for t in "${targets[@]}"; do
  echo "--- ${t}: clippy and build of the library"
  cargo clippy -p tollgate --no-default-features "$(features "$t")" --lib --target "$t" -- -D warnings
  cargo build -p tollgate --no-default-features "$(features "$t")" --lib --target "$t"
done

export CARGO_TARGET_DIR=target/no-std-check
for t in "${targets[@]}"; do
  echo "--- ${t}: linked smoke binary under qemu-user"
  cargo build --manifest-path .ci/no-std-check/Cargo.toml --target "$t"
  case "$t" in
    thumbv7em-*) qemu=qemu-arm ;;
    riscv32*) qemu=qemu-riscv32 ;;
  esac
  bin="$CARGO_TARGET_DIR/$t/debug/tollgate-no-std-check"
  if "$qemu" "$bin"; then
    echo "${t}: every no_std check held"
  else
    status=$?
    echo "${t}: no_std check ${status} failed (see .ci/no-std-check/src/main.rs)" >&2
    exit 1
  fi
done
