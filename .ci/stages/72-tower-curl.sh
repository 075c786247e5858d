#!/usr/bin/env bash
# tollgate-tower's example proxy driven by curl in front of the example upstream, on loopback:
# what a client past its quota, or spelling its way around one, actually gets.
#   - bounded memory: with --max-keys 2 a third busy client is refused (fail closed), never
#     given a fresh limit, and the proxy keeps answering;
#   - no bypass: past its quota a client gets 429 for every method (OPTIONS included), and a
#     route's quota holds for //login, /%6Cogin, /LOGIN and /x/../login;
#   - headers: --limit 10/s --burst 20 states the policy the bucket enforces (q=20;w=2) and r
#     never above q;
#   - metrics: the proxy's /metrics (Prometheus text, on a listener of its own) counts exactly
#     the allowed, denied, keyless and ambiguous requests sent, by policy.
# Fails on any answer other than the one expected.
set -euo pipefail
cd "$(dirname "$0")/../.."

command -v curl >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null; }
# A debug build with the test command's workspace and features (scripts/test.sh): these
# checks are about answers, not speed, and the tests stage already built these examples so.
source scripts/test-features.sh
cargo build -q --workspace --features "$features" --example proxy --example upstream
BIN=target/debug/examples
UP_PORT=${UP_PORT:-19410}
source tollgate-tower/scripts/servers.sh

"$BIN/upstream" --listen "127.0.0.1:$UP_PORT" --workers 1 2>/dev/null &
pids+=("$!"); wait_port "$UP_PORT" "$!"

next_port=$((UP_PORT + 1))
proxy() { # args... -> sets PX (its base URL)
  local port=$next_port; next_port=$((next_port + 1))
  "$BIN/proxy" --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$UP_PORT" --workers 1 --quiet "$@" 2>/dev/null &
  pids+=("$!"); wait_port "$port" "$!"
  PX="http://127.0.0.1:$port"
}

fails=0
expect() { # what expected actual
  if [[ "$2" == "$3" ]]; then echo "ok    $1: $3"; else echo "FAIL  $1: expected $2, got $3"; fails=$((fails + 1)); fi
}
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

# 1. Bounded: two busy clients fill a map of two; a third is refused while they stay busy.
proxy --limit 1/h --max-keys 2 --key header:x-client
expect "client a, first" 200 "$(status -H 'x-client: a' "$PX/")"
expect "client b, first" 200 "$(status -H 'x-client: b' "$PX/")"
expect "client c, map full of busy keys" 429 "$(status -H 'x-client: c' "$PX/")"
expect "client a, still counted" 429 "$(status -H 'x-client: a' "$PX/")"
expect "client a twice in one request" 400 "$(status -H 'x-client: a' -H 'x-client: z' "$PX/")"

# 2. No bypass: every method past the quota; every spelling of a route.
proxy --limit 1/h --route /login=1/h
expect "GET, first" 200 "$(status "$PX/")"
for m in OPTIONS HEAD POST PUT DELETE PATCH; do
  if [[ $m == HEAD ]]; then got=$(status -I "$PX/"); else got=$(status -X "$m" "$PX/"); fi
  expect "$m past the quota" 429 "$got"
done
proxy --limit 100/h --route /login=1/h
expect "/login, first" 200 "$(status "$PX/login")"
for p in //login /%6Cogin /LOGIN /x/../login '/login;a=1' /login/; do
  expect "$p on the login quota" 429 "$(status --path-as-is "$PX$p")"
done
expect "/logins on the default quota" 200 "$(status "$PX/logins")"

# 3. Headers: the policy the bucket enforces, r never above q.
proxy --limit 10/s --burst 20
h=$(curl -s -D - -o /dev/null "$PX/" | tr -d '\r')
expect "RateLimit-Policy" '"default";q=20;w=2' "$(sed -n 's/^ratelimit-policy: //p' <<<"$h")"
expect "RateLimit" '"default";r=19;t=1' "$(sed -n 's/^ratelimit: //p' <<<"$h")"

# 4. Metrics: a known sequence, then every counter of each policy from /metrics.
m_port=$next_port; next_port=$((next_port + 1))
proxy --limit 2/h --route /login=1/h --key header:x-client --metrics "127.0.0.1:$m_port"
wait_port "$m_port" "${pids[-1]}"
got=""
for p in / / / /login /login; do got+="$(status -H 'x-client: a' "$PX$p") "; done
got+="$(status "$PX/") $(status -H 'x-client: a' -H 'x-client: b' "$PX/")"
expect "the sequence" "200 200 429 200 429 500 400" "$got"
page=$(curl -s "http://127.0.0.1:$m_port/metrics")
metric() { awk -v s="$1" '$1 == s { print $2 }' <<<"$page"; }
for want in \
  'tollgate_tower_decisions_total{policy="default",outcome="allowed"} 2' \
  'tollgate_tower_decisions_total{policy="default",outcome="denied"} 1' \
  'tollgate_tower_decisions_total{policy="default",outcome="shadow_denied"} 0' \
  'tollgate_tower_decisions_total{policy="/login",outcome="allowed"} 1' \
  'tollgate_tower_decisions_total{policy="/login",outcome="denied"} 1' \
  'tollgate_tower_missing_key_total{policy="default"} 1' \
  'tollgate_tower_missing_key_total{policy="/login"} 0' \
  'tollgate_tower_invalid_key_total{policy="default"} 1' \
  'tollgate_tower_backend_errors_total{policy="default"} 0'; do
  expect "${want% *}" "${want##* }" "$(metric "${want% *}")"
done
expect "the proxied port does not serve the counters" 0 "$(curl -s -H 'x-client: m' "$PX/metrics" | grep -c '^tollgate_tower_' || true)"

if (( fails > 0 )); then echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
