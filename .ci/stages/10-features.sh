#!/usr/bin/env bash
# The core crate with its optional integrations on: quotas and keyed settings through serde,
# waiting on tokio's timer, denials as tracing events. (`--all-features` would also turn on
# `critical-section`, which is for targets without compare-and-swap.) Lint and test.
set -euo pipefail
cd "$(dirname "$0")/../.."
features=serde,tokio,tracing
cargo clippy -p tollgate --all-targets --features "$features" -- -D warnings
cargo test -p tollgate --features "$features"
