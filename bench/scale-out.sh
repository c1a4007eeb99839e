#!/usr/bin/env bash
# tpoolctl bench against one tpoold replica, then against three behind one
# client (gRPC round_robin over IP:port,IP:port,IP:port): the aggregate rate
# next to one replica's (docs/operations.md, "Scaling out"; docs/benchmarks.md).
#
#   bench/scale-out.sh [BUILD_DIR] [N] [MODE]     (default build/release 200000 stream)
#
# All on loopback, on one machine: the three replicas share its cores, so on a
# 2-core box this measures the client's balancing and the daemons' overhead,
# not a cluster's capacity. Run it only when the machine is otherwise idle
# (`uptime` load < 1); it refuses otherwise unless FORCE=1.
set -euo pipefail
build=${1:-build/release}
n=${2:-200000}
mode=${3:-stream}
tpoold="$build/daemon/server/tpoold"
tpoolctl="$build/client/tpoolctl"
plugins=$(dirname "$(find "$build" -name echo.so -print -quit)")
[[ -x "$tpoold" && -x "$tpoolctl" ]] || { echo "scale-out.sh: build $build first (make release)" >&2; exit 2; }
load=$(cut -d' ' -f1 /proc/loadavg)
if [[ "${FORCE:-0}" != 1 ]] && awk -v l="$load" 'BEGIN {exit !(l >= 1)}'; then
  echo "scale-out.sh: load average $load >= 1: the numbers would measure the other load (FORCE=1 to run anyway)" >&2
  exit 3
fi
work=$(mktemp -d /tmp/tpoold-scale-out.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
printf '[metrics]\nenabled = false\n' >"$work/tpoold.toml"
addrs=()
for i in 0 1 2; do
  "$tpoold" --config "$work/tpoold.toml" --plugin-dir "$plugins" --listen 127.0.0.1:0 \
    --port-file "$work/port$i" --admin-listen "unix:$work/admin$i.sock" --replica-id "replica-$i" --log-level warn >"$work/log$i" 2>&1 &
  pids+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 300); do [[ -s "$work/port$i" ]] && break; sleep 0.1; done
  [[ -s "$work/port$i" ]] || { echo "scale-out.sh: replica $i did not start: $(cat "$work/log$i")" >&2; exit 1; }
  addrs+=("127.0.0.1:$(cat "$work/port$i")")
done
one=${addrs[0]}
three=$(IFS=,; echo "${addrs[*]}")
echo "scale-out.sh: $n echo jobs, --mode $mode, load $load"
echo "== one replica ($one)"
"$tpoolctl" --address "$one" bench echo x -n "$n" --mode "$mode" --quiet
echo "== three replicas ($three)"
"$tpoolctl" --address "$three" bench echo x -n "$n" --mode "$mode" --quiet
