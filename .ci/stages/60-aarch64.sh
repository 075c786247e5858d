#!/usr/bin/env bash
# The core crate's test suite (unit, integration and doc tests) built for aarch64-unknown-linux-gnu and
# run under qemu-user: the ARM code generation (LSE/LL-SC atomics, quanta reading CNTVCT_EL0
# instead of the TSC) gives the same decisions as on x86. It cannot catch a too-weak memory
# ordering: qemu on an x86 host keeps the host's stronger ordering; loom checks the orderings.
#
# Linker and runner come from .cargo/config.toml ([target.aarch64-unknown-linux-gnu]). Doc tests
# run under qemu too: since Rust 1.89 cargo cross-compiles doc tests and hands rustdoc the
# target's runner. Times under emulation mean nothing, and no test depends on them: time in
# tests comes from ManualClock.
#
# Budget: ≤ 7 min warm. Installs what it needs on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for pkg in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; do
  installed "$pkg" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
rustup target add aarch64-unknown-linux-gnu

qemu-aarch64 --version | head -n 1
# The core crate only: the integrations (tokio, hyper, redis) are plain
# portable Rust whose ARM code generation the core does not depend on.
# Unit, integration and doc tests. The benchmarks and comparison programs, which only print
# measurements, are a crate of their own (benches/).
cargo test -p tollgate --target aarch64-unknown-linux-gnu --lib --tests
cargo test -p tollgate --target aarch64-unknown-linux-gnu --doc
