#!/usr/bin/env bash
# tpoold against gearmand and beanstalkd, same machine, same run (a
# measurement, not a test).
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
# Then the durable rows (issue 17): beanstalkd (Debian beanstalkd) with its
# binlog in a temporary directory and an fsync after every write (-b DIR -f 0),
# and a second tpoold with the durable store ([store] path in the same
# temporary directory) and its /metrics on a loopback port:
#   beanstalkd  durable_sequential     peer_beanstalk: put, reserve, delete, one job at a time
#   beanstalkd  durable_pipelined_100  windows of 100: 100 puts, 100 reserves, 100 deletes
#   tpoold      {nondurable,durable}_{batch,stream}_{1,100,1000}
#               tpoolctl bench --mode batch|stream -c B --batch B [--durable]:
#               one SubmitBatch (or Stream message) of B jobs in flight at a time
#   tpoold      {nondurable,durable}_unary_1
#               tpoolctl bench --mode unary -c 1 [--durable]: one Execute at a time
# Every tpoold run here is bracketed by two scrapes of /metrics, each taken once
# the store's commit count stopped moving (the last end records); the row's
# "store" (bench/peers/store_metrics.py) has the commits (= fsyncs) per 1,000
# jobs and the commit p50/p99 of that run. A tpoold without [store] (before
# issue 17's store lands) is detected with --check-config and its durable rows
# are skipped, saying so.
# Every result (tpoolctl bench --json lines, the peers' lines shaped like them)
# goes to bench/results/peers.json; the ratios of the durable rows are printed
# at the end. Stops every process it started, whatever happens.
# `make bench-report` (scripts/bench-report.sh) makes the tables and the plots.
#
# Environment: PEERS_SEQ_JOBS (default 5000), PEERS_JOBS (default 100000),
# PEERS_PAYLOAD_BYTES (default 16); for the durable rows PEERS_DURABLE_SEQ_JOBS
# (one at a time and batch 1, default 1000), PEERS_DURABLE_JOBS (batches of 100
# and 1,000, beanstalkd pipelined; default 10000); PEERS_ONLY=durable runs only
# the durable rows (gearmand is then neither needed nor started; a report made
# from those results has no gearmand table, so `make bench` runs everything).
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
only="${PEERS_ONLY:-all}"
if [[ "$only" != all && "$only" != durable ]]; then
  echo "bench/peers: PEERS_ONLY='$only' is not all or durable" >&2
  exit 2
fi
needs=(beanstalkd)
[[ "$only" == all ]] && needs+=(gearmand)
for prog in "${needs[@]}"; do
  command -v "$prog" >/dev/null || {
    echo "bench/peers: $prog is not installed; run scripts/install-deps.sh peers" >&2
    exit 1
  }
done

seq_jobs="${PEERS_SEQ_JOBS:-5000}"
jobs="${PEERS_JOBS:-100000}"
bytes="${PEERS_PAYLOAD_BYTES:-16}"
dseq_jobs="${PEERS_DURABLE_SEQ_JOBS:-1000}"
djobs="${PEERS_DURABLE_JOBS:-10000}"
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
if [[ "$only" == all && ! -x "$peer" ]]; then
  # The bench preset builds it; other build trees get it compiled here.
  peer="$work/peer_gearman"
  c++ -std=c++20 -O2 bench/peers/gearman_peer.cc $(pkg-config --cflags --libs gearmand) -o "$peer"
fi
bpeer="$build/bench/peers/peer_beanstalk"
if [[ ! -x "$bpeer" ]]; then
  bpeer="$work/peer_beanstalk"
  c++ -std=c++20 -O2 bench/peers/beanstalk_peer.cc -o "$bpeer"
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

if [[ "$only" == all ]]; then
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
fi

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
if [[ "$only" == all ]]; then
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
fi

# --- The durable rows (issue 17) ---------------------------------------------
# beanstalkd: binlog in $work/beanstalkd, fsync after every write (-f 0).
mkdir -p "$work/beanstalkd"
bport="$(free_port)"
beanstalkd -l 127.0.0.1 -p "$bport" -b "$work/beanstalkd" -f 0 2>"$work/beanstalkd.log" &
pids+=($!)
wait_port "$bport"
"$bpeer" client "$bport" 100 10 "$bytes" >/dev/null  # warm-up: the binlog file, connections
run_case beanstalkd durable_sequential "$bpeer" client "$bport" "$dseq_jobs" 1 "$bytes"
run_case beanstalkd durable_pipelined_100 "$bpeer" client "$bport" "$djobs" 100 "$bytes"

# tpoold with the durable store (its journal in $work) and /metrics on loopback.
cat >"$work/tpoold-store.toml" <<EOF_TOML
[metrics]
listen = "127.0.0.1:0"
port_file = "$work/tpoold-store.metrics-port"
[store]
path = "$work/jobs.db"
EOF_TOML
store_flags=(--listen 127.0.0.1:0 --port-file "$work/tpoold-store.port" --admin-listen none
  --plugin-dir "$plugins" --log-level warn)
