#!/usr/bin/env bash
# Runs one client example against its own tpoold on an ephemeral loopback port
# with the example plugins; stops the daemon (SIGTERM, exit 0) whatever happens.
#   run_example.sh TPOOLD PLUGIN_DIR EXAMPLE
set -euo pipefail
tpoold="$1" plugins="$2" example="$3"
work="$(mktemp -d)"
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
printf '[server]\nadmin_listen = "unix:%s/admin.sock"\n[metrics]\nenabled = false\n' "$work" >"$work/tpoold.toml"
"$tpoold" --config "$work/tpoold.toml" --listen 127.0.0.1:0 --port-file "$work/port" \
  --plugin-dir "$plugins" >"$work/log" 2>&1 &
pid=$!
# Poll for the port file with a bounded deadline (an external process).
for _ in $(seq 1 300); do
  [[ -s "$work/port" ]] && break
  kill -0 "$pid" 2>/dev/null || { echo "tpoold exited early:"; cat "$work/log"; exit 1; }
  sleep 0.1
done
[[ -s "$work/port" ]] || { echo "tpoold did not write its port within 30 s"; cat "$work/log"; exit 1; }
"$example" "127.0.0.1:$(cat "$work/port")"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[[ $rc -eq 0 ]] || { echo "tpoold exited $rc after SIGTERM"; cat "$work/log"; exit 1; }
