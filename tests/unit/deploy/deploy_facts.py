"""What the deploy files must agree with, read from the daemon's own sources.

The daemon's defaults come from daemon/server/src/config.h (the one place
they are written, see its header comment) and, where it exists, the table in
docs/configuration.md; the packaged config deploy/tpoold.toml overrides them.
Every check in tests/unit/deploy compares the manifests, the unit and the
Dockerfile against these facts instead of repeating numbers.
"""

import pathlib
import re
import sys

try:
    import tomllib  # Python 3.11+ (Debian 12 ships 3.11)
except ImportError:  # pragma: no cover
    sys.exit("deploy tests need Python 3.11 or newer for tomllib")

ROOT = pathlib.Path(__file__).resolve().parents[3]


class Facts:
    def __init__(self, root=ROOT):
        self.root = pathlib.Path(root)
        self.defaults = self._daemon_defaults()
        self.packaged = tomllib.loads((self.root / "deploy/tpoold.toml").read_text())

    def _daemon_defaults(self):
        """{"server.listen": "127.0.0.1:50051", "server.drain_timeout_ms": 30000, ...}"""
        header = self.root / "daemon/server/src/config.h"
        if not header.exists():
            raise SystemExit(f"{header} does not exist; the deploy checks read the daemon's "
                             "defaults from it")
        out = {}
        section = None
        for line in header.read_text().splitlines():
            m = re.match(r"struct (\w+)Section \{", line)
            if m:
                section = m.group(1).lower()
                continue
            if line.startswith("};"):
                section = None
                continue
            if section is None:
                continue
            # `type name = default;` or `type name;` (a string that defaults to "").
            m = re.match(r"\s+[\w:]+\s+(\w+)\s*(?:=\s*([^;]+))?;", line)
            if not m:
                continue
            key, value = m.group(1), (m.group(2) or '""').strip()
            out[f"{section}.{key}"] = _cxx_value(value)
        for required in ("server.listen", "server.drain_timeout_ms", "server.cancel_grace_ms",
                         "metrics.listen"):
            if required not in out:
                raise SystemExit(f"{header} no longer declares {required} with a default; "
                                 "update tests/unit/deploy/deploy_facts.py")
        return out

    def get(self, dotted):
        """The packaged config's value, else the daemon's default."""
        section, key = dotted.split(".", 1)
        if key in self.packaged.get(section, {}):
            return self.packaged[section][key]
        return self.defaults[dotted]

    @property
    def grpc_port(self):
        return int(str(self.get("server.listen")).rsplit(":", 1)[1])

    @property
    def metrics_port(self):
        return int(str(self.get("metrics.listen")).rsplit(":", 1)[1])

    @property
    def drain_seconds(self):
        """The longest a SIGTERM'd daemon may take to exit: drain, then the grace."""
        return (int(self.get("server.drain_timeout_ms")) +
                int(self.get("server.cancel_grace_ms"))) / 1000.0

    config_path = "/etc/tpoold/tpoold.toml"
    plugin_dir = "/usr/lib/tpool/plugins"
    user_plugin_dir = "/etc/tpoold/plugins.d"


def _cxx_value(text):
    """A C++ default initialiser as a Python value: "x", 30000, 4u << 20, true."""
    if text.startswith('"'):
        return text.strip('"')
    if text in ("true", "false"):
        return text == "true"
    m = re.fullmatch(r"(\d+)u?(?:ll|ull)?(?:\s*<<\s*(\d+))?", text)
    if m:
        return int(m.group(1)) << int(m.group(2) or 0)
    return text


class Checker:
    """Collects failures so one run reports all of them."""

    def __init__(self, what):
        self.what = what
        self.failures = []
        self.passed = 0

    def check(self, ok, sentence):
        if ok:
            self.passed += 1
        else:
            self.failures.append(sentence)

    def finish(self):
        for f in self.failures:
            print(f"FAIL {self.what}: {f}")
        print(f"{self.what}: {self.passed} checks passed, {len(self.failures)} failed")
        return 1 if self.failures else 0
