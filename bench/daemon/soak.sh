#!/usr/bin/env bash
# Soak benchmark (docs/benchmarks.md, "Soak"): one tpoold, a long run of echo
# jobs through Stream and then through SubmitBatch + Wait with the result
# store filled to its caps, and the daemon's RSS and open file descriptors
# sampled every second. Writes a CSV and a gnuplot PNG, and prints the slope
# of each after a warm-up. Not a test: nothing here passes or fails.
#
# usage: bench/daemon/soak.sh [BUILD_DIR]        (default build/release)
# environment (all optional):
#   STREAM_JOBS=10000000  jobs through one Stream (tpoolctl bench --mode stream)
#   SUBMIT_JOBS=1000000   jobs through SubmitBatch + Wait (--mode batch)
#   WARMUP_S=30           seconds left out of the slope
#   OUT_DIR=/tmp/tpoold-soak   the CSV, the daemon's log, the bench summaries
#   PNG=docs/img/soak.png      the plot
#   ANALYZE_ONLY=1        skip the run: slopes and plot from OUT_DIR/soak.csv
# A scaled-down run: STREAM_JOBS=1000000 SUBMIT_JOBS=200000 bench/daemon/soak.sh build/dev
set -euo pipefail

BUILD=${1:-build/release}
STREAM_JOBS=${STREAM_JOBS:-10000000}
SUBMIT_JOBS=${SUBMIT_JOBS:-1000000}
WARMUP_S=${WARMUP_S:-30}
OUT_DIR=${OUT_DIR:-/tmp/tpoold-soak}
PNG=${PNG:-docs/img/soak.png}

TPOOLD=$BUILD/daemon/server/tpoold
TPOOLCTL=$BUILD/client/tpoolctl
PLUGINS=$BUILD/plugins
for f in "$TPOOLD" "$TPOOLCTL"; do
  [[ -x $f ]] || { echo "soak: $f is missing; build it first (cmake --build --preset release)" >&2; exit 2; }
done
command -v gnuplot >/dev/null || { echo "soak: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 2; }

mkdir -p "$OUT_DIR" "$(dirname "$PNG")"
CSV=$OUT_DIR/soak.csv
if [[ -z ${ANALYZE_ONLY:-} ]]; then
# The result store at its caps: results.max_entries / max_bytes are the
# defaults (100000 entries, 64 MiB); SUBMIT_JOBS above that evicts all along.
cat >"$OUT_DIR/tpoold.toml" <<EOF
[server]
listen = "127.0.0.1:0"
port_file = "$OUT_DIR/port"
[metrics]
enabled = false
EOF
rm -f "$OUT_DIR/port"
"$TPOOLD" --config "$OUT_DIR/tpoold.toml" --plugin-dir "$PLUGINS" --log-level warn \
  >"$OUT_DIR/tpoold.log" 2>&1 &
PID=$!
SAMPLER=
cleanup() {
  [[ -n $SAMPLER ]] && kill "$SAMPLER" 2>/dev/null || true
  kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 300); do [[ -s $OUT_DIR/port ]] && break; sleep 0.1; done
[[ -s $OUT_DIR/port ]] || { echo "soak: tpoold did not start; see $OUT_DIR/tpoold.log" >&2; exit 1; }
ADDR=127.0.0.1:$(cat "$OUT_DIR/port")

# One sample a second: seconds since start, RSS in KiB, open fds, phase.
echo "t_s,rss_kib,fds,phase" >"$CSV"
echo idle >"$OUT_DIR/phase"
(
  t=0
  while kill -0 "$PID" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$PID/status" 2>/dev/null || echo 0)
    fds=$(ls "/proc/$PID/fd" 2>/dev/null | wc -l)
    echo "$t,$rss,$fds,$(cat "$OUT_DIR/phase")" >>"$CSV"
    sleep 1
    t=$((t + 1))
  done
) &
SAMPLER=$!

echo "soak: tpoold pid $PID at $ADDR; load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo stream >"$OUT_DIR/phase"
"$TPOOLCTL" --address "$ADDR" bench echo soak-payload -n "$STREAM_JOBS" -c 4096 \
  --mode stream --batch 256 --quiet | tee "$OUT_DIR/stream.txt"
echo submit >"$OUT_DIR/phase"
"$TPOOLCTL" --address "$ADDR" bench echo soak-payload -n "$SUBMIT_JOBS" -c 256 \
  --mode batch --batch 64 --quiet | tee "$OUT_DIR/submit.txt"
echo idle >"$OUT_DIR/phase"
sleep 5  # a few idle samples after the load
kill "$SAMPLER" 2>/dev/null || true
SAMPLER=
fi

# Least-squares slope of each phase, leaving out its first WARMUP_S seconds
# (or its first half, if shorter), per minute:
# "phase rss_KiB_per_min fds_per_min samples".
SLOPES=$(awk -F, -v w="$WARMUP_S" 'NR == FNR { if (FNR > 1) { if (!($4 in a)) a[$4] = $1; b[$4] = $1 }; next }
  FNR > 1 {
    if (!($4 in t0)) { t0[$4] = $1; order[++k] = $4 }
    skip = (b[$4] - a[$4]) / 2; if (skip > w) skip = w
    if ($1 < t0[$4] + skip) next
    p = $4; n[p]++; sx[p] += $1; sxx[p] += $1 * $1
    sr[p] += $2; sxr[p] += $1 * $2; sf[p] += $3; sxf[p] += $1 * $3 }
  END { for (i = 1; i <= k; i++) { p = order[i]; d = n[p] * sxx[p] - sx[p] * sx[p]
          if (n[p] < 2 || d == 0) { printf "%s n/a n/a %d\n", p, n[p]; continue }
          printf "%s %.1f %.3f %d\n", p, 60 * (n[p] * sxr[p] - sx[p] * sr[p]) / d,
                 60 * (n[p] * sxf[p] - sx[p] * sf[p]) / d, n[p] } }' "$CSV" "$CSV")
PEAK=$(awk -F, 'NR > 1 && $2 > m { m = $2 } END { print m }' "$CSV")
{
  echo "soak: $(($(wc -l <"$CSV") - 1)) samples; peak RSS $PEAK KiB; slopes after ${WARMUP_S} s of each phase:"
  echo "$SLOPES" | awk '{ printf "  %-7s RSS %s KiB/min, fds %s /min (%d samples)\n", $1, $2, $3, $4 }'
} | tee "$OUT_DIR/slope.txt"
TITLE_SLOPES=$(echo "$SLOPES" | awk '$1 != "idle" { printf "%s%s: RSS %s KiB/min, fds %s/min", sep, $1, $2, $3; sep = "; " }')

gnuplot <<EOF
set terminal pngcairo size 1000,500 font ",10"
set output "$PNG"
set datafile separator ","
set title "tpoold soak: $STREAM_JOBS echo jobs via Stream, then $SUBMIT_JOBS via SubmitBatch+Wait\nslopes after ${WARMUP_S} s of each phase: $TITLE_SLOPES"
set xlabel "seconds"
set ylabel "RSS (MiB)"
set y2label "open fds"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set key top left
plot "$CSV" using 1:(\$2/1024) skip 1 with lines lw 2 title "RSS", \
     "$CSV" using 1:3 skip 1 axes x1y2 with lines lw 2 title "open fds"
EOF
echo "soak: wrote $CSV and $PNG"
