#!/usr/bin/env bash
# run_fuzz.sh BIN WORK_DIR SEED_DIR RUNS [libFuzzer flags...]
#
# One libFuzzer run: new inputs go to WORK_DIR (in the build tree), the seed
# corpus is only read. Exits non-zero on any finding (crash, sanitizer report,
# leak, timeout) and leaves the reproducer in WORK_DIR/../artifacts/.
#
# RUNS > 0 (ctest): WORK_DIR is emptied first and the caller passes -seed=N,
# so a bounded run starts from the seeds alone and is the same run every time.
# RUNS = -1 (make fuzz, with -max_total_time): WORK_DIR keeps what earlier
# runs found and the seed is random, so each run explores further.
set -euo pipefail
bin=$1 work=$2 seeds=$3 runs=$4
shift 4
if ((runs > 0)); then rm -rf "$work"; fi
mkdir -p "$work" "$work/../artifacts"
exec "$bin" -runs="$runs" -print_final_stats=1 -timeout=10 -rss_limit_mb=4096 \
  -artifact_prefix="$work/../artifacts/" "$@" "$work" "$seeds"
