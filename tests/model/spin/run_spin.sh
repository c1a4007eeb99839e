#!/usr/bin/env bash
# One Spin check of a Promela model: generate the verifier, compile it, run
# it, and judge its report.
#
#   run_spin.sh --model FILE --workdir DIR --claim safe|live --expect pass|fail
#               [--spin PATH] [--cc PATH] [--nfair N] [--memlim MB] [-- SPIN_DEFINES...]
#
#   --claim safe   safety search against the never claim `safe`:  ./pan -N safe
#   --claim live   acceptance cycles under weak fairness:          ./pan -a -f -N live
#   --nfair N      pan's NFAIR for the liveness search (default 2: enough
#                  for wake.pml; lanes.pml has more processes and needs 3)
#   --memlim MB    pan's memory bound (default 2048); a search that reaches it
#                  is incomplete and fails
#   --expect pass  exit 0 only if pan says "errors: 0" after a complete search
#   --expect fail  exit 0 only if pan reports errors > 0 (a known-bad variant);
#                  the counterexample is replayed into DIR/counterexample.txt
#
# Everything pan writes (pan.c, pan, the trail) stays in DIR, which is emptied
# first, so checks running in parallel must get different directories.
set -euo pipefail

model="" workdir="" claim="" expect="" spin="spin" cc="cc" nfair=2 memlim=2048
defines=()
while (($#)); do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --workdir) workdir="$2"; shift 2 ;;
    --claim) claim="$2"; shift 2 ;;
    --expect) expect="$2"; shift 2 ;;
    --spin) spin="$2"; shift 2 ;;
    --cc) cc="$2"; shift 2 ;;
    --nfair) nfair="$2"; shift 2 ;;
    --memlim) memlim="$2"; shift 2 ;;
    --) shift; defines=("$@"); break ;;
    *) echo "run_spin.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$model" || -z "$workdir" || ! "$claim" =~ ^(safe|live)$ || ! "$expect" =~ ^(pass|fail)$ ]]; then
  echo "usage: run_spin.sh --model FILE --workdir DIR --claim safe|live --expect pass|fail" \
       "[--spin PATH] [--cc PATH] [-- SPIN_DEFINES...]" >&2
  exit 2
fi
if ! command -v "$spin" >/dev/null 2>&1; then
  echo "run_spin.sh: Spin ('$spin') not found; run scripts/install-deps.sh (Debian package spin)" >&2
  exit 2
fi
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "run_spin.sh: C compiler ('$cc') not found; install gcc" >&2
  exit 2
fi

model="$(realpath "$model")"
rm -rf "$workdir"
mkdir -p "$workdir"
cd "$workdir"
cp "$model" model.pml

echo "== spin ${defines[*]} -a $(basename "$model")  [claim $claim, expect $expect]"
"$spin" "${defines[@]}" -a model.pml >spin.out 2>&1 || { cat spin.out; exit 1; }

# COLLAPSE: compress state vectors (memory); MEMLIM: stop at 2 GiB (--memlim) rather than
# swap the shared machine; NOBOUNDCHECK: the model's indices are in range by
# construction (every index is `me`, a scan position mod NW, or a constant).
# A known-bad variant fails within a few hundred states: compiling pan.c
# costs more than searching, so it is not optimised.
cflags=(-w -DCOLLAPSE -DMEMLIM="$memlim" -DNOBOUNDCHECK)
if [[ "$expect" == pass ]]; then cflags+=(-O2); else cflags+=(-O0); fi
panflags=(-m200000 -N "$claim")
if [[ "$claim" == safe ]]; then
  cflags+=(-DSAFETY)
else
  # Weak fairness needs room for every process (pan's default is 2).
  cflags+=(-DNFAIR="$nfair")
  panflags=(-a -f "${panflags[@]}")
fi
"$cc" "${cflags[@]}" -o pan pan.c

set +e
./pan "${panflags[@]}" >pan.out 2>&1
pan_rc=$?
set -e
cat pan.out

errors="$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' pan.out | tail -n 1)"
if [[ -z "$errors" ]]; then
  echo "FAIL: pan (exit $pan_rc) printed no 'errors:' line; see $workdir/pan.out" >&2
  exit 1
fi

if [[ "$expect" == pass ]]; then
  if [[ "$errors" != 0 ]]; then
    "$spin" "${defines[@]}" -t -p -g model.pml >counterexample.txt 2>&1 || true
    tail -n 60 counterexample.txt
    echo "FAIL: the model violates '$claim' ($errors error(s)); counterexample:" \
         "$workdir/counterexample.txt" >&2
    exit 1
  fi
  if grep -q -e "max search depth too small" -e "out of memory" -e "MEMLIM" -e "Search not completed" pan.out; then
    echo "FAIL: the search did not complete (depth or memory limit); 'errors: 0' proves nothing" >&2
    exit 1
  fi
  echo "PASS: '$claim' holds in every reachable state (complete search)"
else
  if [[ "$errors" == 0 ]]; then
    echo "FAIL: this known-bad variant (${defines[*]}) was expected to violate '$claim'," \
         "but pan found no error: the check cannot tell good from bad" >&2
    exit 1
  fi
  "$spin" "${defines[@]}" -t -p -g model.pml >counterexample.txt 2>&1 || true
  echo "PASS: pan rejects the known-bad variant ($errors error(s));" \
       "counterexample: $workdir/counterexample.txt"
fi