if ! "$tpoold" --check-config "$work/tpoold-store.toml" "${store_flags[@]}" \
  >"$work/tpoold-store.check" 2>&1; then
  echo "bench/peers: this tpoold refuses a config with [store] path, so it has no durable" \
    "store yet (issue 17); the tpoold durable rows are skipped. Its words:" >&2
  sed 's/^/  /' "$work/tpoold-store.check" >&2
else
  "$tpoold" --config "$work/tpoold-store.toml" "${store_flags[@]}" >"$work/tpoold-store.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do
    [[ -s "$work/tpoold-store.port" && -s "$work/tpoold-store.metrics-port" ]] && break
    sleep 0.1
  done
  sport="$(cat "$work/tpoold-store.port")"
  metrics="http://127.0.0.1:$(cat "$work/tpoold-store.metrics-port")/metrics"
  sctl=("$tpoolctl" --address "127.0.0.1:$sport" --deadline 60s)
  "${sctl[@]}" health >/dev/null
  # Warm-up, both kinds: the journal's file and first commits are not measured.
  "${sctl[@]}" bench echo "$payload" -n 200 -c 100 --mode stream --batch 100 --quiet >/dev/null
  "${sctl[@]}" bench echo "$payload" -n 200 -c 100 --mode stream --batch 100 --durable \
    --quiet >/dev/null
  run_store_case() {  # case command...: scrapes /metrics around the run
    local case="$1"
    shift
    echo "bench/peers: tpoold $case" >&2
    bench/peers/store_metrics.py settle "$metrics" "$work/before.prom"
    "$@" >"$work/row.json"
    bench/peers/store_metrics.py settle "$metrics" "$work/after.prom"
    bench/peers/store_metrics.py annotate "$work/before.prom" "$work/after.prom" \
      <"$work/row.json" | label tpoold "$case" | tee -a "$out"
  }
  for mode in batch stream; do
    for b in 1 100 1000; do
      n="$djobs"
      ((b == 1)) && n="$dseq_jobs"
      # Non-durable, then durable, next to each other in time.
      for kind in nondurable durable; do
        flag=()
        [[ "$kind" == durable ]] && flag=(--durable)
        run_store_case "${kind}_${mode}_$b" "${sctl[@]}" bench echo "$payload" -n "$n" -c "$b" \
          --mode "$mode" --batch "$b" "${flag[@]}" --json --quiet
      done
    done
  done
  # Execute, one call at a time: tpoold's one-job request/response (its reply
  # is the job's result, one round trip), next to beanstalkd's one at a time.
  for kind in nondurable durable; do
    flag=()
    [[ "$kind" == durable ]] && flag=(--durable)
    run_store_case "${kind}_unary_1" "${sctl[@]}" bench echo "$payload" -n "$dseq_jobs" -c 1 \
      --mode unary "${flag[@]}" --json --quiet
  done
fi

python3 - "$out" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import json, sys, datetime
path, cores, load = sys.argv[1:4]
rows = [json.loads(l) for l in open(path) if l.strip()]
meta = {"date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), "cores": int(cores),
        "load_after": load}
json.dump({"meta": meta, "results": rows}, open(path, "w"), indent=1)

# The durable rows' ratios, measured in this run.
by = {(r["system"], r["case"]): r for r in rows}
def rate(system, case):
    r = by.get((system, case))
    return r["jobs_per_s"] if r else None
def show(what, a, b, target=""):
    if a is None or b is None or b == 0:
        return
    print(f"bench/peers: {what}: {a:,.0f} / {b:,.0f} jobs/s = {a / b:.2f}x{target}", file=sys.stderr)
for mode, batches in (("batch", (1, 100, 1000)), ("stream", (1, 100, 1000)), ("unary", (1,))):
    for b in batches:
        show(f"tpoold durable / non-durable, {mode} {b}", rate("tpoold", f"durable_{mode}_{b}"),
             rate("tpoold", f"nondurable_{mode}_{b}"), " (target >= 0.5x at 100)" if b == 100 else "")
        s = (by.get(("tpoold", f"durable_{mode}_{b}")) or {}).get("store")
        if s:
            print(f"bench/peers:   durable {mode} {b}: {s['fsyncs_per_1000_jobs']} fsyncs per 1,000 jobs,"
                  f" commit p50 {s['commit_p50_ms']} ms, p99 {s['commit_p99_ms']} ms", file=sys.stderr)
for mode in ("batch", "stream", "unary"):
    show(f"tpoold durable {mode} 1 / beanstalkd durable one at a time",
         rate("tpoold", f"durable_{mode}_1"), rate("beanstalkd", "durable_sequential"),
         " (target >= 1x)")
    if mode == "unary":
        continue
    show(f"tpoold durable {mode} 100 / beanstalkd durable pipelined 100",
         rate("tpoold", f"durable_{mode}_100"), rate("beanstalkd", "durable_pipelined_100"),
         " (target >= 10x)")
EOF
echo "bench/peers: results in $out; run scripts/bench-report.sh (make bench-report)" >&2
