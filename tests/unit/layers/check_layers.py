#!/usr/bin/env python3
"""The layering check of docs/architecture.md ("Arrows"): who may include and link whom.

For every component folder it reads each C/C++ source's #include lines and each
target_link_libraries() of its CMake files, and fails with one line per broken
arrow:

    daemon/metrics/src/collector.cc:14: metrics includes tpool/rpc/services.h (rpc); ...

The table RULES below is the machine-readable copy of the "Arrows" table in
docs/architecture.md: change both together. A new folder under daemon/ (the
isolation component to come) fails the check until it has a row here and an
arrow there.

Usage: check_layers.py [--root DIR]   check the tree at DIR (default: this repo)
       check_layers.py --self-test    check that each kind of broken arrow is caught
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field

# ---- the components and their arrows -----------------------------------------


@dataclass(frozen=True)
class Rule:
    folder: str  # relative to the root
    includes: frozenset[str]  # components whose tpool/ headers it may include
    external: frozenset[str]  # third-party header families it may include
    links: frozenset[str]  # what its CMake targets may link (exact tokens)
    why: str  # the reason, as docs/architecture.md gives it


def _rule(folder, includes, external, links, why):
    return Rule(folder, frozenset(includes), frozenset(external), frozenset(links), why)


COMMON_LINKS = {"tpool::warnings", "Threads::Threads"}

RULES: dict[str, Rule] = {
    "common": _rule("daemon/common", {"common"}, set(), COMMON_LINKS,
                    "the shared core types: standard C++ only, depends on nothing here"),
    "pool": _rule("daemon/pool", {"common", "pool"}, set(), COMMON_LINKS | {"tpool::common"},
                  "the scheduler: standard C++ only, no daemon types"),
    "plugin_host": _rule("daemon/plugin_host", {"common", "plugin_host", "plugins"}, set(),
                         COMMON_LINKS | {"tpool::common", "tpool::plugin_sdk", "${CMAKE_DL_LIBS}"},
                         "loads plugins through the C ABI; shares only tpool::common "
                         "with the pool"),
    "store": _rule("daemon/store", {"common", "store"}, {"sqlite"},
                   COMMON_LINKS | {"tpool::common", "SQLite::SQLite3"},
                   "the durable journal: standard C++ and libsqlite3, knows records, not the "
                   "engine's Jobs"),
    "engine": _rule("daemon/engine",
                    {"common", "pool", "plugin_host", "plugins", "engine", "store"},
                    {"spdlog"},
                    COMMON_LINKS | {"tpool::common", "tpool::pool", "tpool::plugin_host",
                                    "tpool::store", "spdlog::spdlog"},
                    "the product's job rules: no protocol (gRPC, protobuf) and no Prometheus"),
    "rpc": _rule("daemon/rpc", {"common", "engine", "rpc", "proto", "security"},
                 {"grpc", "spdlog"},
                 COMMON_LINKS | {"tpool::common", "tpool::engine", "tpool::proto",
                                 "tpool::security", "spdlog::spdlog"},
                 "translates gRPC to engine calls; asks the engine, not the pool or the host; "
                 "asks security who may call what and maps its answers to status codes"),
    "metrics": _rule("daemon/metrics", {"common", "pool", "metrics"}, {"prometheus"},
                     COMMON_LINKS | {"tpool::common", "tpool::pool", "prometheus-cpp::core",
                                     "prometheus-cpp::pull", "${CMAKE_DL_LIBS}", "OpenSSL::SSL",
                                     "OpenSSL::Crypto"},
                     "reads plain snapshot structs the server fills, and the pool's PoolStats; "
                     "dlopen()s its CivetWeb OpenSSL shims (OpenSSL: the shims alone)"),
    "server": _rule("daemon/server",
                    {"common", "pool", "plugin_host", "engine", "rpc", "metrics", "proto",
                     "security", "store", "isolation"},
                    {"grpc", "spdlog", "toml", "systemd", "openssl"},
                    COMMON_LINKS | {"tpool::common", "tpool::pool", "tpool::plugin_host",
                                    "tpool::engine", "tpool::store", "tpool::rpc",
                                    "tpool::metrics", "tpool::proto",
                                    "tpool::security", "OpenSSL::SSL", "OpenSSL::Crypto",
                                    "tpool::isolation",
                                    "tpool::server_config", "gRPC::grpc++",
                                    "gRPC::grpc++_reflection", "spdlog::spdlog",
                                    "tomlplusplus::tomlplusplus", "PkgConfig::SYSTEMD"},
                    "builds and wires every daemon component"),
    "client": _rule("client", {"common", "client", "proto", "security"}, {"grpc"},
                    COMMON_LINKS | {"tpool::common", "tpool::client", "tpool::proto",
                                    "tpool::security"},
                    "talks to tpoold over gRPC only; no daemon header but common's and "
                    "security's (tpoolctl token create writes the token file's format)"),
    "plugins": _rule("plugins", {"plugins"}, {"openssl"},
                     COMMON_LINKS | {"tpool::plugin_sdk", "${P_LIBS}"},
                     "the C ABI header and plugins built against it alone"),
    "security": _rule("daemon/security", {"common", "security"}, {"openssl"},
                      COMMON_LINKS | {"tpool::common", "OpenSSL::Crypto"},
                      "who may call what (tokens, roles, peer principals): standard C++ and "
                      "libcrypto, no gRPC types, so rpc maps its answers to status codes"),
    "isolation": _rule("daemon/isolation",
                       {"common", "plugin_host", "plugins", "isolation", "wire"}, {"seccomp"},
                       COMMON_LINKS | {"tpool::common", "tpool::plugin_host", "tpool::plugin_sdk",
                                       "PkgConfig::SECCOMP", "${CMAKE_DL_LIBS}"},
                       "runs process-mode plugins in supervised runners; implements the plugin "
                       "host's IsolatedPlugin, so the host never depends on it"),
    "runner": _rule("daemon/isolation/runner", {"plugins", "wire"}, {"seccomp"},
                    COMMON_LINKS | {"tpool::plugin_sdk", "PkgConfig::SECCOMP", "${CMAKE_DL_LIBS}"},
                    "tpool-runner: the plugin ABI, the channel's wire header, libdl and "
                    "libseccomp only; no daemon component, no gRPC, protobuf or Prometheus"),
    "proto": _rule("proto", {"proto"}, {"grpc"}, {"protobuf::libprotobuf", "gRPC::grpc++"},
                   "the generated protobuf and gRPC code, compiled once"),
}

# tpool/ include prefixes -> the component that owns them.
TPOOL_PREFIXES = [
    ("tpool/common/", "common"),
    ("tpool/pool/", "pool"),
    ("tpool/pool.h", "pool"),
    ("tpool/plugin_host/", "plugin_host"),
    ("tpool/plugin.h", "plugins"),
    ("tpool/engine/", "engine"),
    ("tpool/rpc/", "rpc"),
    ("tpool/metrics/", "metrics"),
    ("tpool/v1/", "proto"),
    ("tpool/client/", "client"),
    ("tpool/security/", "security"),
    ("tpool/store/", "store"),
    # The channel's header is the one isolation header the runner may include.
    ("tpool/isolation/wire.h", "wire"),
    ("tpool/isolation/", "isolation"),
]

# Third-party header families, by the first part of the path.
EXTERNAL_PREFIXES = [
    ("grpcpp/", "grpc"),
    ("grpc/", "grpc"),
    ("google/protobuf/", "grpc"),  # protobuf travels with gRPC: rpc, server, client, proto
    ("prometheus/", "prometheus"),
    ("spdlog/", "spdlog"),
    ("toml++/", "toml"),
    ("systemd/", "systemd"),
    ("openssl/", "openssl"),
    # SQLite's headers sit at the top of the include path (<sqlite3.h>), where
    # the system headers are too: matched by name, before the system check.
    ("sqlite3.h", "sqlite"),
    ("sqlite3ext.h", "sqlite"),
    ("seccomp.h", "seccomp"),
]

# System headers: the C++ and C standard libraries and POSIX/Linux.
SYSTEM_DIRS = ("sys/", "linux/", "asm/", "arpa/", "netinet/", "bits/")

SOURCE_EXTS = (".h", ".hpp", ".cc", ".cpp", ".c", ".inc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
LINK_RE = re.compile(r"\btarget_link_libraries\s*\(")
LINK_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "LINK_PUBLIC", "LINK_PRIVATE",
                 "LINK_INTERFACE_LIBRARIES"}
SKIP_DIRS = {"build", ".git"}

# ---- the check -------------------------------------------------------------------


def owner_of_tpool_header(path: str) -> str | None:
    for prefix, comp in TPOOL_PREFIXES:
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
            return comp
    return None


def classify_angle(path: str) -> tuple[str, str | None]:
    """('tpool', comp) | ('external', family) | ('system', None) | ('unknown', None)."""
    if path.startswith("tpool/"):
        return "tpool", owner_of_tpool_header(path)
    for prefix, family in EXTERNAL_PREFIXES:
        if path.startswith(prefix):
            return "external", family
    if "/" not in path or path.startswith(SYSTEM_DIRS):
        return "system", None
    return "unknown", None


def walk(root: str, folder: str):
    base = os.path.join(root, folder)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            yield os.path.join(dirpath, name)


def check_includes(root: str, name: str, rule: Rule, out: list[str]) -> None:
    comp_dir = os.path.realpath(os.path.join(root, rule.folder))
    may = ", ".join(sorted(rule.includes))
    for path in walk(root, rule.folder):
        if not path.endswith(SOURCE_EXTS):
            continue
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        for n, line in enumerate(lines, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            quote, inc = m.group(1), m.group(2)
            where = f"{rel}:{n}: {name} includes {inc}"
            if inc.startswith("tpool/"):
                comp = owner_of_tpool_header(inc)
                if comp is None:
                    out.append(f"{where}, a tpool/ header of no known component; add the "
                               "component to docs/architecture.md and to this check first")
                elif comp not in rule.includes:
                    out.append(f"{where} ({comp}); {name} may include only: {may} "
                               f"({rule.why})")
                continue
            if quote == '"':
                # A local header: it must resolve inside the component's folder.
                target = os.path.realpath(os.path.join(os.path.dirname(path), inc))
                if not os.path.exists(target):
                    out.append(f"{where}, which is not a file beside it; use a <...> include "
                               "or a tpool/ path")
                elif os.path.commonpath([target, comp_dir]) != comp_dir:
                    out.append(f"{where}, a file outside {rule.folder}; include another "
                               "component by its tpool/ path, if its arrow allows")
                continue
            kind, family = classify_angle(inc)
            if kind == "external" and family not in rule.external:
                allowed = ", ".join(sorted(rule.external)) or "none"
                out.append(f"{where} ({family}); third-party headers {name} may include: "
                           f"{allowed} ({rule.why})")
            elif kind == "unknown":
                out.append(f"{where}, a third-party header this check does not know; add its "
                           "family to EXTERNAL_PREFIXES and to the components that may use it")


def link_calls(text: str):
    """Yields the argument tokens of each target_link_libraries(...) call."""
    text = re.sub(r"#[^\n]*", "", text)  # comments (no '#' inside link arguments here)
    for m in LINK_RE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield text[m.end():i - 1].split()


def check_links(root: str, name: str, rule: Rule, out: list[str]) -> None:
    for path in walk(root, rule.folder):
        base = os.path.basename(path)
        if base != "CMakeLists.txt" and not base.endswith(".cmake"):
            continue
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for args in link_calls(text):
            if not args:
                continue
            target, libs = args[0], [a for a in args[1:] if a not in LINK_KEYWORDS]
            for lib in libs:
                if lib not in rule.links:
                    allowed = ", ".join(sorted(rule.links))
                    out.append(f"{rel}: {name}'s target {target} links {lib}; {name} may link "
                               f"only: {allowed} ({rule.why})")


def check_folders(root: str, out: list[str]) -> None:
    known = {r.folder for r in RULES.values()}
    daemon = os.path.join(root, "daemon")
    if not os.path.isdir(daemon):
        return
    for d in sorted(os.listdir(daemon)):
        folder = f"daemon/{d}"
        if os.path.isdir(os.path.join(root, folder)) and folder not in known:
            out.append(f"{folder}: a component with no arrows; add its row to "
                       "docs/architecture.md (\"Arrows\") and to RULES in this check")


def check_docs(root: str, out: list[str]) -> None:
    """Each component has its row in docs/architecture.md's "Arrows" table."""
    path = os.path.join(root, "docs", "architecture.md")
    try:
        with open(path, encoding="utf-8") as f:
            rows = [line for line in f if line.startswith("| ")]
    except OSError:
        out.append("docs/architecture.md: missing; it holds the arrows this check enforces")
        return
    for name, rule in RULES.items():
        if not any(row.startswith(f"| {name} | `{rule.folder}`") for row in rows):
            out.append(f"docs/architecture.md: no row \"| {name} | `{rule.folder}`...\" in the "
                       "Arrows table; the check and the page must list the same components")


