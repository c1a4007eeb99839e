#!/usr/bin/env bash
# Install what tpoold needs to build, test and benchmark, from Debian 12 packages.
#
# Idempotent: asks dpkg-query which packages are already installed and runs
# apt-get only for the missing ones. Runs as root, or through sudo.
# This is the one list of packages for the whole project: later work adds to
# it here, never as ad-hoc install lines elsewhere (Dockerfile, CI, docs).
set -euo pipefail

# Groups, so that a partial install (e.g. the container's build stage) can ask
# for only what it needs: `install-deps.sh build` or `install-deps.sh all`.
BUILD=(
  g++ cmake ninja-build pkg-config ccache make git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libspdlog-dev libsystemd-dev libtomlplusplus-dev libssl-dev
  # daemon/store: the durable journal (docs/store.md); its tests use the
  # library too, not the sqlite3 command-line tool.
  libsqlite3-dev
  # daemon/isolation/runner: the seccomp filter of an isolated plugin's runner
  # (docs/plugins.md, "Isolation"), found by CMake through pkg-config.
  libseccomp-dev
  dpkg-dev file
)
# clang 14 builds the tsa and fuzz presets; libclang-rt-14-dev holds libFuzzer
# and the sanitizer runtimes clang links (-fsanitize=fuzzer,address,undefined).
TOOLS=(clang-format clang-tidy clang-14 libclang-rt-14-dev)
TEST=(
  libgtest-dev libgmock-dev libbenchmark-dev
  spin relacy-dev
  prometheus systemd python3 python3-yaml
  # scripts/gen-test-certs.sh makes the TLS test certificates with it.
  openssl
  # The container test (scripts/container-test.sh, ctest -L container): podman
  # with the runc runtime (crun refuses these VMs' hybrid cgroup layout),
  # catatonit as its init, debootstrap for the locally built base image.
  podman runc catatonit debootstrap
)
PEERS=(libtbb-dev libboost-dev libthread-pool-dev libconcurrentqueue-dev gnuplot-nox
  gearman-job-server libgearman-dev
  # bench/peers: the durable peer (binlog, fsync on every write) for issue 17's rows.
  beanstalkd)

groups=("${@:-all}")
want=()
for g in "${groups[@]}"; do
  case "$g" in
    build) want+=("${BUILD[@]}") ;;
    tools) want+=("${TOOLS[@]}") ;;
    test) want+=("${TEST[@]}") ;;
    peers) want+=("${PEERS[@]}") ;;
    all) want+=("${BUILD[@]}" "${TOOLS[@]}" "${TEST[@]}" "${PEERS[@]}") ;;
    *) echo "install-deps.sh: unknown group '$g'; use build, tools, test, peers or all" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#want[@]} packages already installed"
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: these packages are missing: ${missing[*]}" >&2
    echo "install-deps: run this script as root (or install sudo) so it can apt-get install them" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${#missing[@]} missing packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: installed ${missing[*]}"
