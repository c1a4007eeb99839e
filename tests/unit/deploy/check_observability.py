#!/usr/bin/env python3
"""Checks that the Prometheus rules, the Grafana dashboard and the HPA's
adapter rule name only metrics tpoold exports (the names daemon/metrics/src
registers, else issue 8's list while it does not exist) or recording rules defined in
deploy/prometheus/rules, and that the dashboard shows what issue 8 asks:
throughput, latency percentiles, queue depths, stalls and overflow workers;
and what issue 17 asks: every tpoold_store_* metric, retries and scheduled
jobs on the dashboard, the store's alerts each with a promtool test, and
every alert in docs/operations.md's table; and what issue 18 asks: every
tpoold_isolated_* metric on the dashboard's Isolated plugins row and alerts
for crash loops.
"""

import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from deploy_facts import ROOT, Checker  # noqa: E402

import yaml  # python3-yaml (scripts/install-deps.sh test)

# Issue 8's names: the fallback while docs/metrics.md does not exist.
ISSUE_8_METRICS = {
    "tpoold_watchdog_stalls_total", "tpoold_watchdog_stalled_workers",
    "tpoold_overflow_workers_spawned_total", "tpoold_overflow_workers_retired_total",
    "tpoold_overflow_workers", "tpoold_overflow_workers_max", "tpoold_pool_queue_depth",
    "tpoold_pool_descriptors_live", "tpoold_pool_descriptors_capacity",
    "tpoold_jobs_submitted_total", "tpoold_jobs_completed_total", "tpoold_jobs_rejected_total",
    "tpoold_job_wait_seconds", "tpoold_job_run_seconds", "tpoold_pool_workers",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Issue 17's store metrics (absent where [store] path is empty), and the
# retry metrics the Store row shows with them. The dashboard shows each one
# and every other tpoold_store_* name the exporter registers.
STORE_METRICS = {
    "tpoold_store_commit_duration_seconds", "tpoold_store_jobs_per_commit",
    "tpoold_store_size_bytes", "tpoold_store_pending_jobs",
    "tpoold_store_replayed_jobs_total", "tpoold_store_commit_errors_total",
    "tpoold_store_healthy", "tpoold_jobs_retried_total", "tpoold_jobs_scheduled",
}
STORE_ALERTS = ("TpooldStoreCommitSlow", "TpooldStoreUnhealthy", "TpooldStoreErrors")
# Issue 18: crash loops of process-mode plugins.
ISOLATION_ALERTS = ("TpooldIsolatedRunnerRestarts", "TpooldIsolatedPluginUnhealthy")


def exported_metrics():
    """The names tpoold registers (the string literals in daemon/metrics/src),
    or issue 8's list while the exporter does not exist."""
    src = ROOT / "daemon/metrics/src"
    names = set()
    for path in sorted(src.glob("*.cc")) if src.is_dir() else []:
        names |= set(re.findall(r'"(tpoold_[a-z0-9_]+)"', path.read_text()))
    if not names:
        return ISSUE_8_METRICS, "issue 8"
    return names, "daemon/metrics/src"


def names_in(expr):
    metrics = set(re.findall(r"(?<![:\w])tpoold_[a-z0-9_]+", expr))
    recorded = set(re.findall(r"\btpoold:[a-z0-9_:]+", expr))
    return metrics, recorded


def known(name, exported):
    if name in exported:
        return True
    return any(name.endswith(s) and name[: -len(s)] in exported for s in HISTOGRAM_SUFFIXES)


def main():
    c = Checker("observability")
    exported, source = exported_metrics()
    rules_dir = ROOT / "deploy/prometheus/rules"
    recorded_defined, exprs, alerts = set(), [], {}
    for path in sorted(rules_dir.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    recorded_defined.add(rule["record"])
                if "alert" in rule:
                    alerts[rule["alert"]] = rule
                exprs.append((f"{path.name}: {rule.get('record') or rule.get('alert')}",
                              rule["expr"]))
    dash_path = ROOT / "deploy/grafana/tpoold-dashboard.json"
    dash = json.loads(dash_path.read_text())
    c.check(dash.get("uid") and dash.get("title"), "the dashboard has no uid or title")
    dash_exprs = []
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            dash_exprs.append((f"dashboard panel '{panel['title']}'", t["expr"]))
    adapter = yaml.safe_load((ROOT / "deploy/k8s/prometheus-adapter-rules.yaml").read_text())
    for r in yaml.safe_load(adapter["data"]["config.yaml"])["rules"]:
        exprs.append(("prometheus-adapter rule", r["seriesQuery"]))

    for where, expr in exprs + dash_exprs:
        metrics, recorded = names_in(expr)
        for m in sorted(metrics):
            c.check(known(m, exported), f"{where} uses {m}, which {source} does not list")
        for r in sorted(recorded):
            c.check(r in recorded_defined, f"{where} uses {r}, which no recording rule defines")

    shown = set()
    for _, expr in dash_exprs:
        shown |= names_in(expr)[0]
    for need, why in (("tpoold_jobs_completed_total", "throughput"),
                      ("tpoold_job_wait_seconds_bucket", "wait latency percentiles"),
                      ("tpoold_job_run_seconds_bucket", "run latency percentiles"),
                      ("tpoold_pool_queue_depth", "queue depths"),
                      ("tpoold_watchdog_stalls_total", "watchdog stalls"),
                      ("tpoold_overflow_workers", "overflow workers")):
        c.check(need in shown, f"the dashboard does not show {need} ({why})")
    c.check(any("histogram_quantile(0.99" in e for _, e in dash_exprs),
            "the dashboard has no p99 panel")

    # The durable store (issue 17).
    def base(name):
        for s in HISTOGRAM_SUFFIXES:
            if name.endswith(s) and name[: -len(s)] in STORE_METRICS | exported:
                return name[: -len(s)]
        return name
    shown_bases = {base(m) for m in shown}
    store_exported = {m for m in exported if m.startswith("tpoold_store_")} if source != "issue 8" else set()
    for need in sorted(STORE_METRICS | store_exported):
        c.check(need in shown_bases, f"the dashboard does not show {need} (issue 17: the Store row)")
    c.check(any(p.get("type") == "row" and "Store" in p.get("title", "") for p in dash["panels"]),
            "the dashboard has no Store row")
    # Isolated plugins (issue 18).
    isolated_exported = {m for m in exported if m.startswith("tpoold_isolated_")}
    c.check(source == "issue 8" or isolated_exported,
            "daemon/metrics/src registers no tpoold_isolated_* metric")
    for need in sorted(isolated_exported):
        c.check(need in shown_bases,
                f"the dashboard does not show {need} (issue 18: the Isolated plugins row)")
    c.check(any(p.get("type") == "row" and "Isolated" in p.get("title", "") for p in dash["panels"]),
            "the dashboard has no Isolated plugins row")
    for name in ISOLATION_ALERTS:
        c.check(name in alerts, f"no alert {name} in deploy/prometheus/rules")
    tests_text = "\n".join(p.read_text() for p in sorted((ROOT / "deploy/prometheus/tests").glob("*.yml")))
    ops = (ROOT / "docs/operations.md").read_text()
    for name in STORE_ALERTS:
        c.check(name in alerts, f"no alert {name} in deploy/prometheus/rules")
    for name in alerts:
        c.check(re.search(rf"alertname: {name}\b", tests_text) is not None,
                f"alert {name} has no promtool test in deploy/prometheus/tests")
        c.check(f"`{name}`" in ops, f"docs/operations.md's alert table does not list {name}")
    print(f"observability: metric names checked against {source}")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
