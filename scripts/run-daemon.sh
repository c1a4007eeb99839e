#!/usr/bin/env bash
# Start tpoold in the foreground with the example plugins and the sample
# config: `make run` calls `scripts/run-daemon.sh build/release`.
#
#   scripts/run-daemon.sh [BUILD_DIR] [extra tpoold flags...]
#
# Listens on 127.0.0.1:50051 (override with --listen HOST:PORT). Ctrl-C
# drains and stops it; a second Ctrl-C cancels what is still pending.
set -euo pipefail

build=${1:-build/release}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
tpoold="$build/daemon/server/tpoold"
plugins="$build/plugins"
config="$root/daemon/server/tpoold.toml.example"

if [[ ! -x "$tpoold" ]]; then
  echo "run-daemon: $tpoold does not exist; build it first (make release, or cmake --build $build)" >&2
  exit 1
fi
if ! compgen -G "$plugins/*.so" >/dev/null; then
  echo "run-daemon: no plugins in $plugins; build them (cmake --build $build --target tpool_example_plugins)" >&2
  exit 1
fi

listen=127.0.0.1:50051
for ((i = 1; i <= $#; i++)); do
  if [[ "${!i}" == --listen ]]; then j=$((i + 1)); listen=${!j}; fi
  if [[ "${!i}" == --listen=* ]]; then listen=${!i#--listen=}; fi
done

# The sample config plus a job store in the build directory, so durable jobs
# (submit --durable) work and survive a restart of `make run`.
state="$build/run"
mkdir -p "$state"
run_config="$state/tpoold.toml"
{
  cat "$config"
  printf '\n# Added by scripts/run-daemon.sh: the durable job store (docs/store.md).\n'
  printf '[store]\npath = "%s/jobs.db"\n' "$(cd "$state" && pwd)"
} >"$run_config"
config="$run_config"

"$tpoold" --check-config "$config" --plugin-dir "$plugins" >/dev/null

ctl="$build/client/tpoolctl"
[[ -x "$ctl" ]] || ctl=tpoolctl
cat <<MSG
run-daemon: starting tpoold on $listen with the plugins of $plugins
run-daemon: config $config (the sample daemon/server/tpoold.toml.example and a job store in
  $state; docs/configuration.md lists every key)
run-daemon: send it a job from another terminal:
    $ctl --address $listen execute echo 'hello'
    $ctl --address $listen execute hash '1000:some bytes'
    $ctl --address $listen execute fanout '4 echo hi'
    id=\$($ctl --address $listen submit sleep 2000) && $ctl --address $listen wait "\$id"
    id=\$($ctl --address $listen submit echo 'kept on disk' --durable) && $ctl --address $listen wait "\$id"
    $ctl --address $listen jobs
    $ctl --address $listen handlers
    $ctl --address $listen stats
  or with grpcurl (server reflection is on):
    grpcurl -plaintext -d '{"handler":"echo","payload":"aGVsbG8="}' $listen tpool.v1.JobService/Execute
run-daemon: Ctrl-C drains and stops it.
MSG
exec "$tpoold" --config "$config" --plugin-dir "$plugins" --listen "$listen" "$@"
