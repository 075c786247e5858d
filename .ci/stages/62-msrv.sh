#!/usr/bin/env bash
# The declared minimum Rust version (`rust-version` in the three manifests): the three libraries
# type-check with that toolchain, every feature on (`critical-section` aside, which is for
# targets without compare-and-swap). The promise is the libraries' (what a user compiles); the
# tests, examples and benchmarks are built with the current stable toolchain by the other stages.
#
# Dependencies resolve as for a user on that toolchain: in a copy of the workspace, the lockfile
# is regenerated with cargo's rust-version-aware resolution (the newest version of each crate
# that supports the declared version, `incompatible-rust-versions = "fallback"`), so the
# committed Cargo.lock (newer versions, for the newest stable) stays untouched.
#
# Cost: the libraries' dependencies once per cold target/msrv, seconds when warm. Installs the
# toolchain if missing (~1 min).
set -euo pipefail
cd "$(dirname "$0")/../.."

msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
for manifest in tollgate-redis/Cargo.toml tollgate-tower/Cargo.toml; do
  declared=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' "$manifest")
  if [ "$declared" != "$msrv" ]; then
    echo "$manifest declares rust-version $declared, Cargo.toml $msrv: the crates share one" >&2
    exit 1
  fi
done
echo "rust-version ${msrv}"

timeout 300 rustup toolchain install "$msrv" --profile minimal

# The copy: the tracked files (loom-tests is a workspace member, so it comes too).
root=$PWD
copy=$root/target/msrv/workspace
rm -rf "$copy"
mkdir -p "$copy"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$copy"

cd "$copy"
CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo +stable generate-lockfile --quiet
export CARGO_TARGET_DIR=$root/target/msrv/target
timeout 1200 cargo "+$msrv" check --locked --lib \
  -p tollgate -p tollgate-redis -p tollgate-tower \
  --features tollgate/serde,tollgate/tokio,tollgate/tracing,tollgate-tower/redis,tollgate-tower/metrics,tollgate-tower/tracing,tollgate-redis/tls
echo "the three libraries build with Rust ${msrv}"
