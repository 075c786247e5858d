#!/usr/bin/env bash
# The crates with their optional integrations on, linted (the README's test command runs
# their tests so: scripts/test.sh): quotas and keyed settings through serde, waiting on tokio's
# timer, denials as tracing events, tollgate-tower's counters and events. (`--all-features`
# would also turn on `critical-section`, which is for targets without compare-and-swap.) Then
# each crate's library with every feature alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/test-features.sh
cargo clippy --workspace --all-targets --features "$features" -- -D warnings

# Every feature alone, for each crate (what `cargo hack check --each-feature --lib` does): the
# library with no default features and then with exactly one feature on, so no feature builds
# only because another one happens to be on. Library targets only: the tests' dev-dependencies
# turn features on (tollgate-tower's tests need `redis`). Features come from the manifests.
features_of() { # the features a manifest declares, `default` aside
  sed -n '/^\[features\]/,/^\[/p' "$1" | sed -n 's/^\([a-z0-9_-]*\) = \[.*/\1/p' | grep -vx default || true
}
for crate in tollgate:Cargo.toml tollgate-redis:tollgate-redis/Cargo.toml tollgate-tower:tollgate-tower/Cargo.toml; do
  name=${crate%%:*}
  manifest=${crate#*:}
  echo "--- ${name}: no default features"
  cargo clippy -p "$name" --lib --no-default-features -- -D warnings
  for feature in $(features_of "$manifest"); do
    echo "--- ${name}: --features ${feature} alone"
    cargo clippy -p "$name" --lib --no-default-features --features "$feature" -- -D warnings
  done
done
