#!/usr/bin/env bash
# tpoold against gearmand, same machine, same run (a measurement, not a test).
#
#   bench/peers/run.sh [BUILD_DIR]     (default: build/bench, else build/release)
#
# Starts, on 127.0.0.1 only: gearmand (Debian gearman-job-server) with 2
# workers running a no-op function, and tpoold with the example plugins; then
# runs, one after the other:
#   gearmand  sequential   gearman_client_do, one job at a time
#   gearmand  1000 in flight (task API, a window of 1000)
#   tpoold    sequential   tpoolctl bench --mode unary -c 1   (Execute, echo)
#   tpoold    1000 in flight   --mode unary -c 1000
#   tpoold    batch        --mode batch -c 1000 --batch 100  (SubmitBatch + Wait)
#   tpoold    stream       --mode stream -c 1000 --batch 100
# and writes every result (tpoolctl bench --json lines) to
# bench/results/peers.json. Stops every process it started, whatever happens.
# `make bench-report` (scripts/bench-report.sh) makes the table and the plot.
#
# Environment: PEERS_SEQ_JOBS (default 5000), PEERS_JOBS (default 100000),
# PEERS_PAYLOAD_BYTES (default 16).
set -euo pipefail
cd "$(dirname "$0")/../.."

build="${1:-}"
if [[ -z "$build" ]]; then
  for b in build/bench build/release build/dev; do
    [[ -x "$b/daemon/server/tpoold" && -x "$b/client/tpoolctl" ]] && { build="$b"; break; }
  done
fi
tpoold="$build/daemon/server/tpoold"
tpoolctl="$build/client/tpoolctl"
plugins="$build/plugins"
for f in "$tpoold" "$tpoolctl" "$plugins/echo.so"; do
  if [[ ! -e "$f" ]]; then
    echo "bench/peers: $f is missing; build tpoold, tpoolctl and the example plugins first" >&2
    echo "  (cmake --preset bench && cmake --build --preset bench, or: make bench)" >&2
    exit 1
  fi
done
command -v gearmand >/dev/null || {
  echo "bench/peers: gearmand is not installed; run scripts/install-deps.sh peers" >&2
  exit 1
}

seq_jobs="${PEERS_SEQ_JOBS:-5000}"
jobs="${PEERS_JOBS:-100000}"
bytes="${PEERS_PAYLOAD_BYTES:-16}"
payload="$(head -c "$bytes" /dev/zero | tr '\0' 'x')"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

peer="$build/bench/peers/peer_gearman"
if [[ ! -x "$peer" ]]; then
  # The bench preset builds it; other build trees get it compiled here.
  peer="$work/peer_gearman"
  c++ -std=c++20 -O2 bench/peers/gearman_peer.cc $(pkg-config --cflags --libs gearmand) -o "$peer"
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() {  # bounded poll: an external process coming up
  for _ in $(seq 1 300); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "bench/peers: nothing listens on 127.0.0.1:$1 after 30 s" >&2
  return 1
}

# gearmand: in-memory queue, default 4 I/O threads, loopback only.
gport="$(free_port)"
gearmand --listen=127.0.0.1 --port="$gport" --log-file="$work/gearmand.log" \
  --pid-file="$work/gearmand.pid" --verbose=ERROR &
pids+=($!)
wait_port "$gport"
for _ in 1 2; do
  "$peer" worker "$gport" &
  pids+=($!)
done

# tpoold: the packaged defaults, echo plugin, loopback, no metrics listener.
printf '[metrics]\nenabled = false\n' >"$work/tpoold.toml"
"$tpoold" --config "$work/tpoold.toml" --listen 127.0.0.1:0 --port-file "$work/tpoold.port" \
  --plugin-dir "$plugins" --log-level warn >"$work/tpoold.log" 2>&1 &
tpid=$!
pids+=($tpid)
for _ in $(seq 1 300); do [[ -s "$work/tpoold.port" ]] && break; sleep 0.1; done
tport="$(cat "$work/tpoold.port")"
ctl=("$tpoolctl" --address "127.0.0.1:$tport" --deadline 60s)
"${ctl[@]}" health >/dev/null

mkdir -p bench/results
out="bench/results/peers.json"
: >"$out"
label() { python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["system"]=sys.argv[1]; d["case"]=sys.argv[2]; print(json.dumps(d))' "$@"; }
run_case() {  # system case command...
  local system="$1" case="$2"
  shift 2
  echo "bench/peers: $system $case" >&2
  "$@" | label "$system" "$case" | tee -a "$out"
}

echo "bench/peers: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)," \
  "payload $bytes bytes" >&2
# Warm-up (connections, first-touch allocations); not recorded.
"$peer" client "$gport" 1000 100 "$bytes" >/dev/null
"${ctl[@]}" bench echo "$payload" -n 1000 -c 100 --quiet >/dev/null

run_case gearmand sequential "$peer" client "$gport" "$seq_jobs" 1 "$bytes"
run_case tpoold sequential "${ctl[@]}" bench echo "$payload" -n "$seq_jobs" -c 1 --json --quiet
run_case gearmand inflight_1000 "$peer" client "$gport" "$jobs" 1000 "$bytes"
run_case tpoold inflight_1000 "${ctl[@]}" bench echo "$payload" -n "$jobs" -c 1000 --json --quiet
run_case tpoold batch_1000 "${ctl[@]}" bench echo "$payload" -n "$jobs" -c 1000 --mode batch \
  --batch 100 --json --quiet
run_case tpoold stream_1000 "${ctl[@]}" bench echo "$payload" -n "$jobs" -c 1000 --mode stream \
  --batch 100 --json --quiet

python3 - "$out" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import json, sys, datetime
path, cores, load = sys.argv[1:4]
rows = [json.loads(l) for l in open(path) if l.strip()]
meta = {"date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), "cores": int(cores),
        "load_after": load}
json.dump({"meta": meta, "results": rows}, open(path, "w"), indent=1)
EOF
echo "bench/peers: results in $out; run scripts/bench-report.sh (make bench-report)" >&2
