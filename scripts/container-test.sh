#!/usr/bin/env bash
# The container image and the Kubernetes manifests, built and run for real with
# podman (no Docker engine runs on these machines): ctest -L container.
#
#   scripts/container-test.sh [--tpoolctl PATH] [--keep] [--reuse-image] image|kube|base
#
#   base   debootstrap a minbase bookworm root (cached in $TPOOLD_TEST_CACHE,
#          default /var/cache/tpoold-test, keyed on the month and the mirror)
#          and import it as debian:bookworm-slim, so that the Dockerfile's
#          FROM resolves locally; nothing is pulled from an image registry.
#   image  base, then build the image from the Dockerfile and run it read-only
#          on the secure path (issue 16): certificates made now
#          (scripts/gen-test-certs.sh) and a token file mounted where
#          /etc/tpoold/container.toml expects them; non-root uid, HEALTHCHECK
#          in the image config and passing, tpoolctl execute/stream/health over
#          TLS with a token (and refused without one, and in plaintext), the
#          admin socket private (0700 directory, 0600 socket) and not on the
#          job port, a /metrics scrape over HTTPS that promtool accepts, no
#          files written outside the allowed paths (podman diff), and SIGTERM
#          (podman stop) drains a running job and exits 0.
#   kube   base and image, then kubectl kustomize deploy/k8s, check the
#          rendered objects (tests/integration/deploy/check_rendered_k8s.py),
#          and `podman kube play` the ConfigMap + the StatefulSet's pod
#          template (as a Deployment: podman 4.3 has no StatefulSet) through
#          the test overlay (written by write_overlay: networking, and the
#          Secrets as host directories of the same certificates and token
#          file; the store's claim a host directory): the pod starts, opens
#          its journal, its probes pass, tpoolctl reaches it over TLS with a
#          token, and `podman kube down` drains it.
#
# Exit 77 (ctest's SKIP_RETURN_CODE) with the reason when podman cannot run
# here; never a silent pass. Containers and pods it starts are removed on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${TPOOLD_TEST_CACHE:-/var/cache/tpoold-test}
IMAGE=localhost/tpoold:test
BASE=debian:bookworm-slim
SUITE=bookworm
TPOOLCTL=""
KEEP=0
REUSE=0
WORK=""
CLEANUP=()

# ---- every podman quirk of these VMs, in one place ---------------------------
PODMAN=(podman
  # No systemd session to delegate cgroups to: podman manages them itself.
  --cgroup-manager cgroupfs
  # crun refuses the VM's hybrid cgroup v1/v2 layout; runc handles it.
  --runtime runc)
# podman's default ulimits try to raise nofile/nproc above the host's hard
# limits and the container fails to start; ask for what the host allows.
ULIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
# No bridge networking (CNI has no usable network here): builds and containers
# share the host's network, and the test picks free loopback ports.
NETWORK=(--network host)
BUILD_FLAGS=(
  # The OCI format has no HEALTHCHECK; the docker format keeps it.
  --format docker
  # FROM debian:bookworm-slim is the locally imported base: never pull.
  --pull=never
  "${NETWORK[@]}" "${ULIMITS[@]}")
# The HEALTHCHECK stays in the container, but podman would run it from a
# systemd timer, and there is no systemd here: the test runs it itself
# (podman healthcheck run). podman 4.3 still tries to add the timer and logs
# an error about /run/systemd/private; that stderr goes to a file.
HEALTH_TIMER=(--health-interval disable)
# podman kube play takes no --ulimit: the same limits (and the cgroup manager
# and runtime above) as a containers.conf, which every podman call here reads.
write_containers_conf() {
  cat >"$WORK/containers.conf" <<CONF
[containers]
default_ulimits = ["${ULIMITS[1]}", "${ULIMITS[3]}"]
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
CONF
  export CONTAINERS_CONF="$WORK/containers.conf"
}
# Stop timeout: above the drain (server.drain_timeout_ms, 30 s) + cancel grace.
STOP_TIMEOUT=40

