#!/usr/bin/env python3
"""The Dockerfile without a Docker engine (none runs on these machines).

1. Reads the Dockerfile and checks what issues 9 and 20 ask of it: the build
   stage on debian:bookworm-slim runs scripts/install-deps.sh build and the
   CMake release preset, and turns the package into a runtime root with
   deploy/container/runtime-rootfs.sh (the package's files and only the
   libraries they load); the runtime stage is FROM scratch and copies that
   root (no package manager, no compiler, no -dev packages), runs as a numeric
   non-root user, EXPOSEs the daemon's gRPC and metrics ports, STOPSIGNAL
   SIGTERM, HEALTHCHECK through `tpoolctl --tls-ca ... health`, and starts
   tpoold with /etc/tpoold/container.toml (deploy/container/tpoold.toml): TLS,
   tokens, /metrics over TLS, the admin API on a Unix socket (issue 16), and
   the durable store's journal in VOLUME /var/lib/tpoold, made 0700 and the
   runtime user's by runtime-rootfs.sh (issue 17).
2. Runs the build stage's RUN commands here, from the source tree, as the
   image build would: install-deps.sh build as written, and the release
   configure with its binary directory moved to a temporary one (-B), so the
   user's build/release is not touched. The release build itself
   (`cmake --build --preset release --target package`) and runtime-rootfs.sh,
   which needs its package, are not repeated: they are `make package`'s build
   and the container test's (ctest -L container, scripts/container-test.sh),
   which builds and runs the whole image with podman.

usage: check_dockerfile.py [--run WORKDIR] [--tpoold PATH]
"""

import argparse
import json
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "unit/deploy"))
from deploy_facts import ROOT, Checker, Facts  # noqa: E402

BASE = "debian:bookworm-slim"
ROOTFS_SCRIPT = "deploy/container/runtime-rootfs.sh"
CONTAINER_CONFIG = "/etc/tpoold/container.toml"
STATE_DIR = "/var/lib/tpoold"  # the VOLUME the store's journal lives in


def parse(text):
    """[(stage_name, [(instruction, argument), ...]), ...] with continuations joined."""
    lines, buf = [], ""
    for raw in text.splitlines():
        if not buf and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if raw.rstrip().endswith("\\"):
            buf += raw.rstrip()[:-1] + " "
            continue
        lines.append(buf + raw)
        buf = ""
    stages = []
    for line in lines:
        instr, _, arg = line.strip().partition(" ")
        instr, arg = instr.upper(), " ".join(arg.split())
        if instr == "FROM":
            m = re.fullmatch(r"(\S+)(?: AS (\S+))?", arg, re.I)
            stages.append((m.group(2) or f"stage{len(stages)}", [("FROM", m.group(1))]))
        else:
            if instr == "RUN":
                # BuildKit/buildah flags (--mount=type=cache,...) are not the command.
                while arg.startswith("--"):
                    arg = arg.partition(" ")[2]
            stages[-1][1].append((instr, arg))
    return stages