def check(root: str, require_all: bool = True) -> list[str]:
    out: list[str] = []
    check_folders(root, out)
    if require_all:
        check_docs(root, out)
    for name, rule in RULES.items():
        if not os.path.isdir(os.path.join(root, rule.folder)):
            if require_all:
                out.append(f"{rule.folder}: missing; the check expects component {name} there")
            continue
        check_includes(root, name, rule, out)
        check_links(root, name, rule, out)
    return out


# ---- the self-test: every kind of broken arrow must be caught -------------------------


GOOD_TREE = {
    "daemon/common/include/tpool/common/status.h": "#include <string>\n",
    "daemon/common/CMakeLists.txt":
        "target_link_libraries(tpool_common PUBLIC Threads::Threads PRIVATE tpool::warnings)\n",
    "daemon/pool/src/worker.cc":
        '#include <linux/futex.h>\n#include <atomic>\n#include "tpool/common/status.h"\n'
        '#include "tpool/pool.h"\n#include "pool_internal.h"\n',
    "daemon/pool/src/pool_internal.h": "#pragma once\n",
    "daemon/pool/CMakeLists.txt":
        "target_link_libraries(tpool_pool PUBLIC tpool::common Threads::Threads\n"
        "  PRIVATE tpool::warnings)  # a comment (with parentheses)\n",
    "daemon/metrics/src/collector.cc":
        '#include <prometheus/collectable.h>\n#include "tpool/metrics/snapshot.h"\n'
        '#include "tpool/pool.h"\n',
    "daemon/metrics/CMakeLists.txt":
        "target_link_libraries(tpool_metrics\n  PUBLIC tpool::pool prometheus-cpp::core\n"
        "  PRIVATE prometheus-cpp::pull tpool::warnings)\n",
}