log() { printf 'container-test: %s\n' "$*"; }
skip() { printf 'container-test: SKIP: %s\n' "$*"; exit 77; }
fail() { printf 'container-test: FAIL: %s\n' "$*" >&2; exit 1; }
cleanup() {
  local i
  ((KEEP)) && return 0
  for ((i = ${#CLEANUP[@]} - 1; i >= 0; i--)); do eval "${CLEANUP[i]}" >/dev/null 2>&1 || true; done
  [[ -n "$WORK" ]] && rm -rf "$WORK"
  return 0
}
trap cleanup EXIT

usage() { sed -n '5,6p' "$0" | sed 's/^# *//'; exit 2; }

while (($#)); do
  case "$1" in
    --tpoolctl) TPOOLCTL=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    # Skip the build when $IMAGE exists (iterating on the checks by hand).
    --reuse-image) REUSE=1; shift ;;
    image | kube | base) MODE=$1; shift ;;
    *) usage ;;
  esac
done
[[ -n "${MODE:-}" ]] || usage

# ---- can podman run here? -----------------------------------------------------
probe() {
  command -v podman >/dev/null || skip "podman is not installed (scripts/install-deps.sh test installs podman, runc, catatonit, debootstrap)"
  command -v runc >/dev/null || skip "runc is not installed (scripts/install-deps.sh test)"
  [[ $(id -u) -eq 0 ]] || skip "needs root: rootless podman needs subuid ranges and debootstrap needs root"
  local err
  err=$("${PODMAN[@]}" info 2>&1 >/dev/null) || skip "podman info fails: ${err##*$'\n'}"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mirror() {
  # The Debian mirror apt already uses (deb822 or one-line sources).
  local m
  m=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [[ -n "$m" ]] || m=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# ---- the base image -----------------------------------------------------------
base() {
  local mirror key tar t0
  mirror=$(mirror)
  key=$(printf '%s\n' "$SUITE" minbase "$mirror" "$(date +%Y-%m)" | sha256sum | cut -c1-12)
  tar="$CACHE/$SUITE-minbase-$key.tar"
  if [[ "$("${PODMAN[@]}" image inspect --format '{{index .Labels "tpoold.test.base"}}' "$BASE" 2>/dev/null)" == "$key" ]]; then
    log "base: $BASE is the cached $SUITE minbase root ($key)"
    return 0
  fi
  mkdir -p "$CACHE"
  if [[ ! -s "$tar" ]]; then
    command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/install-deps.sh test)"
    local root="$CACHE/rootfs.$$"
    t0=$SECONDS
    log "base: debootstrap --variant=minbase $SUITE from $mirror (cached as $tar)"
    rm -rf "$root"
    if ! debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >"$CACHE/debootstrap.log" 2>&1; then
      rm -rf "$root"
      skip "debootstrap of $SUITE from $mirror failed (no Debian mirror reachable?): $(tail -n 3 "$CACHE/debootstrap.log")"
    fi
    # As the official slim image: no apt lists, docs, man pages or locales.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* \
      "$root"/usr/share/man/* "$root"/usr/share/locale/* "$root"/usr/share/info/*
    tar --numeric-owner -C "$root" -cf "$tar.part" .
    mv "$tar.part" "$tar"
    rm -rf "$root"
    find "$CACHE" -maxdepth 1 -name "$SUITE-minbase-*.tar" ! -name "$(basename "$tar")" -delete
    log "base: built in $((SECONDS - t0)) s"
  fi
  "${PODMAN[@]}" import --change "LABEL tpoold.test.base=$key" --change 'CMD ["/bin/bash"]' \
    "$tar" "$BASE" >/dev/null
  log "base: imported $tar as $BASE"
}

# ---- the image ----------------------------------------------------------------
build_image() {
  local t0=$SECONDS size
  if ((REUSE)) && "${PODMAN[@]}" image exists "$IMAGE"; then
    log "image: --reuse-image: not rebuilding $IMAGE"
    return 0
  fi
  log "image: podman build ${BUILD_FLAGS[*]} -t $IMAGE $ROOT"
  if ! "${PODMAN[@]}" build "${BUILD_FLAGS[@]}" -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT" \
      >"$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log" >&2
    fail "podman build failed (the whole log: rerun with --keep; it is $WORK/build.log)"
  fi
  grep -E 'runtime-rootfs.sh: /rootfs' "$WORK/build.log" | sed 's/^/container-test: image: /' || true
  size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")
  log "image: built $IMAGE in $((SECONDS - t0)) s; size $((size / 1000000)) MB ($size bytes)"
  ((size < 150000000)) || fail "the image is $((size / 1000000)) MB; the target is under 150 MB"
  # Dangling layers of earlier builds, but not the last day's: those are the
  # layer cache that makes the next build quick.
  "${PODMAN[@]}" image prune -f --filter until=24h >/dev/null 2>&1 || true
}

# Over TLS, verified with the test CA, with the test token (make_secrets).
ctl() {
  "$TPOOLCTL" --address "127.0.0.1:$GRPC_PORT" --deadline 10s --tls-ca "$WORK/tls/ca.crt" \
    --token-file "$WORK/client.token" "$@"
}

# What the image and the pod mount from Secrets, made for this run: the
# server certificate as cert-manager names it (tls.crt, tls.key, ca.crt) and
# a token file with one principal (submit, read, admin) whose token the
# test's tpoolctl sends. Owned by the container's uid (10001), 0400/0500.
make_secrets() {
  "$ROOT/scripts/gen-test-certs.sh" "$WORK/certs" >/dev/null || fail "scripts/gen-test-certs.sh failed"
  mkdir -p "$WORK/tls" "$WORK/auth"
  cp "$WORK/certs/server.pem" "$WORK/tls/tls.crt"
  cp "$WORK/certs/server.key" "$WORK/tls/tls.key"
  cp "$WORK/certs/ca.pem" "$WORK/tls/ca.crt"
  local made
  made=$("$TPOOLCTL" token create --principal container-test --roles submit,read,admin 2>/dev/null) ||
    fail "tpoolctl token create failed"
  (umask 077 && sed -n 1p <<<"$made" >"$WORK/client.token")
  sed -n 2p <<<"$made" >"$WORK/auth/tokens"
  chown -R 10001:10001 "$WORK/tls" "$WORK/auth"
  chmod 0500 "$WORK/tls" "$WORK/auth"
  chmod 0400 "$WORK/tls"/* "$WORK/auth"/*
  # The test's tpoolctl (root, on the host) reads ca.crt from there too.
  log "secrets: test CA, server certificate (SAN IP:127.0.0.1) and a token file made in $WORK"
}

# AdminService through the container's admin socket, reached from the host
# through /proc/PID/root as root, with the test token (sent over a unix:
# socket, never over TCP in plaintext). tpoolctl's admin commands (stats,
# drain, reload, version) go to --admin-address, never to --address.
admin_ctl() {  # admin_ctl CONTAINER ARGS...
  local pid
  pid=$("${PODMAN[@]}" inspect --format '{{.State.Pid}}' "$1")
  shift
  "$TPOOLCTL" --admin-address "unix:/proc/$pid/root/run/tpoold/admin.sock" --deadline 10s \
    --token-file "$WORK/client.token" "$@"
}

# The secure path's refusals: no token, plaintext, the admin API on the job
# port. (Health may answer without a token: probes cannot send one.)
check_refusals() {  # check_refusals WHAT
  local what=$1 out
  out=$("$TPOOLCTL" --address "127.0.0.1:$GRPC_PORT" --deadline 10s --tls-ca "$WORK/tls/ca.crt" \
    execute echo x 2>&1) && fail "$what: execute without a token succeeded: $out"
  grep -qi unauthenticated <<<"$out" || fail "$what: execute without a token: '$out', not UNAUTHENTICATED"
  out=$("$TPOOLCTL" --address "127.0.0.1:$GRPC_PORT" --deadline 5s health 2>&1) &&
    fail "$what: a plaintext client got an answer from the TLS port: $out"
  # AdminService pointed at the job port (over TLS, with the admin token):
  # the port does not serve it at all.
  out=$(ctl --admin-address "127.0.0.1:$GRPC_PORT" stats 2>&1) &&
    fail "$what: AdminService answered on the job port: $out"
  grep -q UNIMPLEMENTED <<<"$out" || fail "$what: AdminService on the job port: '$out', not UNIMPLEMENTED"
  log "$what: refused: a call without a token (UNAUTHENTICATED), plaintext, AdminService on the job port (UNIMPLEMENTED)"
}

# The admin socket: a 0700 directory owned by the daemon's uid, a 0600 socket.
check_admin_socket() {  # check_admin_socket CONTAINER WHAT
  local c=$1 what=$2 pid dir
  pid=$("${PODMAN[@]}" inspect --format '{{.State.Pid}}' "$c")
  dir="/proc/$pid/root/run/tpoold"
  [[ -S "$dir/admin.sock" ]] || fail "$what: no admin socket at /run/tpoold/admin.sock"
  [[ "$(stat -c '%a %u' "$dir")" == "700 10001" ]] ||
    fail "$what: /run/tpoold is $(stat -c '%a uid %u' "$dir"), not 700 uid 10001"
  [[ "$(stat -c '%a' "$dir/admin.sock")" == 600 ]] ||
    fail "$what: admin.sock is mode $(stat -c '%a' "$dir/admin.sock"), not 600"
  admin_ctl "$c" stats >/dev/null 2>"$WORK/admin.err" ||
    fail "$what: AdminService Stats through the admin socket failed: $(cat "$WORK/admin.err")"
  log "$what: admin socket /run/tpoold/admin.sock: socket 0600 in a 0700 directory of uid 10001; Stats answers there"
}

# Polls (bounded) until `tpoolctl health` answers SERVING.
wait_serving() {
  local what=$1 deadline=$((SECONDS + 60))
  until ctl health >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$what did not answer SERVING within 60 s"
    [[ -z "${2:-}" ]] || [[ "$("${PODMAN[@]}" inspect --format '{{.State.Running}}' "$2" 2>/dev/null)" == true ]] ||
      fail "$what exited: $("${PODMAN[@]}" logs "$2" 2>&1 | tail -n 20)"
    sleep 0.2
  done
}

# The durable store's directory, as a volume of uid 10001 (what the image's
# VOLUME and a Kubernetes claim with fsGroup give the daemon): a host
# directory, so the test can see the journal the daemon makes in it.
make_state() {  # make_state DIR
  mkdir -p "$1"
  chown 10001:10001 "$1"
  chmod 0700 "$1"
}

check_journal() {  # check_journal DIR WHAT: the daemon opened its store there
  local db="$1/jobs.db" what=$2 mode owner
  [[ -f "$db" ]] || fail "$what: no journal at [store] path (jobs.db in the state volume): $(ls -la "$1")"
  mode=$(stat -c %a "$db")
  owner=$(stat -c %u "$db")
  [[ "$owner" == 10001 && "$mode" == 600 ]] ||
    fail "$what: the journal is uid $owner mode $mode, not uid 10001 mode 600"
  log "$what: the durable store's journal is in the state volume (uid 10001, mode 0600)"
}

check_running() {  # check_running CONTAINER WHAT: the checks shared by image and kube
  local c=$1 what=$2 pid uid out
  wait_serving "$what" "$c"
  pid=$("${PODMAN[@]}" inspect --format '{{.State.Pid}}' "$c")
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
  [[ "$uid" != 0 ]] || fail "$what runs tpoold as root"
  log "$what: tpoold runs as uid $uid"
  out=$(ctl execute echo hello-container) || fail "$what: tpoolctl execute echo failed: $out"
  [[ "$out" == hello-container ]] || fail "$what: execute echo answered '$out'"
  # Stream: tpoolctl's stream session (bench --mode stream), 500 jobs.
  out=$(ctl --json bench echo x -n 500 -c 64 --mode stream --quiet 2>&1) ||
    fail "$what: tpoolctl bench --mode stream failed: $out"
  grep -q '"succeeded":500,' <<<"$out" || fail "$what: 500 stream jobs did not all succeed: $out"
  ctl handlers | grep -qw sleep || fail "$what: the image's plugins are not loaded: $(ctl handlers 2>&1)"
  log "$what: tpoolctl execute, stream, handlers and health answer"
}

scrape_metrics() {  # scrape_metrics WHAT
  local what=$1
  # HTTPS (metrics.tls), verified with the test CA against 127.0.0.1.
  python3 - "$METRICS_PORT" "$WORK/tls/ca.crt" >"$WORK/metrics.txt" <<'PY' || fail "$1: GET https://.../metrics failed"
import ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[2])
print(urllib.request.urlopen(f"https://127.0.0.1:{sys.argv[1]}/metrics", timeout=10,
                             context=ctx).read().decode(), end="")
PY
  python3 - "$METRICS_PORT" 2>/dev/null <<'PY' && fail "$what: /metrics answered plain HTTP"
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10)
PY
  grep -q '^tpool' "$WORK/metrics.txt" || fail "$what: /metrics has no tpool/tpoold series"
  promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.txt" 2>&1 ||
    fail "$what: promtool check metrics: $(cat "$WORK/promtool.txt")"
  log "$what: /metrics scraped over HTTPS ($(grep -c '^tpool' "$WORK/metrics.txt") samples; plain HTTP refused), promtool check metrics clean"
}

# SIGTERM while a job runs: the job finishes, the daemon exits 0 within the
# stop timeout (podman would SIGKILL after it: exit 137).
check_drain() {  # check_drain WHAT CONTAINER STOP_COMMAND...
  local what=$1 c=$2 t0 out job_pid rc
  shift 2
  ctl execute sleep 1500 >"$WORK/drain-job.txt" 2>&1 &
  job_pid=$!
  # The job is running once the daemon counts it (bounded poll).
  local deadline=$((SECONDS + 20))
  until admin_ctl "$c" --json stats 2>/dev/null | grep -Eq '"jobs_in_flight": *"?[1-9]'; do
    ((SECONDS < deadline)) || { log "$what: stats never showed the job running; stopping anyway"; break; }
    sleep 0.05
  done
  t0=$SECONDS
  "$@" >/dev/null 2>&1 || fail "$what: '$*' failed"
  rc=0
  wait "$job_pid" || rc=$?
  out=$(cat "$WORK/drain-job.txt")
  [[ $rc == 0 && "$out" == "slept 1500 ms" ]] ||
    fail "$what: the job in flight at SIGTERM did not finish (exit $rc): $out"
  log "$what: stopped in $((SECONDS - t0)) s (timeout $STOP_TIMEOUT s); the job in flight finished: $out"
}

run_image() {
  local c="tpoold-ct-$$" exit_code diff hc
  GRPC_PORT=$(free_port)
  METRICS_PORT=$(free_port)
  hc=$("${PODMAN[@]}" image inspect --format '{{json .Config.Healthcheck}}' "$IMAGE")
  grep -q 'tpoolctl' <<<"$hc" || fail "the image config has no HEALTHCHECK through tpoolctl: $hc"
  log "image: HEALTHCHECK in the image config: $hc"
  CLEANUP+=("${PODMAN[*]} rm -f -t 0 $c")
  # Read-only root; tmpfs on /tmp and on /run/tpoold (the admin socket's
  # directory, 0700; U chowns it to the container's uid: podman refuses the
  # tmpfs options uid=/gid=); the Secrets' files read-only where the image's
  # config expects them. TPOOL_ADDRESS points the HEALTHCHECK's tpoolctl at
  # the port this run picked (host network). The image's own config, with
  # only the two ports moved to free loopback ones. The VOLUME
  # /var/lib/tpoold (the durable store) is a host directory of uid 10001.
  make_state "$WORK/state"
  "${PODMAN[@]}" run -d --name "$c" "${NETWORK[@]}" "${ULIMITS[@]}" \
    --read-only --read-only-tmpfs=false --tmpfs /tmp:rw,size=16m,mode=1777 \
    --tmpfs /run/tpoold:rw,size=1m,mode=0700,U \
    -v "$WORK/tls:/etc/tpoold/tls:ro" -v "$WORK/auth:/etc/tpoold/auth:ro" \
    -v "$WORK/state:/var/lib/tpoold" \
    "${HEALTH_TIMER[@]}" --stop-timeout "$STOP_TIMEOUT" -e "TPOOL_ADDRESS=127.0.0.1:$GRPC_PORT" "$IMAGE" \
    --config /etc/tpoold/container.toml --listen "127.0.0.1:$GRPC_PORT" \
    --metrics-listen "127.0.0.1:$METRICS_PORT" >/dev/null 2>"$WORK/run.err" ||
    fail "podman run $IMAGE failed: $(cat "$WORK/run.err")"
  check_running "$c" image
  check_journal "$WORK/state" image
  check_refusals image
  check_admin_socket "$c" image
  "${PODMAN[@]}" healthcheck run "$c" >/dev/null 2>&1 ||
    fail "image: podman healthcheck run: unhealthy ($("${PODMAN[@]}" inspect --format '{{json .State.Health}}' "$c"))"
  log "image: podman healthcheck run: healthy"
  scrape_metrics image
  # Nothing written to the root outside the paths podman itself provides.
  # (C /etc: its mount points for podman's hosts, hostname, resolv.conf.)
  diff=$("${PODMAN[@]}" diff "$c" | grep -Ev '^[ACD] /(etc|etc/(hosts|hostname|resolv\.conf)|run|run/.*|tmp|tmp/.*|dev|proc|sys)$' || true)
  [[ -z "$diff" ]] || fail "image: files written outside the allowed paths (podman diff):"$'\n'"$diff"
  log "image: podman diff: nothing written outside /tmp and podman's own files"
  check_drain image "$c" "${PODMAN[@]}" stop -t "$STOP_TIMEOUT" "$c"
  exit_code=$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$c")
  [[ "$exit_code" == 0 ]] || fail "image: tpoold exited $exit_code after SIGTERM: $("${PODMAN[@]}" logs "$c" 2>&1 | tail -n 10)"
  log "image: SIGTERM drained, exit 0"
}

# Process isolation in the container (issue 18): the image's tpoold, as its
# non-root user with podman's default capabilities and seccomp profile, with
# the hash plugin in process mode. Its runners are children of tpoold with
# the same uid, a job runs in one, and what the container refuses them (a
# network namespace: no CAP_SYS_ADMIN) is said at load.
check_isolation() {
  local c="tpoold-ct-iso-$$" pid out p uid runners=0
  GRPC_PORT=$(free_port)
  cat >"$WORK/iso.toml" <<EOF
[server]
admin_listen = "none"
[tls]
cert_file = "/etc/tpoold/tls/tls.crt"
key_file = "/etc/tpoold/tls/tls.key"
[auth]
token_file = "/etc/tpoold/auth/tokens"
[plugins]
dirs = ["/usr/lib/tpool/plugins"]
[plugins.isolation.hash]
mode = "process"
runners = 2
[metrics]
enabled = false
EOF
  chmod 0644 "$WORK/iso.toml"
  CLEANUP+=("${PODMAN[*]} rm -f -t 0 $c")
  "${PODMAN[@]}" run -d --name "$c" "${NETWORK[@]}" "${ULIMITS[@]}" \
    --read-only --read-only-tmpfs=false --tmpfs /tmp:rw,size=16m,mode=1777 \
    -v "$WORK/tls:/etc/tpoold/tls:ro" -v "$WORK/auth:/etc/tpoold/auth:ro" \
    -v "$WORK/iso.toml:/etc/tpoold/iso.toml:ro" "${HEALTH_TIMER[@]}" "$IMAGE" \
    --config /etc/tpoold/iso.toml --listen "127.0.0.1:$GRPC_PORT" >/dev/null 2>"$WORK/run.err" ||
    fail "isolation: podman run $IMAGE failed: $(cat "$WORK/run.err")"
  wait_serving isolation "$c"
  out=$(ctl execute hash 1:abc) || fail "isolation: tpoolctl execute hash failed: $out"
  [[ "$out" == ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad ]] ||
    fail "isolation: execute hash answered '$out'"
  ctl handlers | grep -E '^hash\b.*process' >/dev/null ||
    fail "isolation: tpoolctl handlers does not show hash in process mode: $(ctl handlers 2>&1)"
  pid=$("${PODMAN[@]}" inspect --format '{{.State.Pid}}' "$c")
  for p in /proc/[0-9]*; do
    [[ "$(awk '/^PPid:/ {print $2}' "$p/status" 2>/dev/null)" == "$pid" ]] || continue
    [[ "$(cat "$p/comm" 2>/dev/null)" == tpool-runner ]] || continue
    uid=$(awk '/^Uid:/ {print $2}' "$p/status")
    [[ "$uid" == 10001 ]] || fail "isolation: runner ${p#/proc/} runs as uid $uid, not 10001"
    runners=$((runners + 1))
  done
  ((runners == 2)) || fail "isolation: $runners tpool-runner children of tpoold ($pid), not 2"
  out=$("${PODMAN[@]}" logs "$c" 2>&1)
  grep -q 'confined without what this environment refuses: no network namespace' <<<"$out" ||
    fail "isolation: tpoold did not say which confinement the container refuses: $(tail -n 20 <<<"$out")"
  if grep -q 'no seccomp filter' <<<"$out"; then
    fail "isolation: the runners have no seccomp filter in the container: $(grep 'no seccomp filter' <<<"$out")"
  fi
  "${PODMAN[@]}" stop -t "$STOP_TIMEOUT" "$c" >/dev/null
  log "isolation: hash in process mode in the container: 2 runners of uid 10001, a job answered, the missing network namespace said, the seccomp filter on"
}

# ---- Kubernetes: kustomize, client-side checks, podman kube play --------------
# The test overlay (written here, next to nothing else) changes networking,
# because podman has one network namespace for the pod and the host: host
# network (no CNI bridge here), so no containerPorts, one replica (three
# would collide on one port), loopback ports picked free in --listen,
# --metrics-listen and the probes' tpoolctl --address, and TPOOL_ADDRESS for
# tpoolctl in the pod. And the two Secrets (no Secret objects in podman
# kube play here) become host directories holding the same files
# (make_secrets). podman 4.3's kube play runs Pods and Deployments, not
# StatefulSets: run_kube plays the StatefulSet's pod template as a
# one-replica Deployment, its volumeClaimTemplate as a host directory of
# uid 10001 (make_state: what a bound claim with fsGroup 10001 gives the pod).
write_overlay() {
  local dir=$1 base
  mkdir -p "$dir"
  # The index of each Secret volume in the StatefulSet (JSON patch paths).
  read -r TLS_VOLUME AUTH_VOLUME < <(python3 - "$ROOT/deploy/k8s/statefulset.yaml" <<'PY'
import sys, yaml
vols = yaml.safe_load(open(sys.argv[1]))["spec"]["template"]["spec"]["volumes"]
names = [v["name"] for v in vols]
print(names.index("tls"), names.index("auth"))
PY
)
  base=$(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$ROOT/deploy/k8s" "$dir")
  cat >"$dir/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $base
patches:
  - target:
      kind: StatefulSet
      name: tpoold
    patch: |-
      - {op: add, path: /spec/replicas, value: 1}
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - {op: remove, path: /spec/template/spec/containers/0/ports}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--listen=127.0.0.1:$GRPC_PORT"}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--metrics-listen=127.0.0.1:$METRICS_PORT"}
      - {op: replace, path: /spec/template/spec/containers/0/readinessProbe/exec/command/2, value: "127.0.0.1:$GRPC_PORT"}
      - {op: replace, path: /spec/template/spec/containers/0/livenessProbe/exec/command/2, value: "127.0.0.1:$GRPC_PORT"}
      - {op: replace, path: /spec/template/spec/containers/0/startupProbe/exec/command/2, value: "127.0.0.1:$GRPC_PORT"}
      - {op: add, path: /spec/template/spec/containers/0/env, value: [{name: TPOOL_ADDRESS, value: "127.0.0.1:$GRPC_PORT"}]}
      - {op: replace, path: /spec/template/spec/volumes/$TLS_VOLUME, value: {name: tls, hostPath: {path: "$WORK/tls", type: Directory}}}
      - {op: replace, path: /spec/template/spec/volumes/$AUTH_VOLUME, value: {name: auth, hostPath: {path: "$WORK/auth", type: Directory}}}
YAML
}

run_kube() {
  local tag play c probes p grace pod code
  command -v kubectl >/dev/null || fail "kubectl is missing: it renders deploy/k8s (kubectl kustomize)"
  kubectl kustomize "$ROOT/deploy/k8s" >"$WORK/rendered.yaml" || fail "kubectl kustomize deploy/k8s failed"
  python3 "$ROOT/tests/integration/deploy/check_rendered_k8s.py" --rendered "$WORK/rendered.yaml" |
    sed 's/^/container-test: kube: /'
  [[ ${PIPESTATUS[0]} == 0 ]] || fail "kube: the rendered manifests fail their checks (above)"

  GRPC_PORT=$(free_port)
  METRICS_PORT=$(free_port)
  write_overlay "$WORK/overlay"
  kubectl kustomize "$WORK/overlay" >"$WORK/overlay.yaml" || fail "kubectl kustomize of the test overlay failed"
  # The ConfigMap and the StatefulSet: what podman kube play runs, the
  # StatefulSet as a Deployment of its pod template (podman 4.3 has no
  # StatefulSet), each claim template a host directory.
  play="$WORK/play.yaml"
  make_state "$WORK/state"
  python3 - "$WORK/overlay.yaml" "$play" "$WORK/state" <<'PY' || fail "kube: no ConfigMap + StatefulSet with a claim template in the render"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
sts = [d for d in docs if d["kind"] == "StatefulSet"]
cms = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("tpoold-config-")]
assert len(sts) == 1 and len(cms) == 1 and sts[0]["spec"].get("volumeClaimTemplates")
spec = sts[0]["spec"]
template = spec["template"]
for claim in spec["volumeClaimTemplates"]:
    template["spec"].setdefault("volumes", []).append(
        {"name": claim["metadata"]["name"], "hostPath": {"path": sys.argv[3], "type": "Directory"}})
dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": sts[0]["metadata"],
       "spec": {"replicas": spec.get("replicas", 1), "selector": spec["selector"],
                "template": template}}
yaml.safe_dump_all([cms[0], dep], open(sys.argv[2], "w"))
PY
  # The manifests name image tpoold:<tag>: the image just built, tagged so.
  tag=$(awk '$1 == "image:" {print $2; exit}' "$play")
  "${PODMAN[@]}" tag "$IMAGE" "localhost/$tag"
  # (untag with only one name would remove every name of the image)
  CLEANUP+=("${PODMAN[*]} untag $IMAGE localhost/$tag")
  CLEANUP+=("${PODMAN[*]} kube down $play; ${PODMAN[*]} volume rm -f \$(awk '\$1 == \"name:\" && \$2 ~ /^tpoold-config-/ {print \$2}' $play)")
  "${PODMAN[@]}" kube play "$play" >"$WORK/play.out" 2>&1 ||
    fail "podman kube play failed: $(cat "$WORK/play.out")"
  c=$("${PODMAN[@]}" ps --filter label=io.kubernetes.pod.name --format '{{.Names}}' | grep -- '-tpoold$' | head -n 1 || true)
  [[ -n "$c" ]] || c=$("${PODMAN[@]}" ps --format '{{.Names}}' | grep -- '^tpoold-pod-.*-tpoold$' | head -n 1 || true)
  [[ -n "$c" ]] || fail "kube: no tpoold container after podman kube play: $(cat "$WORK/play.out"; "${PODMAN[@]}" ps -a)"
  log "kube: podman kube play started $c (image $tag; the StatefulSet's pod template)"
  check_running "$c" kube
  check_journal "$WORK/state" kube
  # The probes as the kubelet would run them: each probe's exec command in
  # the pod's container (podman exec; the image's tpoolctl, the mounted CA).
  probes=$(python3 - "$play" <<'PY'
import json, sys, yaml
dep = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
ctr = dep["spec"]["template"]["spec"]["containers"][0]
for name in ("startupProbe", "readinessProbe", "livenessProbe"):
    print(name, json.dumps(ctr[name]["exec"]["command"]))
PY
)
  while read -r name cmd; do
    mapfile -t argv < <(python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$cmd")
    "${PODMAN[@]}" exec "$c" "${argv[@]}" >/dev/null 2>"$WORK/probe.err" ||
      fail "kube: $name (${argv[*]}) does not answer SERVING: $(cat "$WORK/probe.err")"
  done <<<"$probes"
  log "kube: startup, readiness and liveness probes (tpoolctl health over TLS, in the pod) answer SERVING"
  check_refusals kube
  check_admin_socket "$c" kube
  scrape_metrics kube
  # The kubelet's stop: SIGTERM, then SIGKILL after the grace period. podman
  # 4.3's kube down does not wait (it killed a running job within 0.1 s
  # here), and kube play does not take terminationGracePeriodSeconds as the
  # stop timeout, so the test stops the pod with that timeout itself, then
  # kube down removes it.
  grace=$(python3 - "$play" <<'PY'
import sys, yaml
dep = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
print(dep["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30))
PY
)
  pod=$("${PODMAN[@]}" inspect --format '{{.Pod}}' "$c")
  check_drain kube "$c" "${PODMAN[@]}" pod stop -t "$grace" "$pod"
  code=$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$c")
  [[ "$code" == 0 ]] || fail "kube: tpoold exited $code when its pod stopped: $("${PODMAN[@]}" logs "$c" 2>&1 | tail -n 10)"
  "${PODMAN[@]}" kube down "$play" >/dev/null 2>&1 || fail "kube: podman kube down failed"
  log "kube: SIGTERM with the pod's grace period (${grace} s) drained it, exit 0; podman kube down removed it"
}

probe
[[ "$MODE" == base ]] || {
  [[ -n "$TPOOLCTL" && -x "$TPOOLCTL" ]] || fail "--tpoolctl PATH: the built tpoolctl is needed to talk to the container"
  command -v promtool >/dev/null || fail "promtool is missing (scripts/install-deps.sh test installs prometheus)"
}
WORK=$(mktemp -d /tmp/tpoold-container-test.XXXXXX)
chmod 0711 "$WORK"  # the container's uid reaches the mounted tls/ and auth/ in it
write_containers_conf
T0=$SECONDS
base
case "$MODE" in
  base) ;;
  image)
    build_image
    make_secrets
    run_image
    check_isolation
    ;;
  kube)
    build_image
    make_secrets
    run_kube
    ;;
esac
log "$MODE: passed in $((SECONDS - T0)) s"
