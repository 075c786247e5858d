#!/usr/bin/env bash
# What the later CI stages would otherwise download or build one after the other, started by
# .ci/run in the background while the first stages compile:
#   packages    the system packages of every stage (apt)
#   toolchains  the nightly toolchain with miri (30-miri, 40-fuzz), the minimum Rust version
#               (62-msrv), the cross targets (60-aarch64, 61-no-std), then, at the lowest CPU
#               priority, the pinned cargo-fuzz and gungraun-runner (40-fuzz, 50-bench)
# Each stage still checks for what it needs and installs whatever is missing, so a failure here
# costs time, never a result; .ci/run prints this script's log either way.
#
# usage: .ci/prefetch.sh packages|toolchains
set -uo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  packages)
    # the tests: redis-server, redis-tools, openssl; 40-fuzz: g++; 50-bench: valgrind;
    # 60-aarch64: the cross compiler and libc, qemu-user (also 61-no-std); 71: wrk; 72: curl.
    want=(redis-server redis-tools openssl g++ valgrind gcc-aarch64-linux-gnu
      libc6-dev-arm64-cross qemu-user wrk curl)
    missing=()
    for pkg in "${want[@]}"; do
      dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if [ ${#missing[@]} -eq 0 ]; then
      echo "packages: all present"
      exit 0
    fi
    echo "packages: installing ${missing[*]}"
    apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    ;;
  toolchains)
    msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
    # The nightly already on the machine if there is one, as 30-miri.sh and 40-fuzz.sh take it
    # (installing "nightly" over it would move it to the newest), with miri's two components.
    if ! rustup toolchain list | grep -q '^nightly'; then
      timeout 300 rustup toolchain install nightly --profile minimal --component miri,rust-src
    else
      rustup component add --toolchain nightly miri rust-src
    fi
    timeout 300 rustup toolchain install "$msrv" --profile minimal
    rustup target add aarch64-unknown-linux-gnu thumbv7em-none-eabi riscv32imc-unknown-none-elf
    # The versions the stages pin (40-fuzz.sh, 50-bench.sh), built without optimization: the
    # tools' own speed does not matter, their build time does.
    fuzz_version=$(sed -n 's/^CARGO_FUZZ_VERSION=//p' .ci/stages/40-fuzz.sh)
    runner_version=$(sed -n 's/^GUNGRAUN_VERSION=//p' .ci/stages/50-bench.sh)
    if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $fuzz_version" ]; then
      nice -n 19 cargo install --debug --locked cargo-fuzz --version "$fuzz_version"
    fi
    if [ "$(gungraun-runner --version 2>/dev/null)" != "gungraun-runner $runner_version" ]; then
      nice -n 19 cargo install --debug --locked gungraun-runner --version "$runner_version"
    fi
    ;;
  *)
    echo "usage: $0 packages|toolchains" >&2
    exit 2
    ;;
esac
