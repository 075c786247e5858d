#!/usr/bin/env bash
# Load test of the example proxy under wrk, on loopback:
#   upstream  trivial hello server (examples/upstream.rs)
#   none      the proxy with --no-limit (no layer)
#   tollgate  the proxy with tollgate-tower's layer (--key xff, 127.0.0.1 trusted)
#   governor  the same proxy on tower_governor 0.8 (examples/governor_proxy.rs, SmartIp key)
# each all-allowed (a quota no client reaches) and all-denied (1 request per hour, every key
# used up by a warm-up first), with 1 client key and with 100,000 (scripts/keys.lua varies
# X-Forwarded-For; the 100,000-key runs are measured after a warm-up that sends every key). Reported per run: requests/s from wrk, and the proxy's CPU time
# per request from /proc/<pid>/stat (utime + stime over the run / requests completed).
#
# The proxy runs on CPU 0 with one worker thread; wrk and the upstream share CPU 1 (when
# the machine has 2 or more CPUs). CPU per request does not depend on how fast wrk is.
#
# usage: scripts/load.sh            short form: 3 s per run, ~60 s in all
#        scripts/load.sh --long     long form: 10 s per run, 3 interleaved rounds (~10 min)
#        DURATION=8 CONNECTIONS=64 scripts/load.sh   any other settings
#
# Exit status: non-zero only when something is broken (a build, a server that does not
# start, wrk failing, an all-allowed run with refusals, an all-denied run without them).
# The speed expectations are reported as met or missed, never turned into a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-3}
ROUNDS=${ROUNDS:-1}
CONNECTIONS=${CONNECTIONS:-32}
MANY=${MANY:-100000}
if [[ "${1:-}" == "--long" ]]; then
  DURATION=${LONG_DURATION:-10}
  ROUNDS=${LONG_ROUNDS:-3}
fi
OUT=${OUT:-target/tower-load}
mkdir -p "$OUT"

if ! command -v wrk >/dev/null; then
  echo "installing wrk" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk >/dev/null
fi

nice -n 10 cargo build --release -q -p tollgate-tower --example proxy --example governor_proxy --example upstream
BIN=target/release/examples

ncpu=$(nproc)
if (( ncpu >= 2 )); then SERVER_CPU=0; CLIENT_CPU=1; else SERVER_CPU=0; CLIENT_CPU=0; fi
TICKS=$(getconf CLK_TCK)

UP_PORT=${UP_PORT:-19400}
PX_PORT=${PX_PORT:-19401}
source tollgate-tower/scripts/servers.sh