def exec_form(arg):
    return json.loads(arg) if arg.startswith("[") else shlex.split(arg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", metavar="WORKDIR")
    ap.add_argument("--tpoold", help="the built daemon: it checks the image's command line")
    args = ap.parse_args()
    facts = Facts()
    c = Checker("Dockerfile")
    stages = parse((ROOT / "Dockerfile").read_text())
    names = [s[0] for s in stages]
    c.check(len(stages) >= 2 and "build" in names, f"stages {names}: need a build stage and a "
                                                    "runtime stage")
    for name, instrs in stages[:-1]:
        c.check(instrs[0][1] == BASE, f"stage {name} is FROM {instrs[0][1]}, not {BASE}")
    c.check(stages[-1][1][0][1] == "scratch",
            f"the runtime stage is FROM {stages[-1][1][0][1]}, not scratch (the runtime root "
            f"{ROOTFS_SCRIPT} assembles is all it needs)")
    if c.failures:
        return c.finish()
    build = dict(stages)["build"]
    runtime = stages[-1][1]
    build_runs = [a for i, a in build if i == "RUN"]
    c.check(any(re.fullmatch(r"scripts/install-deps\.sh build", r) for r in build_runs),
            "the build stage does not RUN scripts/install-deps.sh build")
    c.check("cmake --preset release" in build_runs,
            "the build stage does not RUN cmake --preset release")
    c.check(any(r.startswith("cmake --build --preset release") and "package" in r
                for r in build_runs),
            "the build stage does not build the release preset's package")

    def last(instr):
        vals = [a for i, a in runtime if i == instr]
        return vals[-1] if vals else None

    c.check(not any(i == "RUN" for i, _ in runtime),
            "the runtime stage RUNs commands: it is FROM scratch, the build stage makes its root")
    c.check(any(re.fullmatch(re.escape(ROOTFS_SCRIPT) + r" build/release/tpoold_\*_amd64\.deb (\S+)", r)
                for r in build_runs),
            f"the build stage does not RUN {ROOTFS_SCRIPT} on the release package")
    roots = [re.fullmatch(r".* (\S+)", r).group(1) for r in build_runs if r.startswith(ROOTFS_SCRIPT)]
    c.check(any(i == "COPY" and a.startswith("--from=build") and roots
                and a.split()[1].rstrip("/") == roots[0].rstrip("/") and a.split()[2] == "/"
                for i, a in runtime),
            "the runtime stage does not COPY --from=build the root runtime-rootfs.sh made to /")
    rootfs = (ROOT / ROOTFS_SCRIPT).read_text()
    c.check("ldd" in rootfs and "10001" in rootfs and "ca-certificates.crt" in rootfs,
            f"{ROOTFS_SCRIPT} does not copy the libraries ldd finds, the CA certificates and "
            "the uid 10001 passwd entry")
    user = last("USER") or ""
    uid = user.split(":")[0]
    c.check(uid.isdigit() and int(uid) != 0, f"the runtime USER is '{user}': use a numeric "
                                             "non-root uid (Kubernetes runAsNonRoot checks it)")
    exposed = sorted(int(p.split("/")[0]) for a in [last("EXPOSE") or ""] for p in a.split())
    c.check(exposed == sorted([facts.grpc_port, facts.metrics_port]),
            f"EXPOSE {exposed}, the daemon serves {facts.grpc_port} and {facts.metrics_port}")
    c.check(last("STOPSIGNAL") == "SIGTERM", f"STOPSIGNAL is {last('STOPSIGNAL')}, not SIGTERM "
                                             "(the daemon drains on SIGTERM)")
    hc = last("HEALTHCHECK") or ""
    c.check(re.search(r"CMD \[\"tpoolctl\", \"--tls-ca\", \"/etc/tpoold/tls/ca.crt\", \"health\"\]",
                      hc) is not None,
            f"HEALTHCHECK is '{hc}', not `tpoolctl --tls-ca /etc/tpoold/tls/ca.crt health` (the "
            "job port serves TLS)")
    entry = exec_form(last("ENTRYPOINT") or "[]")
    cmd = exec_form(last("CMD") or "[]")
    argv = entry + cmd
    c.check(argv[:1] == ["tpoold"], f"the container starts {argv[:1]}, not tpoold")

    def flag(name):
        return argv[argv.index(name) + 1] if name in argv[:-1] else None

    # The secure path (issue 16, item 5): the container's own config, with
    # TLS and tokens from mounted files, both listeners on all interfaces.
    c.check(flag("--config") == CONTAINER_CONFIG, f"--config is {flag('--config')}, not "
                                                  f"{CONTAINER_CONFIG}")
    c.check(flag("--listen") is None and flag("--metrics-listen") is None,
            "the command line overrides the addresses: they belong in the container config")
    cfg = tomllib.loads((ROOT / "deploy/container/tpoold.toml").read_text())
    want = {("server", "listen"): f"0.0.0.0:{facts.grpc_port}",
            ("server", "admin_listen"): "unix:/run/tpoold/admin.sock",
            ("tls", "cert_file"): "/etc/tpoold/tls/tls.crt",
            ("tls", "key_file"): "/etc/tpoold/tls/tls.key",
            ("auth", "token_file"): "/etc/tpoold/auth/tokens",
            ("metrics", "listen"): f"0.0.0.0:{facts.metrics_port}",
            ("metrics", "tls"): True}
    for (section, key), value in want.items():
        got = cfg.get(section, {}).get(key)
        c.check(got == value, f"deploy/container/tpoold.toml: {section}.{key} is {got!r}, "
                              f"not {value!r}")
    c.check(cfg.get("server", {}).get("allow_insecure") is not True,
            "deploy/container/tpoold.toml sets server.allow_insecure")
    # The durable store (issue 17): its journal in a VOLUME of the daemon's
    # user, so it outlives the container and a read-only root.
    volumes = [v for i, a in runtime if i == "VOLUME" for v in exec_form(a)]
    c.check(volumes == [STATE_DIR], f"the runtime stage's VOLUMEs are {volumes}, not "
                                    f"[{STATE_DIR!r}] (the store's directory)")
    store_path = cfg.get("store", {}).get("path", "")
    c.check(store_path == f"{STATE_DIR}/jobs.db",
            f"deploy/container/tpoold.toml: [store] path is {store_path!r}, not "
            f"'{STATE_DIR}/jobs.db' (the image's VOLUME)")
    c.check(cfg.get("store", {}).get("durable") is False,
            "deploy/container/tpoold.toml: [store] durable is not false (durable is opt-in)")
    c.check(re.search(rf'chown {uid}:{uid} "\$root{STATE_DIR}"', rootfs) is not None
            and f'chmod 0700 "$root{STATE_DIR}"' in rootfs,
            f"{ROOTFS_SCRIPT} does not make {STATE_DIR} 0700 and the runtime user's ({uid}): a "
            "new volume copies the image's owner and mode, and the daemon could not write it")
    c.check("deploy/container/tpoold.toml" in rootfs or '"$(dirname "$0")/tpoold.toml"' in rootfs
            and CONTAINER_CONFIG in rootfs, f"{ROOTFS_SCRIPT} does not install "
                                            f"deploy/container/tpoold.toml as {CONTAINER_CONFIG}")
    if args.tpoold:
        # The image's config through the built daemon's own check, with
        # certificates made here (scripts/gen-test-certs.sh) and a token file
        # line at the mounted paths' places.
        with tempfile.TemporaryDirectory() as tmp:
            t = pathlib.Path(tmp)
            r = subprocess.run([str(ROOT / "scripts/gen-test-certs.sh"), str(t / "certs")],
                               capture_output=True, text=True)
            c.check(r.returncode == 0, f"gen-test-certs.sh failed: {r.stderr}")
            (t / "tls").mkdir()
            (t / "auth").mkdir()
            for src, dst in (("server.pem", "tls.crt"), ("server.key", "tls.key"),
                             ("ca.pem", "ca.crt")):
                shutil.copy(t / "certs" / src, t / "tls" / dst)
            (t / "auth/tokens").write_text("probe:read:::\n")
            (t / "auth/tokens").chmod(0o600)
            text = (ROOT / "deploy/container/tpoold.toml").read_text()
            text = text.replace("/etc/tpoold/tls/", f"{t}/tls/")
            text = text.replace("/etc/tpoold/auth/", f"{t}/auth/")
            text = text.replace("unix:/run/tpoold/", f"unix:{t}/")
            (t / "state").mkdir(mode=0o700)
            text = text.replace(f'"{STATE_DIR}/', f'"{t}/state/')
            (t / "container.toml").write_text(text)
            plugins = t / "plugins"
            plugins.mkdir()
            check = [args.tpoold, "--check-config", str(t / "container.toml"),
                     "--plugin-dir", str(plugins)]
            r = subprocess.run(check, capture_output=True, text=True)
        c.check(r.returncode == 0, f"the image's config fails tpoold's check "
                                   f"({' '.join(check)}): {r.stdout}{r.stderr}")
    ignore = (ROOT / ".dockerignore").read_text().split()
    c.check("build/" in ignore, ".dockerignore does not exclude build/")

    if args.run and not c.failures:
        work = pathlib.Path(args.run)
        shutil.rmtree(work, ignore_errors=True)
        for run in build_runs:
            argv = shlex.split(run)
            if argv[:2] == ["cmake", "--build"]:
                print(f"not repeated here (make run / make package build it): {run}")
                continue
            if argv[0] == ROOTFS_SCRIPT:
                print(f"not repeated here (it needs the package; ctest -L container runs it): {run}")
                continue
            if argv[:3] == ["cmake", "--preset", "release"]:
                argv += ["-B", str(work / "release")]
            print("running:", " ".join(argv), flush=True)
            r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
            c.check(r.returncode == 0, f"`{run}` failed (exit {r.returncode}):\n"
                                       f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
            if r.returncode != 0:
                break
        cache = work / "release/CMakeCache.txt"
        if cache.exists():
            text = cache.read_text()
            c.check("CMAKE_BUILD_TYPE:STRING=Release" in text,
                    "the release preset did not configure a Release build")
            cpack = work / "release/CPackConfig.cmake"
            c.check(cpack.exists() and 'CPACK_GENERATOR "DEB"' in cpack.read_text(),
                    "the release configure has no DEB CPack config: `--target package` would "
                    "not make the .deb the runtime stage installs")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
