# Sourced by tollgate-tower/scripts/load.sh and .ci/stages/72-tower-curl.sh: the servers they
# start in the background (pids), killed when the script exits, and a wait for one to listen.
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_port() { # port pid
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || { echo "server (pid $2) exited before listening" >&2; return 1; }
    sleep 0.1
  done
  echo "nothing listening on port $1 after 10 s" >&2; return 1
}
