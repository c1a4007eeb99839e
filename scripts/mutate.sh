#!/usr/bin/env bash
# Mutation testing of the pool and its queues (docs/algorithms.md, "Mutation
# testing"). Not part of `make test`: each mutation rebuilds and runs tests.
#
# For each row of scripts/mutations/list.tsv (name, file, GNU sed script,
# cmake targets, ctest regex, what it breaks), in a scratch copy of this tree:
# apply the one mutation, rebuild the listed targets, run the ctest entries the
# regex selects, and report which test failed first and how long that test
# ran before it failed. Then the file is restored and the next row runs. A
# mutation nothing catches is a SURVIVOR: docs/algorithms.md must either name
# a test that catches it or explain why it is harmless.
#
#   scripts/mutate.sh [--keep] [--timeout <s>] [name-regex]
#
#   name-regex     only the mutations whose name matches (grep -E)
#   --timeout <s>  per ctest entry (default 120): a hang counts as caught by
#                  timeout, with the time it took
#   --keep         leave the scratch copy (default: deleted at the end)
#
# TPOOL_MUTATE_TESTS=<ctest regex> runs those tests for every mutation instead
# of each row's own (e.g. to ask whether a stress test alone catches it).
#
# Scratch: $TPOOL_MUTATE_DIR (default /tmp/tpool-mutate). Output: a table on
# stdout, the logs of each mutation under the scratch directory while it
# exists.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
list="$root/scripts/mutations/list.tsv"
scratch=${TPOOL_MUTATE_DIR:-/tmp/tpool-mutate}
keep=0
timeout=120
filter=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --keep) keep=1 ;;
    --timeout)
      timeout=${2:?"--timeout needs a number of seconds, e.g. --timeout 60"}
      shift
      ;;
    -h | --help)
      sed -n '2,27p' "$0"
      exit 0
      ;;
    -*)
      echo "mutate.sh: unknown option '$1'; see scripts/mutate.sh --help" >&2
      exit 2
      ;;
    *) filter=$1 ;;
  esac
  shift
done

src="$scratch/src"
logs="$scratch/logs"
cleanup() { if [[ $keep -eq 0 ]]; then rm -rf "$scratch"; fi; }
trap cleanup EXIT
mkdir -p "$src" "$logs"

# The tree as it is (tracked files, with uncommitted edits), without build/.
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
  tar --null -T - -cf -) | tar -xf - -C "$src"
# ccache keyed on paths relative to the checkout: the scratch copy reuses the
# main tree's cache for everything a mutation does not touch.
export CCACHE_BASEDIR="$src" CCACHE_NOHASHDIR=1
(cd "$src" && cmake --preset dev >"$logs/configure.log" 2>&1) || {
  echo "mutate.sh: configuring the scratch copy failed; see $logs/configure.log" >&2
  keep=1
  exit 1
}

printf '%-34s %-58s %s\n' "mutation" "caught by" "seconds to catch"
printf '%-34s %-58s %s\n' "--------" "---------" "----------------"
survivors=0
while IFS=$'\t' read -r name file script targets regex what; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  regex=${TPOOL_MUTATE_TESTS:-$regex}
  if [[ -n "$filter" ]] && ! grep -Eq -- "$filter" <<<"$name"; then continue; fi
  log="$logs/$name.log"
  cp "$root/$file" "$src/$file"
  sed -i -e "$script" "$src/$file"
  if cmp -s "$root/$file" "$src/$file"; then
    printf '%-34s %-58s %s\n' "$name" "NOT APPLIED (sed matched nothing in $file)" "-"
    survivors=$((survivors + 1))
    continue
  fi
  {
    echo "mutation $name: $what"
    diff -u "$root/$file" "$src/$file" || true
  } >"$log"
  # shellcheck disable=SC2086 # targets is a space-separated list
  if ! (cd "$src" && cmake --build --preset dev -j "$(nproc)" --target $targets) >>"$log" 2>&1; then
    printf '%-34s %-58s %s\n' "$name" "compile error (see the log)" "-"
    cp "$root/$file" "$src/$file"
    continue
  fi
  start=$(date +%s.%N)
  (cd "$src" && ctest --preset dev -R "$regex" --timeout "$timeout" --stop-on-failure) \
    >>"$log" 2>&1 && rc=0 || rc=$?
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  cp "$root/$file" "$src/$file"
  if [[ $rc -eq 0 ]]; then
    printf '%-34s %-58s %s\n' "$name" "SURVIVED ($regex)" "-"
    survivors=$((survivors + 1))
    continue
  fi
  # ctest: "  3/12 Test  #7: model.sleep_wake ....***Failed    0.05 sec"
  line=$(grep -E '\*\*\*(Failed|Timeout|Exception)|Subprocess aborted|SEGFAULT' "$log" | head -1 || true)
  test=$(sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' <<<"$line")
  secs=$(sed -E 's/.* ([0-9.]+) sec.*/\1/' <<<"$line")
  printf '%-34s %-58s %s (ctest run %.1f s)\n' "$name" "${test:-?}" "${secs:-?}" "$wall"
done <"$list"
echo "survivors: $survivors"