# (what is broken, files added or replaced, a fragment the report must contain)
MUTANTS = [
    ("metrics includes rpc", {"daemon/metrics/src/x.cc": '#include "tpool/rpc/services.h"\n'},
     "metrics includes tpool/rpc/services.h (rpc)"),
    ("metrics includes the engine",
     {"daemon/metrics/src/x.cc": '#include "tpool/engine/engine.h"\n'},
     "metrics includes tpool/engine/engine.h (engine)"),
    ("metrics links rpc", {"daemon/metrics/CMakeLists.txt":
                           "target_link_libraries(tpool_metrics PRIVATE tpool::rpc)\n"},
     "tpool_metrics links tpool::rpc"),
    ("metrics includes gRPC", {"daemon/metrics/src/x.cc": "#include <grpcpp/grpcpp.h>\n"},
     "metrics includes grpcpp/grpcpp.h (grpc)"),
    ("metrics includes protobuf",
     {"daemon/metrics/src/x.cc": "#include <google/protobuf/message.h>\n"},
     "(grpc)"),
    ("pool includes the plugin host",
     {"daemon/pool/src/x.cc": '#include "tpool/plugin_host/host.h"\n'},
     "pool includes tpool/plugin_host/host.h (plugin_host)"),
    ("pool links the plugin host",
     {"daemon/pool/CMakeLists.txt":
      "target_link_libraries(tpool_pool PUBLIC tpool::plugin_host)\n"},
     "tpool_pool links tpool::plugin_host"),
    ("common includes the pool", {"daemon/common/src/x.cc": '#include "tpool/pool.h"\n'},
     "common includes tpool/pool.h (pool)"),
    ("pool includes an unknown library",
     {"daemon/pool/src/x.cc": "#include <boost/intrusive.hpp>\n"},
     "a third-party header this check does not know"),
    ("a tpool/ header of no component",
     {"daemon/pool/src/x.cc": '#include "tpool/sandbox/lane.h"\n'},
     "a tpool/ header of no known component"),
    ("a relative include out of the folder",
     {"daemon/metrics/src/x.cc": '#include "../../pool/src/pool_internal.h"\n'},
     "a file outside daemon/metrics"),
    ("a folder with no arrows", {"daemon/sandbox/src/lane.cc": "#include <string>\n"},
     "daemon/sandbox: a component with no arrows"),
    ("the runner includes the plugin host",
     {"daemon/isolation/runner/x.cc": '#include "tpool/plugin_host/host.h"\n'},
     "runner includes tpool/plugin_host/host.h (plugin_host)"),
    ("the runner includes the supervisor",
     {"daemon/isolation/runner/x.cc": '#include "tpool/isolation/supervisor.h"\n'},
     "runner includes tpool/isolation/supervisor.h (isolation)"),
    ("the engine includes SQLite", {"daemon/engine/src/x.cc": "#include <sqlite3.h>\n"},
     "engine includes sqlite3.h (sqlite)"),
    ("the store includes the engine",
     {"daemon/store/src/x.cc": '#include "tpool/engine/job.h"\n'},
     "store includes tpool/engine/job.h (engine)"),
]


