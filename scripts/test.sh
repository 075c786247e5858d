#!/usr/bin/env bash
# The test suite, on a fresh machine too: installs the system packages the tests run against
# (a real redis-server and redis-cli for tollgate-redis, openssl for the certificates of its
# TLS test), then runs every test in the workspace: unit, integration and doc tests, the
# README's examples included, with the optional integrations on (serde, tokio's timer,
# tracing; tollgate-tower's metrics and tracing); then tollgate-redis's TLS test, with its
# `tls` feature (the workspace run tests its refusal of `rediss://` without it).
# Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (the tests start their own servers on loopback ports)"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

source scripts/test-features.sh
cargo test --workspace --features "$features" "$@"
# `rediss://` against a real TLS-only redis-server (the distribution's build has TLS). The
# workspace's features as above plus `tls`, so that only the Redis client and what depends on it
# build again.
exec cargo test --workspace --features "$features,tollgate-redis/tls" --test tls "$@"