cpu_ticks() { # pid -> utime+stime in clock ticks (fields 14 and 15; comm may hold spaces)
  local stat; stat=$(<"/proc/$1/stat"); stat=${stat##*) }
  read -r -a f <<<"$stat"
  echo $(( f[11] + f[12] ))
}

taskset -c "$CLIENT_CPU" "$BIN/upstream" --listen "127.0.0.1:$UP_PORT" --workers 1 2>"$OUT/upstream.log" &
UP_PID=$!; pids+=("$UP_PID")
wait_port "$UP_PORT" "$UP_PID"

results="$OUT/results.tsv"
printf 'variant\tload\tkeys\treq_per_s\tcpu_us_per_req\tnon2xx\trequests\n' >"$results"

run() { # variant load keys
  local variant=$1 load=$2 keys=$3 bin limit args=()
  case "$load" in allowed) limit=100000000/s ;; denied) limit=1/h ;; esac
  case "$variant" in
    none) bin=$BIN/proxy; args=(--no-limit) ;;
    tollgate) bin=$BIN/proxy; args=(--limit "$limit" --key xff --trusted-proxy 127.0.0.1/32 --max-keys $((MANY * 2)) --quiet) ;;
    governor) bin=$BIN/governor_proxy; args=(--limit "$limit" --key xff) ;;
  esac
  taskset -c "$SERVER_CPU" "$bin" --listen "127.0.0.1:$PX_PORT" --upstream "http://127.0.0.1:$UP_PORT" \
    --workers 1 "${args[@]}" 2>"$OUT/$variant-$load-$keys.log" &
  local pid=$!; pids+=("$pid")
  wait_port "$PX_PORT" "$pid"
  local url="http://127.0.0.1:$PX_PORT/"
  # Warm-up: send every key at least once (wrk's one thread cycles through them in order),
  # so an all-denied run finds each key used up, and an all-allowed run measures a map that
  # already holds every key, as a long-running proxy's does. (No map without the layer.)
  if [[ "$variant" != none && ( "$load" == denied || "$keys" != 1 ) ]]; then
    local sent=0 n empty=0
    while (( sent <= keys )); do
      START=$sent KEYS=$keys taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" -d1s \
        -s tollgate-tower/scripts/keys.lua "$url" >"$OUT/warmup.txt"
      n=$(awk '/requests in/ {print $1}' "$OUT/warmup.txt"); n=${n:-0}
      if (( n == 0 )); then # a stalled second on a loaded machine; five in a row is a fault
        (( ++empty < 5 )) || { echo "FAIL: warm-up of $variant $load $keys completes no request" >&2; exit 1; }
      else
        empty=0
      fi
      sent=$(( sent + n ))
    done
  fi
  local before; before=$(cpu_ticks "$pid")
  KEYS=$keys taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" -d"$DURATION"s \
    -s tollgate-tower/scripts/keys.lua "$url" >"$OUT/wrk.txt"
  local after; after=$(cpu_ticks "$pid")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local reqs rps non2xx
  reqs=$(awk '/requests in/ {print $1}' "$OUT/wrk.txt")
  rps=$(awk '/^Requests\/sec/ {print $2}' "$OUT/wrk.txt")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$OUT/wrk.txt"); non2xx=${non2xx:-0}
  if [[ -z "$reqs" || "$reqs" == 0 ]]; then
    echo "FAIL: $variant $load $keys: wrk completed no request" >&2; cat "$OUT/wrk.txt" >&2; exit 1
  fi
  local cpu_us
  cpu_us=$(awk -v t=$(( after - before )) -v hz="$TICKS" -v n="$reqs" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$variant" "$load" "$keys" "$rps" "$cpu_us" "$non2xx" "$reqs" >>"$results"
  printf '%-9s %-8s %7s keys: %10s req/s  %6s µs CPU/req  %8s non-2xx of %s\n' \
    "$variant" "$load" "$keys" "$rps" "$cpu_us" "$non2xx" "$reqs"
  if [[ "$load" == allowed && "$non2xx" != 0 ]]; then
    echo "FAIL: $variant all-allowed run refused $non2xx requests" >&2; exit 1
  fi
  # Denied runs: every key was used up by the warm-up, so (nearly) all must be refused.
  if [[ "$load" == denied ]] && (( non2xx * 100 < reqs * 99 )); then
    echo "FAIL: $variant all-denied run refused only $non2xx of $reqs" >&2; exit 1
  fi
}

echo "wrk -t1 -c$CONNECTIONS -d${DURATION}s, proxy on CPU $SERVER_CPU (1 worker), wrk + upstream on CPU $CLIENT_CPU"
for round in $(seq "$ROUNDS"); do
  (( ROUNDS == 1 )) || echo "round $round of $ROUNDS"
  for keys in 1 "$MANY"; do
    run none allowed "$keys"
    run tollgate allowed "$keys"
    run governor allowed "$keys"
    run tollgate denied "$keys"
    run governor denied "$keys"
  done
done

# Ratios from this one run, against what the layer is built for. Over several rounds (interleaved, so slow phases
# of a shared machine hit every variant), each figure is the best round's: the highest
# requests/s and the lowest CPU per request, since noise from other load only adds cost.
awk -F'\t' -v many="$MANY" '
  NR > 1 {
    if (!(($1, $2, $3) in rps) || $4 > rps[$1, $2, $3]) rps[$1, $2, $3] = $4
    if (!(($1, $2, $3) in cpu) || $5 < cpu[$1, $2, $3]) cpu[$1, $2, $3] = $5
  }
  function verdict(ok) { return ok ? "met" : "MISSED" }
  END {
    for (i = 0; i < 2; i++) {
      k = i ? many : 1
      added = cpu["tollgate", "allowed", k] - cpu["none", "allowed", k]
      printf "\n%s key(s):\n", k
      printf "  layer CPU per allowed request: %+.2f µs (expected <= 1 µs): %s\n", added, verdict(added <= 1)
      printf "  tollgate deny/allow req/s: %.2f (expected >= 1): %s\n", rps["tollgate", "denied", k] / rps["tollgate", "allowed", k], verdict(rps["tollgate", "denied", k] >= rps["tollgate", "allowed", k])
      printf "  tollgate/governor req/s, allowed: %.2f, denied: %.2f (expected > 1): %s\n", rps["tollgate", "allowed", k] / rps["governor", "allowed", k], rps["tollgate", "denied", k] / rps["governor", "denied", k], verdict(rps["tollgate", "allowed", k] > rps["governor", "allowed", k] && rps["tollgate", "denied", k] > rps["governor", "denied", k])
      printf "  tollgate/governor CPU per request, allowed: %.2f, denied: %.2f\n", cpu["tollgate", "allowed", k] / cpu["governor", "allowed", k], cpu["tollgate", "denied", k] / cpu["governor", "denied", k]
    }
  }' "$results" | tee "$OUT/summary.txt"
echo
echo "results: $results"
