#!/usr/bin/env python3
"""The Debian package, end to end without installing it on this machine.

Packages this build tree with its CPack config (the rules `make package`
uses on the release tree), then checks the .deb: its name, the dependencies
dpkg-shlibdeps found, the conffile, the maintainer scripts (system user,
unit enabled), and the files. Extracts it with dpkg-deb -x into a throwaway
root and runs the installed `tpoold --check-config` on the installed config
(and on a broken copy, which must fail) and `tpoolctl --version`; starts the
installed daemon on its installed config (paths moved into the root, the
store's journal into the work directory, ports ephemeral on loopback), checks
that it opens its journal, loads every packaged plugin and that the
installed `tpoolctl health` gets SERVING, stops it with SIGTERM (exit 0); and
runs `systemd-analyze verify` on the installed unit.

usage: check_deb.py --build DIR --work DIR [--tpoold-built] [--tpoolctl-built]
Exits 77 (ctest SKIP) while tpoold or tpoolctl is not part of this build.
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "unit/deploy"))
from deploy_facts import ROOT, Checker  # noqa: E402

SKIP = 77
STORE_DIR = "/var/lib/tpoold"  # the unit's StateDirectory, [store] path's directory


def run(argv, **kw):
    argv = [str(a) for a in argv]
    try:
        return subprocess.run(argv, capture_output=True, text=True, **kw)
    except OSError as e:  # a binary the package should have installed is missing
        return subprocess.CompletedProcess(argv, 127, "", f"cannot run {argv[0]}: {e}")


def serve_installed(c, root, work):
    """Starts the installed tpoold on the installed config (its paths moved into
    the extracted root, its addresses to ephemeral loopback ports), checks that
    it loads every packaged plugin and answers `tpoolctl health`, then stops it
    with SIGTERM (a drain) and expects exit 0."""
    config = (root / "etc/tpoold/tpoold.toml").read_text()
    config = config.replace('"/usr/lib/tpool/plugins"', f'"{root}/usr/lib/tpool/plugins"')
    config = config.replace('"/etc/tpoold/plugins.d"', f'"{root}/etc/tpoold/plugins.d"')
    config = re.sub(r'listen = "127\.0\.0\.1:\d+"', 'listen = "127.0.0.1:0"', config)
    state = work / "state"  # /var/lib/tpoold, which the unit's StateDirectory makes
    state.mkdir(mode=0o700, exist_ok=True)
    config = config.replace(f'"{STORE_DIR}/', f'"{state}/')
    cfg, port_file, log = work / "serve.toml", work / "serve.port", work / "serve.log"
    cfg.write_text(config)
    plugins = sorted(p.stem for p in (root / "usr/lib/tpool/plugins").glob("*.so"))
    # The installed config leaves admin_listen "": the admin socket goes to
    # $RUNTIME_DIRECTORY, which the unit's RuntimeDirectory= sets. Set it as
    # systemd would, to a directory of this run: without it the daemon falls
    # back to /tmp/tpoold-$UID/admin.sock, the path a tpoold of the user's own
    # (`make run`) listens on, and would refuse to start next to it.
    run_dir = work / "run"  # /run/tpoold
    run_dir.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ, RUNTIME_DIRECTORY=str(run_dir))
    env.pop("XDG_RUNTIME_DIR", None)
    with open(log, "w") as out:
        proc = subprocess.Popen([str(root / "usr/bin/tpoold"), "--config", str(cfg),
                                 "--port-file", str(port_file)], stdout=out, stderr=out, env=env)
    try:
        port = wait_for(lambda: port_file.exists() and port_file.read_text().strip(), 30)
        c.check(bool(port), f"the installed tpoold did not start serving within 30 s; log:\n"
                            f"{log.read_text()[-2000:]}")
        if port:
            c.check((state / "jobs.db").exists(),
                    f"the installed tpoold serves but made no journal at {state}/jobs.db "
                    "([store] path of the installed config, moved into the work directory)")
            c.check((run_dir / "admin.sock").is_socket(),
                    f"the installed tpoold serves but made no admin socket at "
                    f"{run_dir}/admin.sock ($RUNTIME_DIRECTORY/admin.sock, what the installed "
                    "config's admin_listen = \"\" promises under systemd)")
            text = log.read_text()
            for name in plugins:
                c.check(f"loaded {root}/usr/lib/tpool/plugins/{name}.so" in text,
                        f"the installed tpoold did not load the packaged plugin {name}.so")
            r = run([root / "usr/bin/tpoolctl", "--address", f"127.0.0.1:{port}", "health"],
                    timeout=30)
            # Exit 0 is SERVING (1: NOT_SERVING, 3: unreachable), tpoolctl's contract.
            c.check(r.returncode == 0,
                    f"the installed tpoolctl health against the installed tpoold (exit "
                    f"{r.returncode}): {r.stdout}{r.stderr}")
    finally:
        proc.terminate()  # SIGTERM: drain
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    c.check(rc == 0, f"the installed tpoold exited {rc} after SIGTERM, not 0; log:\n"
                     f"{log.read_text()[-2000:]}")


def wait_for(condition, seconds):
    """Polls condition until it is truthy or the deadline passes (an external
    process: there is nothing to wait on but the file it writes)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--tpoold-built", action="store_true")
    ap.add_argument("--tpoolctl-built", action="store_true")
    args = ap.parse_args()
    if not (args.tpoold_built and args.tpoolctl_built):
        print("SKIP: tpoold and tpoolctl are not both part of this build yet "
              f"(tpoold: {args.tpoold_built}, tpoolctl: {args.tpoolctl_built}); "
              "the package test needs the binaries it installs")
        return SKIP

    c = Checker("debian package")
    build, work = pathlib.Path(args.build), pathlib.Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    r = run(["cpack", "-G", "DEB", "--config", build / "CPackConfig.cmake", "-B", work])
    if r.returncode != 0:
        print(f"FAIL: cpack failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        return 1
    deb = work / f"tpoold_{args.version}_amd64.deb"
    c.check(deb.exists(), f"cpack made {[p.name for p in work.glob('*.deb')]}, "
                          f"not {deb.name}")
    if not deb.exists():
        return c.finish()

    def field(name):
        return run(["dpkg-deb", "-f", deb, name]).stdout.strip()

    c.check(field("Package") == "tpoold", f"Package is {field('Package')}")
    c.check(field("Version") == args.version, f"Version is {field('Version')}")
    c.check(field("Architecture") == "amd64", f"Architecture is {field('Architecture')}")
    depends = field("Depends")
    print(f"Depends: {depends}")
    for lib in ("adduser", "libc6", "libgrpc++", "libprotobuf", "libstdc++6"):
        c.check(lib in depends, f"Depends lacks {lib} (dpkg-shlibdeps did not run, or the "
                                f"daemon no longer links it): {depends}")

    # What the Dockerfile's runtime stage does, simulated: apt resolves every
    # dependency from Debian's archive (or finds it installed).
    r = run(["apt-get", "install", "-s", "--no-install-recommends", deb.resolve()])
    c.check(r.returncode == 0 and re.search(r"^Inst tpoold ", r.stdout, re.M) is not None,
            f"apt-get install -s of the package fails (exit {r.returncode}): "
            f"{r.stdout[-1500:]}{r.stderr[-1500:]}")

    control = work / "control"
    r = run(["dpkg-deb", "-e", deb, control])
    c.check(r.returncode == 0, f"dpkg-deb -e failed: {r.stderr}")
    conffiles = (control / "conffiles").read_text().split() if (control / "conffiles").exists() \
        else []
    c.check(conffiles == ["/etc/tpoold/tpoold.toml"], f"conffiles is {conffiles}")
    for script in ("postinst", "prerm", "postrm"):
        path = control / script
        c.check(path.exists() and path.stat().st_mode & 0o111, f"{script} missing or not "
                                                                "executable")
        if path.exists():
            r = run(["sh", "-n", path])
            c.check(r.returncode == 0, f"{script} is not valid sh: {r.stderr}")
    postinst = (control / "postinst").read_text() if (control / "postinst").exists() else ""
    joined = re.sub(r"\\\n\s*", " ", postinst)  # shell line continuations
    c.check(re.search(r"adduser --system --group .* tpoold\n", joined) is not None,
            "postinst does not create the tpoold system user")
    c.check("deb-systemd-helper enable 'tpoold.service'" in postinst,
            "postinst does not enable tpoold.service")
    c.check("[ -d /run/systemd/system ]" in postinst,
            "postinst starts the unit without checking that systemd runs (chroots)")

    listing = run(["dpkg-deb", "-c", deb]).stdout
    files = {line.split()[-1] for line in listing.splitlines()}
    for want in ("./usr/bin/tpoold", "./usr/bin/tpoolctl", "./etc/tpoold/tpoold.toml",
                 "./etc/tpoold/plugins.d/", "./usr/lib/systemd/system/tpoold.service",
                 "./usr/include/tpool/plugin.h", "./usr/include/tpool/pool.h",
                 "./usr/share/doc/tpoold/operations.md"):
        c.check(want in files, f"the package lacks {want}")
    c.check(any(re.fullmatch(r"\./usr/lib/tpool/plugins/[^/]+\.so", f) for f in files),
            "the package has no plugin in /usr/lib/tpool/plugins")
    for shim in ("libtpool-civetweb-libssl.so", "libtpool-civetweb-libcrypto.so"):
        c.check(f"./usr/lib/tpool/civetweb/{shim}" in files,
                f"the package lacks /usr/lib/tpool/civetweb/{shim} (metrics.tls needs it)")
    c.check(any(f.endswith("/cmake/tpool/tpoolConfig.cmake") for f in files),
            "the package lacks the CMake package config")

    root = work / "root"
    r = run(["dpkg-deb", "-x", deb, root])
    c.check(r.returncode == 0, f"dpkg-deb -x failed: {r.stderr}")
    tpoold, tpoolctl = root / "usr/bin/tpoold", root / "usr/bin/tpoolctl"
    config = root / "etc/tpoold/tpoold.toml"
    c.check(f'path = "{STORE_DIR}/jobs.db"' in config.read_text(),
            f"the installed config does not keep the store in {STORE_DIR} (the unit's "
            "StateDirectory)")
    # --check-config checks the plugin directories too; the package's are
    # under root here, not at the absolute paths the config names. The
    # store's directory is the unit's StateDirectory, which only systemd
    # makes: the same config with the store in the work directory.
    state = work / "check-state"
    state.mkdir(mode=0o700)
    checked = work / "installed.toml"
    checked.write_text(config.read_text().replace(f'"{STORE_DIR}/', f'"{state}/'))
    r = run([tpoold, "--check-config", checked, "--plugin-dir", root / "usr/lib/tpool/plugins"])
    c.check(r.returncode == 0, f"the installed tpoold --check-config rejects the installed "
                               f"config (exit {r.returncode}): {r.stdout}{r.stderr}")
    broken = work / "broken.toml"
    broken.write_text(config.read_text().replace("[server]", "[server]\nno_such_key = 1", 1))
    r = run([tpoold, "--check-config", broken])
    c.check(r.returncode != 0 and "no_such_key" in (r.stdout + r.stderr),
            f"tpoold --check-config accepted a config with an unknown key (exit {r.returncode})")
    # metrics.tls: the installed tpoold finds the CivetWeb OpenSSL shims next
    # to itself (<bindir>/../lib/tpool/civetweb) and reads a certificate made
    # now (scripts/gen-test-certs.sh); --check-config loads both as the start does.
    certs = work / "certs"
    r = run([ROOT / "scripts/gen-test-certs.sh", certs])
    c.check(r.returncode == 0, f"gen-test-certs.sh failed: {r.stderr}")
    tls_cfg = work / "metrics-tls.toml"
    tls_cfg.write_text(f'[metrics]\ntls = true\n[tls]\ncert_file = "{certs}/server.pem"\n'
                       f'key_file = "{certs}/server.key"\n')
    r = run([tpoold, "--check-config", tls_cfg, "--plugin-dir", root / "usr/lib/tpool/plugins"])
    c.check(r.returncode == 0, f"the installed tpoold rejects metrics.tls (exit {r.returncode}): "
                               f"{r.stdout}{r.stderr}")
    r = run([tpoolctl, "--version"])
    c.check(r.returncode == 0 and args.version in r.stdout + r.stderr,
            f"the installed tpoolctl --version (exit {r.returncode}) does not print "
            f"{args.version}: {r.stdout}{r.stderr}")
    r = run([tpoold, "--version"])
    c.check(r.returncode == 0 and args.version in r.stdout + r.stderr,
            f"the installed tpoold --version (exit {r.returncode}) does not print "
            f"{args.version}: {r.stdout}{r.stderr}")

    serve_installed(c, root, work)

    # The installed unit, verified with its binary paths pointing into the
    # extracted root (systemd-analyze --root needs a whole OS tree).
    unit = root / "usr/lib/systemd/system/tpoold.service"
    c.check(unit.exists(), "the package lacks the unit")
    if unit.exists():
        text = unit.read_text()
        c.check("ExecStart=/usr/bin/tpoold --config /etc/tpoold/tpoold.toml" in text,
                "the installed unit does not start /usr/bin/tpoold with /etc/tpoold/tpoold.toml")
        copy = work / "verify/tpoold.service"
        copy.parent.mkdir()
        copy.write_text(text.replace("/usr/bin/tpoold", str(tpoold)))
        r = run(["systemd-analyze", "verify", "--man=no", "--generators=no", copy])
        complaints = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
        c.check(r.returncode == 0 and not complaints,
                f"systemd-analyze verify on the installed unit (exit {r.returncode}): "
                + " | ".join(complaints))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