def write_tree(root: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def self_test() -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        write_tree(d, GOOD_TREE)
        got = check(d, require_all=False)
        if got:
            print("self-test: the good tree was rejected:\n  " + "\n  ".join(got))
            failures += 1
    for what, files, want in MUTANTS:
        with tempfile.TemporaryDirectory() as d:
            write_tree(d, GOOD_TREE)
            write_tree(d, files)
            got = check(d, require_all=False)
            if not any(want in line for line in got):
                print(f"self-test: {what}: not caught (wanted a line with '{want}'; got "
                      f"{got or 'nothing'})")
                failures += 1
            else:
                print(f"self-test: {what}: caught")
    # The page and the check list the same components.
    rows = "".join(f"| {n} | `{r.folder}` | x | x | x |\n" for n, r in RULES.items())
    for what, text, want_caught in [("every row", rows, False),
                                    ("a row missing", rows.replace("| rpc |", "| rpcx |"), True)]:
        with tempfile.TemporaryDirectory() as d:
            write_tree(d, {"docs/architecture.md": text})
            got: list[str] = []
            check_docs(d, got)
            if bool(got) != want_caught or (got and "| rpc |" not in got[0]):
                print(f"self-test: docs with {what}: wrong answer {got or 'nothing'}")
                failures += 1
            else:
                print(f"self-test: docs with {what}: {'caught' if want_caught else 'passes'}")
    if failures:
        print(f"self-test: {failures} failure(s); the check would let a broken arrow pass")
        return 1
    print(f"self-test: the good tree passes and all {len(MUTANTS)} broken arrows and the missing "
          "docs row are caught")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.realpath(args.root)
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken arrow(s); the rules are in docs/architecture.md "
              "(\"Arrows\") and RULES in tests/unit/layers/check_layers.py")
        return 1
    print(f"layers: {len(RULES)} components, every include and link follows "
          "docs/architecture.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
