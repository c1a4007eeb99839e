#!/usr/bin/env bash
# Run every benchmark executable built by the `bench` preset and keep its JSON.
#
#   scripts/run-benchmarks.sh [BUILD_DIR]        (default: build/bench)
#
# Runs each executable named bench_* under BUILD_DIR/bench (each bench/<area>/
# builds one or more) and writes BUILD_DIR's results to bench/results/<name>.json
# (gitignored), the console table to stdout.
# Environment:
#   BENCH_FILTER=<regex>      passed as --benchmark_filter (default: all)
#   BENCH_REPETITIONS=<n>     repetitions per case, medians reported (default 3)
#   BENCH_ARGS="..."          extra Google Benchmark flags
set -euo pipefail
cd "$(dirname "$0")/.."

build="${1:-build/bench}"
out="bench/results"
if [[ ! -d "$build/bench" ]]; then
  echo "run-benchmarks: no $build/bench: build the benchmarks first with" >&2
  echo "  cmake --preset bench && cmake --build --preset bench   (or: make bench)" >&2
  exit 1
fi
mapfile -t benches < <(find "$build/bench" -type f -name 'bench_*' -perm -u+x | sort)
if ((${#benches[@]} == 0)); then
  echo "run-benchmarks: no bench_* executables under $build/bench; is TPOOL_BUILD_BENCH on?" >&2
  exit 1
fi
mkdir -p "$out"

reps="${BENCH_REPETITIONS:-3}"
extra=()
[[ -n "${BENCH_FILTER:-}" ]] && extra+=("--benchmark_filter=${BENCH_FILTER}")
# shellcheck disable=SC2206  # BENCH_ARGS is a list of flags, split on purpose
[[ -n "${BENCH_ARGS:-}" ]] && extra+=(${BENCH_ARGS})

echo "run-benchmarks: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
for b in "${benches[@]}"; do
  name="$(basename "$b")"
  echo "== $name -> $out/$name.json"
  "$b" --benchmark_out="$out/$name.json" --benchmark_out_format=json \
    --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true "${extra[@]}"
done
echo "run-benchmarks: ${#benches[@]} benchmark executables, results in $out/"
